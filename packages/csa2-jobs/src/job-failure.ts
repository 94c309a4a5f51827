/**
 * @module job-failure
 * How the workers' processors end a job that does not succeed; the same policy on both queues.
 *
 * - A malformed payload (`parseJobPayload`): logged, the request's error entry written when the
 *   payload holds a readable request id, and UnrecoverableError `[payload-invalid] …` (no retry).
 * - The worker shutting down past its grace period: BullMQ aborts the job's signal
 *   (`followJobSignal`), the processor stops its work and throws HandBackError, and `handJobBack`
 *   moves the job back to the queue without using an attempt.
 * - Any other error (`failJob`): a deterministic code (DETERMINISTIC_ERROR_CODES; a JobPayloadError
 *   is 'payload-invalid') → UnrecoverableError, no retry; anything else → an Error that BullMQ
 *   retries with backoff. When the failure is final (deterministic, or the job's last attempt) the
 *   request's error entry is written first, so the client is never left waiting.
 *
 * Failure texts are `[code] message` (formatFailure; parseFailure reads them back).
 */
import { DelayedError, UnrecoverableError, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import { errorCodeOf, formatFailure, isDeterministicError } from './job-options.js';
import { errorFields, type Logger } from './log-line.js';
import { ID_PATTERN, JobPayloadError } from './payloads.js';
import { appendStreamEntry } from './stream-writer.js';

/** Writes the error entry of request `requestId` (writeErrorEntry bound to a connection and logger). */
export type ErrorEntryWriter = (requestId: string, code: string, message: string) => Promise<void>;

/** Appends the error entry to the request's stream; a Redis failure is logged, not thrown. */
export async function writeErrorEntry(redis: Redis, log: Logger, requestId: string, code: string, message: string, ttlMs?: number): Promise<void> {
  try {
    await appendStreamEntry(redis, requestId, { kind: 'error', code, message }, ttlMs);
  } catch (err) {
    log('error', 'could not write the error entry', { requestId, code, ...errorFields(err) });
  }
}

/**
 * The request id of a payload that failed to parse, when it is there and well-formed — and, given
 * `kind`, when the payload says it is of that kind.
 */
export function readableRequestId(data: unknown, kind?: string): string | null {
  if (typeof data !== 'object' || data === null) return null;
  const d = data as { kind?: unknown; requestId?: unknown };
  if (kind !== undefined && d.kind !== kind) return null;
  return typeof d.requestId === 'string' && ID_PATTERN.test(d.requestId) ? d.requestId : null;
}

export interface ParseJobPayloadOptions {
  /** The payload kind in the log line: 'malformed <what> job'. */
  readonly what: string;
  readonly log: Logger;
  /** The request whose stream gets the error entry, read from the raw payload (readableRequestId). */
  readonly requestIdOf: (data: unknown) => string | null;
  readonly writeError: ErrorEntryWriter;
}

/** `parse(job.data)`; a JobPayloadError fails the job for good (see the module doc). */
export async function parseJobPayload<T, R>(job: Job<unknown, R>, parse: (data: unknown) => T, opts: ParseJobPayloadOptions): Promise<T> {
  try {
    return parse(job.data);
  } catch (err) {
    if (!(err instanceof JobPayloadError)) throw err;
    const requestId = opts.requestIdOf(job.data);
    opts.log('warn', `malformed ${opts.what} job`, { jobId: job.id, requestId, issues: err.issues });
    if (requestId !== null) await opts.writeError(requestId, 'payload-invalid', err.message);
    throw new UnrecoverableError(formatFailure('payload-invalid', err.message));
  }
}

/** Thrown inside a processor once BullMQ aborted the job (shutdown past the grace period): hand it back. */
export class HandBackError extends Error {
  constructor() {
    super('the worker is shutting down: the job goes back to the queue');
    this.name = 'HandBackError';
  }
}

/**
 * Follows BullMQ's per-job `signal` (aborted when the worker closes past its grace period): calls
 * `onAbort` once, at once when the signal is aborted already. Returns the function that stops it.
 */
export function followJobSignal(signal: AbortSignal | undefined, onAbort: () => void): () => void {
  signal?.addEventListener('abort', onAbort, { once: true });
  if (signal?.aborted === true) onAbort();
  return () => signal?.removeEventListener('abort', onAbort);
}

/** Moves the job back to the queue without using an attempt; returns the DelayedError to throw. */
export async function handJobBack<R>(
  job: Job<unknown, R>,
  token: string | undefined,
  log: Logger,
  fields: Readonly<Record<string, unknown>>,
): Promise<DelayedError> {
  log('info', 'handing the job back (shutting down)', fields);
  await job.moveToDelayed(Date.now(), token);
  return new DelayedError();
}

export interface FailJobOptions {
  readonly log: Logger;
  /** The log line ('decode failed'); `fields` lead its fields, then code, deterministic, attempt and the error. */
  readonly msg: string;
  readonly fields: Readonly<Record<string, unknown>>;
  /** The request whose stream gets the error entry when the failure is final; null: none. */
  readonly requestId: string | null;
  readonly writeError: ErrorEntryWriter;
}

/** True when `err` ends the job for good: deterministic, or on the job's last attempt. */
export function isFinalFailure<R>(err: unknown, job: Job<unknown, R>): boolean {
  return err instanceof JobPayloadError || isDeterministicError(err) || job.attemptsMade + 1 >= (job.opts.attempts ?? 1);
}

/** Logs a failed job, writes the error entry when the failure is final, and returns what to throw. */
export async function failJob<R>(err: unknown, job: Job<unknown, R>, opts: FailJobOptions): Promise<Error> {
  const payloadInvalid = err instanceof JobPayloadError;
  const code = payloadInvalid ? 'payload-invalid' : (errorCodeOf(err) ?? 'runtime');
  const message = err instanceof Error ? err.message : String(err);
  const deterministic = payloadInvalid || isDeterministicError(err);
  const attempt = job.attemptsMade + 1;
  const final = isFinalFailure(err, job);
  opts.log(final ? 'error' : 'warn', opts.msg, { ...opts.fields, code, deterministic, attempt, ...errorFields(err) });
  if (final && opts.requestId !== null) await opts.writeError(opts.requestId, code, message);
  if (deterministic) return new UnrecoverableError(formatFailure(code, message));
  return new Error(formatFailure(code, message), { cause: err });
}
