/**
 * @module log-line
 * One logger and one format for every service (gateway and workers): pino, one JSON object per line
 * on stdout — `{"level":"info","time":"2026-…Z","service":"decoder-worker", …fields, "msg":"…"}` —
 * what log collectors expect from a container.
 *
 * Request context: `withLogFields({ reqId, … }, fn)` runs `fn` with fields that every line logged
 * inside it (synchronously or in anything it awaits, timers included) carries, through an
 * AsyncLocalStorage read by the loggers' `mixin`. The gateway binds each HTTP request's
 * `x-request-id` (`reqId`) this way; the workers bind each job's `reqId`, `requestId` and `jobId`.
 * Fields given at the call site win over the context's.
 *
 * Workers' code logs through `Logger`, a plain function (`log('info', 'msg', fields)`) so that
 * processors and tests can pass `silentLogger` or a recorder; `pinoLogFunction` adapts a pino logger.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { pino, type DestinationStream, type Logger as PinoLogger } from 'pino';

export const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export type Logger = (level: LogLevel, msg: string, fields?: Readonly<Record<string, unknown>>) => void;

export type LogFields = Readonly<Record<string, unknown>>;

export const silentLogger: Logger = () => undefined;

const context = new AsyncLocalStorage<LogFields>();

/** Runs `fn` with `fields` added to every log line inside it (nested calls merge, inner fields win). */
export function withLogFields<T>(fields: LogFields, fn: () => T): T {
  const outer = context.getStore();
  return context.run(outer === undefined ? { ...fields } : { ...outer, ...fields }, fn);
}

/** The fields of the current log context ({} outside any). */
export function currentLogFields(): LogFields {
  return context.getStore() ?? {};
}

/**
 * The services' pino logger: `service` in every line, ISO time, level names, the log context's
 * fields. `level` 'silent' logs nothing. `destination`: any `{ write(line) }`. @defaultValue stdout
 */
export function createServiceLogger(service: string, level: LogLevel | 'silent' = 'info', destination?: DestinationStream): PinoLogger {
  const options = {
    level,
    base: { service },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label: string) => ({ level: label }) },
    mixin: () => ({ ...currentLogFields() }),
  };
  return destination === undefined ? pino(options) : pino(options, destination);
}

/** A `Logger` function on a pino logger. */
export function pinoLogFunction(logger: PinoLogger): Logger {
  return (level, msg, fields = {}) => logger[level]({ ...fields }, msg);
}

/** A `Logger` for `service` at `minLevel` or above (createServiceLogger's format), on `out` (default stdout). */
export function jsonLogger(service: string, minLevel: LogLevel = 'info', out?: { write(s: string): unknown }): Logger {
  const destination: DestinationStream | undefined = out === undefined ? undefined : { write: (s: string) => void out.write(s) };
  return pinoLogFunction(createServiceLogger(service, minLevel, destination));
}

/** An error as log fields. */
export function errorFields(err: unknown): Record<string, unknown> {
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    return { err: err.message, errName: err.name, ...(typeof code === 'string' ? { code } : {}) };
  }
  return { err: String(err) };
}
