/**
 * @module errors
 * The one error type of the HTTP edge, ApiError, rendered in OpenAI's error shape
 * `{ error: { message, type, param, code } }`, and the tables that turn anything else into one:
 * error codes (Csa2Error codes, worker codes from stream entries and failed jobs) → HTTP status and
 * a short public message, and Redis connection failures → 503.
 *
 * What a client never sees: a worker's or a library's own message (object keys, byte offsets,
 * stored and computed SHA-256s, the model fingerprint, Redis addresses). Such failures answer with
 * their stable code, the public message of the code (PUBLIC_MESSAGES) and the request id
 * (x-request-id) to quote; the original text travels in `detail`, which the error handler logs with
 * the request id. Messages the gateway writes about the client's own input stay as they are.
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
  /** What happened, for the log only (a worker's message, a library error): never sent to the client. */
  readonly detail?: string;
  /** Append "(request id: …)" to the message when rendered for a request. @defaultValue status >= 500 */
  readonly quoteRequestId?: boolean;
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
  readonly detail: string | null;
  readonly quoteRequestId: boolean;

  constructor(status: ContentfulStatusCode, message: string, options: ApiErrorOptions = {}) {
    super(status, { message, ...(options.cause !== undefined ? { cause: options.cause } : {}) });
    this.name = 'ApiError';
    this.type = options.type ?? defaultType(status);
    this.param = options.param ?? null;
    this.code = options.code ?? null;
    this.headers = options.headers ?? {};
    this.detail = options.detail ?? null;
    this.quoteRequestId = options.quoteRequestId ?? status >= 500;
  }

  /** The body; with `reqId` (the request's x-request-id) quoted in the message when quoteRequestId. */
  toJSON(reqId?: string): ApiErrorBody {
    const message = this.quoteRequestId && reqId !== undefined ? `${this.message} (request id: ${reqId})` : this.message;
    return { error: { message, type: this.type, param: this.param, code: this.code } };
  }

  override getResponse(reqId?: string): Response {
    return new Response(JSON.stringify(this.toJSON(reqId)), {
      status: this.status,
      headers: { 'content-type': 'application/json; charset=utf-8', ...this.headers },
    });
  }
}

/**
 * 404 `model_not_found`, as OpenAI and vLLM answer a model they do not serve (OpenAI's type
 * `invalid_request_error`, param `model`).
 */
export function modelNotFound(model: string, served: string, param = 'model'): ApiError {
  const shown = model.length > 80 ? `${model.slice(0, 80)}…` : model;
  return new ApiError(404, `The model '${shown}' does not exist. This server serves '${served}'.`, {
    type: 'invalid_request_error',
    param,
    code: 'model_not_found',
  });
}

/** "1 request is waiting", "3 requests are waiting". */
export function waiting(n: number, noun: string): string {
  return n === 1 ? `1 ${noun} is waiting` : `${n} ${noun}s are waiting`;
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

const SERVER_ERROR = 'The server had an error while processing your request.';

/**
 * What a client is told for each failure code: short, stable, free of internals. A `Record` over
 * Csa2ErrorCode (a new code fails to compile until it has one) plus the workers' codes.
 */
export const PUBLIC_MESSAGES: Readonly<Record<Csa2ErrorCode, string>> & Readonly<Record<string, string>> = {
  'config-invalid': SERVER_ERROR,
  'unsupported-feature': 'The request uses a feature this server does not support.',
  'checkpoint-invalid': SERVER_ERROR,
  'shape-mismatch': SERVER_ERROR,
  'input-invalid': 'The request is invalid for this model.',
  'cache-format': SERVER_ERROR,
  runtime: SERVER_ERROR,
  'store-config': SERVER_ERROR,
  'store-unavailable': 'The artifact store is unavailable. Please retry shortly.',
  'not-found': 'A stored artifact this request needs was not found.',
  'artifact-corrupt': 'A stored artifact this request needs is damaged.',
  'artifact-missing': 'Part of a stored artifact this request needs is missing from the store.',
  'model-mismatch': 'The stored artifact was made by a different model than the one served.',
  'unsupported-version': 'A stored artifact has a format version this server does not read.',
  'payload-invalid': SERVER_ERROR,
  'stream-invalid': "The server could not read the request's token stream.",
  'retry-diverged': 'A retried worker generated different tokens than the first attempt.',
  'redis-unavailable': 'The job queue is unavailable. Please retry shortly.',
  'job-lost': 'The request was lost by the job queue. Please retry.',
  cancelled: 'The request was cancelled before it finished.',
  timeout: 'The request did not finish in time and was cancelled.',
  'queue-full': 'The server is overloaded. Please retry shortly.',
};

/** The public message of a failure code (unknown codes: the generic server error). */
export function publicMessage(code: string): string {
  return PUBLIC_MESSAGES[code] ?? SERVER_ERROR;
}

/**
 * An ApiError for a worker-reported failure (an `error` stream entry or a failed job): the code's
 * status and public message, the request id quoted; the worker's message only in `detail` (logged).
 */
export function workerError(code: string, message: string): ApiError {
  const status = statusOfCode(code);
  const apiCode = code.replaceAll('-', '_');
  return new ApiError(status, publicMessage(code), {
    code: apiCode,
    detail: `[${code}] ${message}`,
    quoteRequestId: true,
    ...(status === 503 || status === 429 ? { headers: { 'retry-after': '1' } } : {}),
  });
}

const REDIS_DOWN =
  /Stream isn't writeable|Connection is closed|ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|Command timed out|connect ETIMEDOUT|Reached the max retries per request limit|LOADING|CLUSTERDOWN/;

/** True for the errors ioredis (and BullMQ through it) raise when Redis is unreachable. */
export function isRedisUnavailable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  return err.name === 'MaxRetriesPerRequestError' || REDIS_DOWN.test(err.message);
}

/** Redis is down: 503 with a Retry-After (its address and error only in `detail`). */
export function redisUnavailable(cause: unknown): ApiError {
  const detail = cause instanceof Error ? cause.message : String(cause);
  return new ApiError(503, publicMessage('redis-unavailable'), { code: 'redis_unavailable', headers: { 'retry-after': '1' }, cause, detail });
}

/**
 * Anything thrown → the ApiError answered for it. A Csa2Error answers with its code's status and
 * public message (an `input-invalid` one, which the gateway raises about the client's own input,
 * keeps its message); anything else is a 500 with the generic message. The original message goes to
 * `detail`.
 */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof HTTPException) return new ApiError(err.status, err.message !== '' ? err.message : 'request failed', { cause: err });
  if (isRedisUnavailable(err)) return redisUnavailable(err);
  const detail = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  if (err instanceof Error && 'code' in err && typeof err.code === 'string' && err.code in CSA2_ERROR_TO_HTTP_STATUS) {
    const code = err.code as Csa2ErrorCode;
    const status = CSA2_ERROR_TO_HTTP_STATUS[code];
    const message = code === 'input-invalid' ? err.message : publicMessage(code);
    return new ApiError(status, message, {
      code: code.replaceAll('-', '_'),
      cause: err,
      detail,
      quoteRequestId: code !== 'input-invalid',
      ...(status === 503 ? { headers: { 'retry-after': '1' } } : {}),
    });
  }
  return new ApiError(500, SERVER_ERROR, { cause: err, detail });
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
