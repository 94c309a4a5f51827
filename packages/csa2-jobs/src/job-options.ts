/**
 * @module job-options
 * Default BullMQ job options for the two queues, job names, and the classification of errors into
 * deterministic (fail at once, no retry) and transient (retry with backoff).
 */
import type { JobsOptions } from 'bullmq';

/**
 * Default options for a decode job. Add with `jobId: requestDecodeJobId(requestId)` so that a
 * repeated enqueue (a retried gateway request, a retried encoder job) is a no-op.
 *
 * - `attempts: 5`, exponential backoff from 1000 ms: retries after 1, 2, 4, 8 s (15 s in all) —
 *   enough to ride out a Redis failover or an engine-thread restart.
 * - completed jobs are kept 1 h (the stream holds the output anyway), failed ones 24 h for inspection.
 */
export const DEFAULT_DECODE_JOB_OPTIONS = {
  attempts: 5,
  backoff: { type: 'exponential', delay: 1000 },
  removeOnComplete: { age: 3600 },
  removeOnFail: { age: 24 * 3600 },
} as const satisfies JobsOptions;

/**
 * Default options for a prefill job (`jobId: documentJobId(tenant, documentId)` for documents,
 * `requestPrefillJobId(requestId)` for long prompts).
 *
 * - `attempts: 5`, exponential backoff from 2000 ms (2, 4, 8, 16 s): object-store hiccups are the
 *   usual transient failure here; ingestion is idempotent (content-addressed chunks, manifest last),
 *   so a retry re-uses every chunk the failed attempt already wrote.
 * - completed jobs are kept 1 h (the manifest is the durable record), failed ones 24 h.
 */
export const DEFAULT_PREFILL_JOB_OPTIONS = {
  attempts: 5,
  backoff: { type: 'exponential', delay: 2000 },
  removeOnComplete: { age: 3600 },
  removeOnFail: { age: 24 * 3600 },
} as const satisfies JobsOptions;

/** BullMQ job names (informational: workers accept any name on their queue). */
export const DECODE_JOB_NAME = 'decode';
export const PREFILL_JOB_NAME = 'prefill';

/**
 * Error codes (Csa2Error `code`, plus 'payload-invalid' for a malformed job) that retrying cannot
 * fix. Everything else — 'store-unavailable', 'runtime' (e.g. the engine thread died), Redis errors,
 * errors without a code — is treated as transient.
 */
export const DETERMINISTIC_ERROR_CODES: ReadonlySet<string> = new Set([
  'payload-invalid',
  'input-invalid',
  'not-found',
  'artifact-corrupt',
  'artifact-missing',
  'model-mismatch',
  'unsupported-version',
  'unsupported-feature',
  'config-invalid',
  'checkpoint-invalid',
  'store-config',
  'shape-mismatch',
  'cache-format',
  // raised by the workers themselves:
  'stream-invalid', // the request's stream holds a gap or an entry no worker wrote (StreamStateError)
]);

/** The `code` of an error (Csa2Error and EngineError carry one), or null. */
export function errorCodeOf(err: unknown): string | null {
  if (typeof err === 'object' && err !== null && 'code' in err) {
    const code = (err as { code?: unknown }).code;
    if (typeof code === 'string' && code.length > 0) return code;
  }
  return null;
}

/** True when the error can never succeed on retry (its code is in DETERMINISTIC_ERROR_CODES). */
export function isDeterministicError(err: unknown): boolean {
  const code = errorCodeOf(err);
  return code !== null && DETERMINISTIC_ERROR_CODES.has(code);
}

/** `[code] message`: the failure text workers give BullMQ (it becomes the job's failedReason). */
export function formatFailure(code: string, message: string): string {
  return `[${code}] ${message}`;
}

/** Reads back `formatFailure`'s text; a reason without a code gets 'runtime'. */
export function parseFailure(failedReason: string): { code: string; message: string } {
  const m = /^\[([a-z][a-z0-9-]*)\] ([\s\S]*)$/.exec(failedReason);
  return m !== null ? { code: m[1] as string, message: m[2] as string } : { code: 'runtime', message: failedReason };
}
