/**
 * @module batch/input-lines
 * A batch input file (JSONL, OpenAI's format: one `{custom_id, method, url, body}` per line) read
 * into lines. Problems of the file as a whole (not UTF-8, no request, too many) fail the batch;
 * problems of one line (not JSON, a missing or repeated custom_id, another url than the batch's
 * endpoint, a line longer than CSA2_MAX_BODY_BYTES) become that line's error entry and the other
 * lines run. Blank lines are skipped; `index` counts requests, `lineNumber` counts file lines (1-based).
 */
import type { BatchError } from './batch-object.js';
import { BatchInputLineSchema, type BatchEndpoint } from '../schemas/batches.js';

export interface InputLine {
  /** 0-based position among the file's requests (blank lines do not count). */
  readonly index: number;
  /** 1-based line of the file. */
  readonly lineNumber: number;
  /** The line's custom_id when it has a usable one. */
  readonly customId: string | null;
  /** The request body (valid envelope only). */
  readonly body: Readonly<Record<string, unknown>> | null;
  /** Why the line cannot run (its error entry), or null. */
  readonly problem: { readonly code: string; readonly message: string } | null;
}

export interface ParsedInput {
  readonly lines: readonly InputLine[];
  /** Set when the file as a whole is unusable: the batch fails with it. */
  readonly error: BatchError | null;
}

export interface ParseInputOptions {
  readonly endpoint: BatchEndpoint;
  readonly maxLines: number;
  /** A line is one request body: at most CSA2_MAX_BODY_BYTES. */
  readonly maxLineBytes: number;
}

function failed(code: string, message: string): ParsedInput {
  return { lines: [], error: { code, message, param: 'input_file_id', line: null } };
}

/** Counts the requests (non-blank lines) of a file without parsing them; null when it is not UTF-8. */
export function countInputLines(bytes: Uint8Array): number | null {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return null;
  }
  let n = 0;
  for (const line of text.split('\n')) if (line.trim() !== '') n++;
  return n;
}

export function parseInputFile(bytes: Uint8Array, options: ParseInputOptions): ParsedInput {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return failed('invalid_file', 'the input file is not UTF-8 text');
  }
  const raw = text.split('\n');
  const lines: InputLine[] = [];
  const seen = new Set<string>();
  for (const [i, rawLine] of raw.entries()) {
    const line = rawLine.endsWith('\r') ? rawLine.slice(0, -1) : rawLine;
    if (line.trim() === '') continue;
    if (lines.length === options.maxLines) {
      return failed('too_many_lines', `the input file has more than ${options.maxLines} requests (CSA2_BATCH_MAX_LINES)`);
    }
    const base = { index: lines.length, lineNumber: i + 1 };
    const bad = (customId: string | null, code: string, message: string): InputLine => ({
      ...base,
      customId,
      body: null,
      problem: { code, message: `line ${base.lineNumber}: ${message}` },
    });
    if (Buffer.byteLength(line) > options.maxLineBytes) {
      lines.push(bad(null, 'line_too_large', `the line is longer than ${options.maxLineBytes} bytes (CSA2_MAX_BODY_BYTES)`));
      continue;
    }
    let json: unknown;
    try {
      json = JSON.parse(line);
    } catch (err) {
      lines.push(bad(null, 'invalid_json_line', `not valid JSON (${err instanceof Error ? err.message : String(err)})`));
      continue;
    }
    const customIdRaw = typeof json === 'object' && json !== null && 'custom_id' in json ? (json as { custom_id: unknown }).custom_id : undefined;
    const customId = typeof customIdRaw === 'string' && customIdRaw !== '' && customIdRaw.length <= 512 ? customIdRaw : null;
    const r = BatchInputLineSchema.safeParse(json);
    if (!r.success) {
      const issue = r.error.issues[0];
      const field = issue?.path.length !== undefined && issue.path.length > 0 ? issue.path.join('.') : '(line)';
      lines.push(bad(customId, 'invalid_request', `'${field}' ${issue?.message ?? 'is invalid'}`));
      continue;
    }
    if (seen.has(r.data.custom_id)) {
      lines.push(bad(null, 'duplicate_custom_id', `custom_id '${r.data.custom_id}' appears on an earlier line; every line needs its own`));
      continue;
    }
    seen.add(r.data.custom_id);
    if (r.data.url !== options.endpoint) {
      lines.push(bad(r.data.custom_id, 'mismatched_endpoint', `url '${r.data.url}' differs from the batch's endpoint '${options.endpoint}'`));
      continue;
    }
    lines.push({ ...base, customId: r.data.custom_id, body: r.data.body, problem: null });
  }
  if (lines.length === 0) return failed('empty_file', 'the input file holds no request');
  return { lines, error: null };
}
