/**
 * @module env-config
 * Reading typed settings from environment variables, with errors that name the variable. Services
 * build their config with these in `config.ts` (units in the names: `…_MS`, `…_BYTES`).
 */

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
  const n = Number(v);
  const min = bounds.min ?? Number.MIN_SAFE_INTEGER;
  const max = bounds.max ?? Number.MAX_SAFE_INTEGER;
  if (!/^-?\d+$/.test(v) || !Number.isSafeInteger(n)) throw new EnvConfigError(name, `must be an integer, got "${v}"`);
  if (n < min || n > max) throw new EnvConfigError(name, `must be between ${min} and ${max}, got ${n}`);
  return n;
}

/** An optional integer ≥ min (unset → undefined). */
export function envOptionalInt(env: Env, name: string, bounds: { min?: number; max?: number } = {}): number | undefined {
  return raw(env, name) === undefined ? undefined : envInt(env, name, 0, bounds);
}

/** An optional finite number in [min, max] (unset → undefined). */
export function envOptionalNumber(env: Env, name: string, bounds: { min?: number; max?: number } = {}): number | undefined {
  const v = raw(env, name);
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new EnvConfigError(name, `must be a number, got "${v}"`);
  const min = bounds.min ?? -Infinity;
  const max = bounds.max ?? Infinity;
  if (n < min || n > max) throw new EnvConfigError(name, `must be between ${min} and ${max}, got ${n}`);
  return n;
}

/** One of `choices`; unset → `fallback`. */
export function envChoice<T extends string>(env: Env, name: string, choices: readonly T[], fallback: T): T {
  const v = raw(env, name);
  if (v === undefined) return fallback;
  if (!(choices as readonly string[]).includes(v)) throw new EnvConfigError(name, `must be one of ${choices.join(', ')}, got "${v}"`);
  return v as T;
}

/** A redis:// or rediss:// URL. */
export function envRedisUrl(env: Env, name = 'REDIS_URL'): string {
  const v = envString(env, name, 'e.g. redis://127.0.0.1:6379');
  if (!/^rediss?:\/\//.test(v)) throw new EnvConfigError(name, `must be a redis:// or rediss:// URL, got "${v}"`);
  return v;
}
