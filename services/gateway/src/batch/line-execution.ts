/**
 * @module batch/line-execution
 * Runs one line of a batch, once, under a given attempt, and says how it went (LineRun); the driver
 * (batch/runner.ts) decides what to record or retry. A line is the request a direct call would make:
 *
 * - `/v1/completions`, `/v1/chat/completions`: the body is parsed, checked and tokenized by the same
 *   functions as the routes (requests/completions.ts, requests/documents.ts), planned by planGeneration under the line's
 *   derived request id and seed, enqueued in the tenant's batch flow (CSA2_BATCH_WEIGHT), and its stream followed to the end;
 *   a line naming a document that is still queued or encoding waits for it (`defer`) instead of
 *   failing with 409 as a direct call does — a batch may ingest and ask in one go;
 * - `/v1/documents`: one document (`{id?, text | token_ids, model?}`), ingested in the batch flow;
 *   the line is done when the document is ready (its object, status 200) or failed. Lines naming
 *   the same id share one ingestion and one artifact.
 *
 * The submitted attempt is recorded in Redis before anything is enqueued, so a driver that restarts
 * resubmits under the same ids (BullMQ ignores the repeated add) and follows the same stream.
 */
import { DETERMINISTIC_ERROR_CODES, STREAM_TTL_SECONDS, cancelKey } from '@csa2/jobs';
import { ApiError, invalidRequest, isRedisUnavailable, redisUnavailable, statusOfCode, toApiError, workerError } from '../errors.js';
import { documentObject, documentStatus, ingestDocument, type DocumentDeps } from '../documents.js';
import type { GatewayDeps } from '../capabilities.js';
import { enqueueGeneration, planGeneration, type GenerationDeps, type GenerationPlan, type GenerationRequest } from '../generation.js';
import { chatRequest, completionRequest, type CompletionRequestDeps } from '../requests/completions.js';
import { prepareDocument, type DocumentRequestDeps } from '../requests/documents.js';
import type { BatchEndpoint } from '../schemas/batches.js';
import { DocumentInputSchema } from '../schemas/documents.js';
import { parseRequest } from '../schemas/parse.js';
import type { BatchConfig } from './batch-config.js';
import type { BatchStore, LineUsage } from './batch-store.js';
import { collectGeneration, dropPromptArtifact, type LineGenerationDeps } from './line-generation.js';
import { lineDocumentId, lineRequestId, lineSeed } from './keys.js';

/** The capabilities this module takes. */
export type LineExecutionDeps = Pick<GatewayDeps, 'limits' | 'queues' | 'redis'> &
  GenerationDeps &
  LineGenerationDeps &
  DocumentDeps &
  CompletionRequestDeps &
  DocumentRequestDeps;

export type LineRun =
  | { readonly kind: 'ok'; readonly requestId: string; readonly statusCode: number; readonly body: Record<string, unknown>; readonly usage: LineUsage }
  /** The line answered an error that retrying cannot change (or it was its last attempt). */
  | { readonly kind: 'error'; readonly requestId: string; readonly error: ApiError }
  /** A transient failure: worth another attempt. */
  | { readonly kind: 'retry'; readonly requestId: string; readonly error: ApiError }
  /** Not submitted (queue full, a document not ready): try again later under the same attempt. */
  | { readonly kind: 'later'; readonly reason: 'queue-full' | 'document-pending' }
  /** The line's generation was cancelled (cancel key: the batch was cancelled or expired). */
  | { readonly kind: 'cancelled'; readonly requestId: string }
  /** The driver stopped following it (shutdown); it goes on and is picked up again. */
  | { readonly kind: 'detached' };

export interface LineContext {
  readonly deps: LineExecutionDeps;
  readonly batches: BatchStore;
  readonly config: BatchConfig;
  readonly batchId: string;
  readonly tenant: string;
  readonly endpoint: BatchEndpoint;
  readonly expiresAtMs: number;
}

const DETERMINISTIC_API_CODES = new Set([...DETERMINISTIC_ERROR_CODES].map((c) => c.replaceAll('-', '_')));

/** Whether another attempt could change the answer: 429 and 5xx, unless the code says the input is at fault. */
export function isTransient(err: ApiError): boolean {
  if (err.status !== 429 && err.status < 500) return false;
  return err.code === null || !DETERMINISTIC_API_CODES.has(err.code);
}

function failure(requestId: string, err: unknown): LineRun {
  const apiError = toApiError(err);
  return isTransient(apiError) ? { kind: 'retry', requestId, error: apiError } : { kind: 'error', requestId, error: apiError };
}

function usageOf(u: { prompt_tokens: number; completion_tokens: number; prompt_tokens_details: { cached_tokens: number } }): LineUsage {
  return { promptTokens: u.prompt_tokens, completionTokens: u.completion_tokens, cachedTokens: u.prompt_tokens_details.cached_tokens };
}

