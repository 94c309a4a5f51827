/**
 * @module env-config
 * Reading typed settings from environment variables, with errors that name the variable. Services
 * build their config with these in `config.ts` (units in the names: `…_MS`, `…_BYTES`). Each reader
 * is a zod schema over the variable's trimmed text (unset or blank: absent); the first issue becomes an
 * EnvConfigError naming the variable.
 */
import { z } from 'zod';

export class EnvConfigError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`${variable}: ${message}`);
    this.name = 'EnvConfigError';
  }
}

export type Env = Readonly<Record<string, string | undefined>>;

function raw(env: Env, name: string): string | undefined {
  const v = env[name];
  return v === undefined || v.trim() === '' ? undefined : v.trim();
}

/** Parses the variable's text with `schema`; its first issue's message becomes the EnvConfigError. */
function parse<T>(name: string, text: string, schema: z.ZodType<T, string>): T {
  const r = schema.safeParse(text);
  if (r.success) return r.data;
  throw new EnvConfigError(name, r.error.issues[0]?.message ?? `is not valid, got "${text}"`);
}

/** Integer text in [min, max]. */
function intSchema(text: string, min: number, max: number): z.ZodType<number, string> {
  return z
    .string()
    .regex(/^-?\d+$/, `must be an integer, got "${text}"`)
    .transform(Number)
    .refine(Number.isSafeInteger, `must be an integer, got "${text}"`)
    .refine((n) => n >= min && n <= max, { message: `must be between ${min} and ${max}, got ${Number(text)}` });
}

/** A required string. */
export function envString(env: Env, name: string, hint = ''): string {
  const v = raw(env, name);
  if (v === undefined) throw new EnvConfigError(name, `is required${hint !== '' ? ` (${hint})` : ''}`);
  return v;
}

/** An optional string (unset or blank → undefined). */
export function envOptionalString(env: Env, name: string): string | undefined {
  return raw(env, name);
}

/** An integer in [min, max]; unset → `fallback`. */
export function envInt(env: Env, name: string, fallback: number, bounds: { min?: number; max?: number } = {}): number {
  const v = raw(env, name);
  if (v === undefined) return fallback;
  return parse(name, v, intSchema(v, bounds.min ?? Number.MIN_SAFE_INTEGER, bounds.max ?? Number.MAX_SAFE_INTEGER));
}

/** An optional integer ≥ min (unset → undefined). */
export function envOptionalInt(env: Env, name: string, bounds: { min?: number; max?: number } = {}): number | undefined {
  return raw(env, name) === undefined ? undefined : envInt(env, name, 0, bounds);
}

/** An optional finite number in [min, max] (unset → undefined). */
export function envOptionalNumber(env: Env, name: string, bounds: { min?: number; max?: number } = {}): number | undefined {
  const v = raw(env, name);
  if (v === undefined) return undefined;
  const min = bounds.min ?? -Infinity;
  const max = bounds.max ?? Infinity;
  const schema = z
    .string()
    .transform(Number)
    .refine(Number.isFinite, `must be a number, got "${v}"`)
    .refine((n) => n >= min && n <= max, { message: `must be between ${min} and ${max}, got ${Number(v)}` });
  return parse(name, v, schema);
}

/** One of `choices`; unset → `fallback`. */
export function envChoice<T extends string>(env: Env, name: string, choices: readonly T[], fallback: T): T {
  const v = raw(env, name);
  if (v === undefined) return fallback;
  const schema = z.string().refine((s): s is T => (choices as readonly string[]).includes(s), `must be one of ${choices.join(', ')}, got "${v}"`);
  return parse(name, v, schema as unknown as z.ZodType<T, string>);
}

/** One of `choices`, or undefined when unset. */
export function envOptionalChoice<T extends string>(env: Env, name: string, choices: readonly T[]): T | undefined {
  return raw(env, name) === undefined ? undefined : envChoice(env, name, choices, choices[0] as T);
}

/** A redis:// or rediss:// URL. */
export function envRedisUrl(env: Env, name = 'REDIS_URL'): string {
  const v = envString(env, name, 'e.g. redis://127.0.0.1:6379');
  return parse(name, v, z.string().regex(/^rediss?:\/\//, `must be a redis:// or rediss:// URL, got "${v}"`));
}
