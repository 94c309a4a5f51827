/**
 * @module schemas/issues
 * A zod issue → the sentence a client reads, in OpenAI's wording where it has one:
 *
 * | issue | message | code |
 * |---|---|---|
 * | a required field is absent | `Missing required parameter: 'messages'.` | missing_required_parameter |
 * | wrong type | `Invalid type for 'n': expected an integer, but got a decimal number instead.` | invalid_type |
 * | out of range | `Invalid value for 'temperature': must be at most 2, got 2.5.` | invalid_value |
 * | too many / too few items | `Invalid value for 'stop': at most 4 stop sequences, got 5.` | invalid_value |
 * | union (string or array, …) | the branch that matched the value's type, else `expected a string or an array` | as that branch |
 *
 * A message written in the schema (`z.string().regex(…, 'must match …')`) is kept; zod's own
 * defaults ("Invalid input", "Too big: expected number to be <=2") never reach a client.
 */
import type { z } from 'zod';

type Issue = z.core.$ZodIssue;

export interface ClientIssue {
  /** The parameter path as OpenAI writes it (`messages[0].role`), null for the body itself. */
  readonly param: string | null;
  readonly message: string;
  readonly code: 'missing_required_parameter' | 'invalid_type' | 'invalid_value';
}

export function paramOf(path: readonly PropertyKey[]): string | null {
  if (path.length === 0) return null;
  return path
    .map((p) => (typeof p === 'number' ? `[${p}]` : String(p)))
    .join('.')
    .replaceAll('.[', '[');
}

/** zod's default messages start like this; anything else was written for the client. */
const ZOD_DEFAULT = /^(Invalid input|Invalid option|Invalid string|Invalid element|Invalid key|Too big|Too small|Expected|Unrecognized key|Invalid [a-z]+$)/;

function valueAt(body: unknown, path: readonly PropertyKey[]): { found: boolean; value: unknown } {
  let v: unknown = body;
  for (const key of path) {
    if (typeof v !== 'object' || v === null || !(key in v)) return { found: false, value: undefined };
    v = (v as Record<PropertyKey, unknown>)[key];
  }
  return { found: true, value: v };
}

function describeValue(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'an integer' : 'a decimal number';
  if (typeof v === 'object') return 'an object';
  return `a ${typeof v}`;
}

const EXPECTED: Readonly<Record<string, string>> = {
  string: 'a string',
  number: 'a number',
  int: 'an integer',
  boolean: 'a boolean',
  array: 'an array',
  object: 'an object',
  record: 'an object',
  null: 'null',
};
const expected = (name: string): string => EXPECTED[name] ?? name;

function count(v: unknown): string {
  if (Array.isArray(v)) return `, got ${v.length}`;
  if (typeof v === 'string') return `, got ${v.length} characters`;
  if (typeof v === 'number') return `, got ${v}`;
  return '';
}

function bound(issue: Extract<Issue, { code: 'too_big' | 'too_small' }>, value: unknown): string {
  const big = issue.code === 'too_big';
  const limit = Number(big ? issue.maximum : issue.minimum);
  const inclusive = issue.inclusive !== false;
  switch (issue.origin) {
    case 'array':
    case 'set':
      return big
        ? `at most ${limit} item${limit === 1 ? '' : 's'} are allowed${count(value)}`
        : `at least ${limit} item${limit === 1 ? ' is' : 's are'} needed${count(value)}`;
    case 'string':
      return big
        ? `at most ${limit} character${limit === 1 ? '' : 's'} are allowed${count(value)}`
        : `at least ${limit} character${limit === 1 ? ' is' : 's are'} needed${count(value)}`;
    default:
      return `must be ${big ? (inclusive ? 'at most' : 'less than') : inclusive ? 'at least' : 'greater than'} ${limit}${count(value)}`;
  }
}

function prefixed(path: readonly PropertyKey[], issue: Issue): Issue {
  return { ...issue, path: [...path, ...issue.path] } as Issue;
}

/** Ends `s` with a full stop unless it ends a sentence already. */
const sentence = (s: string): string => (/[.!?]$/.test(s) ? s : `${s}.`);

/** The client's sentence for one issue of `body`. */
export function clientIssue(issue: Issue, body: unknown): ClientIssue {
  const r = rawIssue(issue, body);
  return { ...r, message: sentence(r.message) };
}

function rawIssue(issue: Issue, body: unknown): ClientIssue {
  const param = paramOf(issue.path);
  const name = param ?? 'the request body';
  const at = valueAt(body, issue.path);
  const custom = !ZOD_DEFAULT.test(issue.message);
  // optional fields never raise an issue when absent: an issue at an absent path is a missing required one
  if (!at.found || at.value === undefined) {
    // (a type error's own message is written for exactly this: 'you must provide a model parameter')
    return {
      param,
      message: issue.code === 'invalid_type' && custom ? issue.message : `Missing required parameter: '${name}'`,
      code: 'missing_required_parameter',
    };
  }
  switch (issue.code) {
    case 'invalid_type':
      if (custom) return { param, message: `Invalid value for '${name}': ${issue.message}`, code: 'invalid_value' };
      return {
        param,
        message: `Invalid type for '${name}': expected ${expected(issue.expected)}, but got ${describeValue(at.value)} instead`,
        code: 'invalid_type',
      };
    case 'too_big':
    case 'too_small':
      return {
        param,
        message: `Invalid value for '${name}': ${custom ? `${issue.message}${count(at.value)}` : bound(issue, at.value)}`,
        code: 'invalid_value',
      };
    case 'invalid_union': {
      if (custom) return { param, message: `Invalid value for '${name}': ${issue.message}`, code: 'invalid_value' };
      // the branch that accepted the value's type and objected to something else speaks for the union
      const branches = issue.errors.filter((errs) => errs.length > 0);
      const typed = branches.find((errs) => !(errs[0]?.code === 'invalid_type' && errs[0].path.length === 0));
      if (typed?.[0] !== undefined) return rawIssue(prefixed(issue.path, typed[0]), body);
      const kinds = [...new Set(branches.map((errs) => (errs[0]?.code === 'invalid_type' ? expected(errs[0].expected) : '')).filter((k) => k !== ''))];
      return { param, message: `Invalid type for '${name}': expected ${kinds.join(' or ')}, but got ${describeValue(at.value)} instead`, code: 'invalid_type' };
    }
    case 'invalid_value':
      if (custom) return { param, message: `Invalid value for '${name}': ${issue.message}`, code: 'invalid_value' };
      return {
        param,
        message: `Invalid value for '${name}': must be one of ${issue.values.map((v) => JSON.stringify(v)).join(', ')}, got ${JSON.stringify(at.value)?.slice(0, 40) ?? 'nothing'}`,
        code: 'invalid_value',
      };
    default:
      return { param, message: `Invalid value for '${name}': ${custom ? issue.message : 'not valid here'}`, code: 'invalid_value' };
  }
}