/** Sets the cancel key of a line's request (the batch was cancelled or expired); workers stop it. */
export async function cancelLine(deps: LineExecutionDeps, requestId: string): Promise<void> {
  await deps.redis.set(cancelKey(requestId), '1', 'EX', STREAM_TTL_SECONDS).catch(() => undefined);
}

export async function runGenerationLine(
  ctx: LineContext,
  line: { index: number; body: Readonly<Record<string, unknown>> },
  attempt: number,
  signal: AbortSignal,
): Promise<LineRun> {
  const { deps } = ctx;
  const endpoint = ctx.endpoint === '/v1/chat/completions' ? 'chat' : 'completions';
  const requestId = lineRequestId(ctx.batchId, endpoint, line.index, attempt);
  let plan: GenerationPlan;
  try {
    if (line.body['stream'] === true)
      throw invalidRequest("'stream' is not supported in a batch: each line answers one JSON body", 'stream', 'unsupported_parameter');
    const parsed: GenerationRequest =
      endpoint === 'chat' ? await chatRequest(deps, ctx.tenant, line.body) : await completionRequest(deps, ctx.tenant, line.body);
    const request: GenerationRequest = { ...parsed, requestId, seed: parsed.seed ?? lineSeed(ctx.batchId, line.index) };
    if (request.documentId !== null) {
      const doc = await documentStatus(deps, ctx.tenant, request.documentId);
      if (doc !== null && (doc.state.status === 'queued' || doc.state.status === 'encoding')) return { kind: 'later', reason: 'document-pending' };
    }
    plan = await planGeneration(deps, request);
  } catch (err) {
    if (isRedisUnavailable(err)) return failure(requestId, redisUnavailable(err));
    return failure(requestId, err);
  }
  try {
    await ctx.batches.setAttempt(ctx.batchId, line.index, attempt);
    await enqueueGeneration(deps, plan, { batchWeight: ctx.config.weight });
  } catch (err) {
    if (err instanceof ApiError && err.code === 'queue_full') return { kind: 'later', reason: 'queue-full' };
    return failure(requestId, err);
  }
  try {
    const result = await collectGeneration(deps, plan, { deadlineMs: ctx.expiresAtMs, signal });
    if (result.kind === 'detached') return result;
    await dropPromptArtifact(deps, plan);
    if (result.kind === 'cancelled') return { kind: 'cancelled', requestId };
    return { kind: 'ok', requestId, statusCode: 200, body: result.body, usage: usageOf(result.usage) };
  } catch (err) {
    if (signal.aborted) return { kind: 'detached' };
    await dropPromptArtifact(deps, plan);
    return failure(requestId, err);
  }
}

async function sleep(ms: number, signal: AbortSignal): Promise<void> {
  await new Promise<void>((resolve) => {
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}

export async function runDocumentLine(
  ctx: LineContext,
  line: { index: number; body: Readonly<Record<string, unknown>> },
  attempt: number,
  signal: AbortSignal,
): Promise<LineRun> {
  const { deps } = ctx;
  let requestId = lineDocumentId(ctx.batchId, line.index);
  let prepared;
  try {
    if ('documents' in line.body)
      throw invalidRequest("a batch line ingests one document: send each of 'documents' as its own line", 'documents', 'invalid_value');
    const input = parseRequest(DocumentInputSchema, line.body);
    prepared = await prepareDocument(deps, { ...input, id: input.id ?? requestId }, (f) => f);
    requestId = prepared.id;
  } catch (err) {
    return failure(requestId, err);
  }
  try {
    const counts = await deps.queues.prefill.getJobCounts('wait', 'prioritized', 'delayed');
    if (Object.values(counts).reduce((a, b) => a + b, 0) >= deps.limits.maxQueueDepth) return { kind: 'later', reason: 'queue-full' };
    await ctx.batches.setAttempt(ctx.batchId, line.index, attempt);
    await ingestDocument(deps, ctx.tenant, prepared.id, prepared.tokenIds, Date.now(), { batch: true, weight: ctx.config.weight });
    for (;;) {
      if (signal.aborted) return { kind: 'detached' };
      if (Date.now() >= ctx.expiresAtMs) return { kind: 'cancelled', requestId };
      const found = await documentStatus(deps, ctx.tenant, prepared.id);
      if (found === null)
        return failure(requestId, new ApiError(404, `document '${prepared.id}' vanished while it was ingested (deleted?)`, { code: 'document_not_found' }));
      const { state } = found;
      if (state.status === 'ready') {
        return {
          kind: 'ok',
          requestId,
          statusCode: 200,
          body: documentObject(prepared.id, state),
          usage: { promptTokens: state.tokens, completionTokens: 0, cachedTokens: 0 },
        };
      }
      if (state.status === 'failed') {
        const err = workerError(state.code, state.reason);
        return statusOfCode(state.code) >= 500 ? failure(requestId, err) : { kind: 'error', requestId, error: err };
      }
      await sleep(ctx.config.pollMs, signal);
    }
  } catch (err) {
    if (signal.aborted) return { kind: 'detached' };
    return failure(requestId, isRedisUnavailable(err) ? redisUnavailable(err) : err);
  }
}
