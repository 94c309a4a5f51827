/**
 * @module errors
 * The one error type of the HTTP edge, ApiError, rendered in OpenAI's error shape
 * `{ error: { message, type, param, code } }`, and the tables that turn anything else into one:
 * error codes (Csa2Error codes, worker codes from stream entries and failed jobs) → HTTP status, and
 * Redis connection failures → 503.
 */
import { HTTPException } from 'hono/http-exception';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import type { Csa2ErrorCode } from '@csa2/core';

/** OpenAI's error `type` values this gateway uses. */
export type ApiErrorType = 'invalid_request_error' | 'authentication_error' | 'not_found_error' | 'rate_limit_error' | 'server_error' | 'timeout_error';

export interface ApiErrorBody {
  readonly error: { readonly message: string; readonly type: ApiErrorType; readonly param: string | null; readonly code: string | null };
}

export interface ApiErrorOptions {
  readonly type?: ApiErrorType;
  readonly param?: string | null;
  readonly code?: string | null;
  readonly headers?: Readonly<Record<string, string>>;
  readonly cause?: unknown;
}

function defaultType(status: number): ApiErrorType {
  if (status === 401) return 'authentication_error';
  if (status === 404) return 'not_found_error';
  if (status === 429) return 'rate_limit_error';
  if (status === 504) return 'timeout_error';
  return status >= 500 ? 'server_error' : 'invalid_request_error';
}

/**
 * An error answered to the client. Throw it anywhere in a handler or middleware; the app's error
 * handler renders it.
 * @example throw new ApiError(400, "Invalid value for 'max_tokens': must be at least 1", { param: 'max_tokens' });
 */
export class ApiError extends HTTPException {
  readonly type: ApiErrorType;
  readonly param: string | null;
  readonly code: string | null;
  readonly headers: Readonly<Record<string, string>>;

  constructor(status: ContentfulStatusCode, message: string, options: ApiErrorOptions = {}) {
    super(status, { message, ...(options.cause !== undefined ? { cause: options.cause } : {}) });
    this.name = 'ApiError';
    this.type = options.type ?? defaultType(status);
    this.param = options.param ?? null;
    this.code = options.code ?? null;
    this.headers = options.headers ?? {};
  }

  toJSON(): ApiErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }

  override getResponse(): Response {
    return new Response(JSON.stringify(this.toJSON()), {
      status: this.status,
      headers: { 'content-type': 'application/json; charset=utf-8', ...this.headers },
    });
  }
}

/** 400 with the offending parameter named. */
export function invalidRequest(message: string, param: string | null = null, code: string | null = null): ApiError {
  return new ApiError(400, message, { param, code });
}

/**
 * HTTP status of every csa2-core / artifacts error code. A `Record` over the code union, so a new
 * code fails to compile until it has a status.
 */
export const CSA2_ERROR_TO_HTTP_STATUS: Record<Csa2ErrorCode, ContentfulStatusCode> = {
  'config-invalid': 500,
  'unsupported-feature': 400,
  'checkpoint-invalid': 500,
  'shape-mismatch': 500,
  'input-invalid': 400,
  'cache-format': 500,
  runtime: 500,
  'store-config': 500,
  'store-unavailable': 503,
  'not-found': 404,
  'artifact-corrupt': 500,
  // an object a manifest lists is gone: storage loss, the server's fault (not the client's 404)
  'artifact-missing': 500,
  'model-mismatch': 409,
  'unsupported-version': 500,
};

/** Codes raised by the workers and the gateway itself (besides Csa2ErrorCode). */
const WORKER_ERROR_TO_HTTP_STATUS: Readonly<Record<string, ContentfulStatusCode>> = {
  'payload-invalid': 500,
  'stream-invalid': 500,
  'retry-diverged': 500,
  'redis-unavailable': 503,
  'job-lost': 503,
  cancelled: 503,
  timeout: 504,
  'queue-full': 429,
};

/** The HTTP status of an error code from a stream entry or a failed job; unknown codes are 500. */
export function statusOfCode(code: string): ContentfulStatusCode {
  return (CSA2_ERROR_TO_HTTP_STATUS as Readonly<Record<string, ContentfulStatusCode>>)[code] ?? WORKER_ERROR_TO_HTTP_STATUS[code] ?? 500;
}

/** An ApiError for a worker-reported failure (an `error` stream entry or a failed job). */
export function workerError(code: string, message: string): ApiError {
  const status = statusOfCode(code);
  const apiCode = code.replaceAll('-', '_');
  return new ApiError(status, message, { code: apiCode, ...(status === 503 ? { headers: { 'retry-after': '1' } } : {}) });
}

const REDIS_DOWN = /Stream isn't writeable|Connection is closed|ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|Command timed out|connect ETIMEDOUT|Reached the max retries per request limit|LOADING|CLUSTERDOWN/;

/** True for the errors ioredis (and BullMQ through it) raise when Redis is unreachable. */
export function isRedisUnavailable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  return err.name === 'MaxRetriesPerRequestError' || REDIS_DOWN.test(err.message);
}

/** Redis is down: 503 with a Retry-After. */
export function redisUnavailable(cause: unknown): ApiError {
  const detail = cause instanceof Error ? cause.message : String(cause);
  return new ApiError(503, `the job queue (Redis) is unavailable: ${detail}`, { code: 'redis_unavailable', headers: { 'retry-after': '1' }, cause });
}

/** Anything thrown → the ApiError answered for it (500 for the unexpected, with a generic message). */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof HTTPException) return new ApiError(err.status, err.message !== '' ? err.message : 'request failed', { cause: err });
  if (isRedisUnavailable(err)) return redisUnavailable(err);
  if (err instanceof Error && 'code' in err && typeof err.code === 'string' && err.code in CSA2_ERROR_TO_HTTP_STATUS) {
    const status = CSA2_ERROR_TO_HTTP_STATUS[err.code as Csa2ErrorCode];
    // Internal details stay in the log for 5xx (paths, keys); 4xx messages are about the input.
    const message = status >= 500 && status !== 503 ? `internal error (${err.code})` : err.message;
    return new ApiError(status, message, { code: err.code.replaceAll('-', '_'), cause: err, ...(status === 503 ? { headers: { 'retry-after': '1' } } : {}) });
  }
  return new ApiError(500, 'internal server error', { cause: err });
}

/** Resolves like `promise`, or rejects with `onTimeout()` after `timeoutMs`. */
export async function withTimeout<T>(promise: Promise<T>, timeoutMs: number, onTimeout: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(onTimeout()), timeoutMs);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
