/**
 * @module processor
 * The prefill job processor: a PrefillJob in, an artifact in the object store out, as a plain
 * function (job, token, signal) that BullMQ hosts.
 *
 * - 'document': ingest the document (text or token ids) as (tenant, documentId); progress goes to
 *   `job.updateProgress({ tokensDone, tokensTotal })`; returns PrefillResult. Ingestion is
 *   idempotent (content-addressed chunks, manifest last), so a retry re-uses what a failed attempt
 *   wrote and a re-run of a finished job only rewrites the manifest.
 * - 'prompt': ingest the long prompt's prefix as document `promptDocumentId(requestId)` of the
 *   request's tenant, then add `decode` (documentId set to that document) to the decode queue under
 *   the job id `requestDecodeJobId(requestId)` — BullMQ ignores an add whose id exists, so a retried
 *   or repeated prefill job enqueues one decode job. A request whose stream already ended, or whose
 *   cancel key is set, is not encoded (a cancelled one gets its final 'cancelled' entry here, since
 *   no decode job will write it).
 *
 * Failures: deterministic codes → UnrecoverableError `[code] message`; other errors are thrown so
 * BullMQ retries with backoff. For 'prompt' jobs the request's stream gets an error entry when the
 * failure is final (deterministic, or the last attempt), so the client is not left waiting.
 */
import type { IngestHooks, IngestOutcome, IngestRequest } from '@csa2/engine';
import {
  DECODE_JOB_NAME,
  DEFAULT_DECODE_JOB_OPTIONS,
  DelayedError,
  ID_PATTERN,
  JobPayloadError,
  UnrecoverableError,
  appendStreamEntry,
  cancelKey,
  errorCodeOf,
  errorFields,
  formatFailure,
  isDeterministicError,
  parsePrefillJob,
  promptDocumentId,
  readStreamState,
  requestDecodeJobId,
  silentLogger,
  type DecodeJob,
  type DocumentPrefillJob,
  type Job,
  type Logger,
  type PrefillJob,
  type PrefillProgress,
  type PrefillResult,
  type PromptPrefillJob,
  type Queue,
  type Redis,
} from '@csa2/jobs';

/** What the processor needs from the engine (EngineHost satisfies it). */
export interface EncodeEngine {
  readonly alive: boolean;
  ingest(req: IngestRequest, hooks?: IngestHooks): Promise<IngestOutcome>;
  close(): Promise<void>;
}

export interface EncodeDeps {
  /** A non-blocking connection for request streams and cancel keys. */
  readonly redis: Redis;
  /** The decode queue, where 'prompt' jobs hand their request on. */
  readonly decodeQueue: Queue;
  /** The live engine (restarted when its thread died). */
  readonly engine: () => Promise<EncodeEngine>;
  /** Tokens per chunk; undefined = the engine's default. */
  readonly chunkTokens?: number;
  /** Least time between two progress updates of one job. @defaultValue 200 */
  readonly progressIntervalMs?: number;
  readonly log?: Logger;
}

export type EncodeProcessor = (job: Job<unknown, PrefillResult>, token: string | undefined, signal: AbortSignal | undefined) => Promise<PrefillResult>;

class HandBack extends Error {}

/** A prompt job's request id when the payload says it is one and the id is well-formed. */
function readablePromptRequestId(data: unknown): string | null {
  if (typeof data !== 'object' || data === null) return null;
  const d = data as { kind?: unknown; requestId?: unknown };
  return d.kind === 'prompt' && typeof d.requestId === 'string' && ID_PATTERN.test(d.requestId) ? d.requestId : null;
}

/** Forwards progress to the job, at most every `intervalMs` (always the last one), in order. */
function progressForwarder(job: Job<unknown, PrefillResult>, intervalMs: number) {
  let chain: Promise<void> = Promise.resolve();
  let lastAtMs = 0;
  let pending: PrefillProgress | null = null;
  const send = (p: PrefillProgress) => {
    chain = chain.then(() => job.updateProgress({ tokensDone: p.tokensDone, tokensTotal: p.tokensTotal })).catch(() => undefined);
  };
  return {
    onProgress(p: PrefillProgress) {
      const now = Date.now();
      if (now - lastAtMs >= intervalMs || p.tokensDone >= p.tokensTotal) {
        lastAtMs = now;
        pending = null;
        send(p);
      } else pending = p;
    },
    async flush(): Promise<void> {
      if (pending !== null) send(pending);
      pending = null;
      await chain;
    },
  };
}

function toResult(out: IngestOutcome): PrefillResult {
  return { documentId: out.documentId, tokens: out.tokens, bytesWritten: out.bytesWritten, artifactBytes: out.artifactBytes, reusedTokens: out.reusedTokens };
}

export function createEncodeProcessor(deps: EncodeDeps): EncodeProcessor {
  const log = deps.log ?? silentLogger;
  const progressIntervalMs = deps.progressIntervalMs ?? 200;

  async function ingest(job: Job<unknown, PrefillResult>, req: IngestRequest, signal: AbortSignal | undefined): Promise<IngestOutcome> {
    const engine = await deps.engine();
    const progress = progressForwarder(job, progressIntervalMs);
    const abort = new AbortController();
    let handBack = false;
    const onJobAbort = () => {
      handBack = true;
      abort.abort();
    };
    signal?.addEventListener('abort', onJobAbort, { once: true });
    if (signal?.aborted === true) onJobAbort();
    try {
      const out = await engine.ingest(req, { onProgress: (p) => progress.onProgress(p), signal: abort.signal });
      progress.onProgress({ tokensDone: out.tokens, tokensTotal: out.tokens });
      return out;
    } catch (err) {
      if (handBack) throw new HandBack();
      throw err;
    } finally {
      signal?.removeEventListener('abort', onJobAbort);
      await progress.flush();
    }
  }

  async function runDocument(job: Job<unknown, PrefillResult>, data: DocumentPrefillJob, signal: AbortSignal | undefined): Promise<PrefillResult> {
    const req: IngestRequest = {
      tenant: data.tenant,
      documentId: data.documentId,
      ...('text' in data.input ? { text: data.input.text } : { tokenIds: data.input.tokenIds }),
      ...(deps.chunkTokens !== undefined ? { chunkTokens: deps.chunkTokens } : {}),
    };
    const out = await ingest(job, req, signal);
    log('info', 'document ingested', { jobId: job.id, tenant: data.tenant, documentId: data.documentId, tokens: out.tokens, reusedTokens: out.reusedTokens, bytesWritten: out.bytesWritten });
    return toResult(out);
  }

  async function runPrompt(job: Job<unknown, PrefillResult>, data: PromptPrefillJob, signal: AbortSignal | undefined): Promise<PrefillResult> {
    const { requestId, tenant } = data;
    const documentId = promptDocumentId(requestId);
    const empty: PrefillResult = { documentId, tokens: 0, bytesWritten: 0, artifactBytes: 0, reusedTokens: 0 };
    if (data.decode.requestId !== requestId || data.decode.tenant !== tenant) {
      throw new JobPayloadError('prefill', [`decode: requestId/tenant (${data.decode.requestId}/${data.decode.tenant}) differ from the prefill job's (${requestId}/${tenant})`]);
    }
    if (data.decode.documentId !== null && data.decode.documentId !== documentId) {
      throw new JobPayloadError('prefill', [`decode.documentId: must be null or ${documentId} (a long prompt cannot continue another document)`]);
    }
    const state = await readStreamState(deps.redis, requestId);
    if (state.end !== null) {
      log('info', 'request already ended; not encoding', { jobId: job.id, requestId, end: state.end.kind });
      return empty;
    }
    if ((await deps.redis.exists(cancelKey(requestId))) > 0) {
      const promptTokens = data.tokenIds.length + data.decode.promptIds.length;
      const usage = { prompt_tokens: promptTokens, completion_tokens: 0, total_tokens: promptTokens, prompt_tokens_details: { cached_tokens: 0 } };
      await appendStreamEntry(deps.redis, requestId, { kind: 'final', finishReason: 'cancelled', usage, tokens: 0 });
      log('info', 'request cancelled before encoding', { jobId: job.id, requestId });
      return empty;
    }
    const out = await ingest(
      job,
      { tenant, documentId, tokenIds: data.tokenIds, ...(deps.chunkTokens !== undefined ? { chunkTokens: deps.chunkTokens } : {}) },
      signal,
    );
    const decode: DecodeJob = { ...data.decode, documentId };
    // the id makes this add a no-op when the decode job exists already (a retried/repeated prefill job)
    await deps.decodeQueue.add(DECODE_JOB_NAME, decode, { ...DEFAULT_DECODE_JOB_OPTIONS, jobId: requestDecodeJobId(requestId) });
    log('info', 'prompt encoded; decode enqueued', { jobId: job.id, requestId, tokens: out.tokens, reusedTokens: out.reusedTokens });
    return toResult(out);
  }

  return async function processPrefillJob(job, token, signal) {
    let data: PrefillJob;
    try {
      data = parsePrefillJob(job.data);
    } catch (err) {
      if (!(err instanceof JobPayloadError)) throw err;
      const requestId = readablePromptRequestId(job.data);
      log('warn', 'malformed prefill job', { jobId: job.id, requestId, issues: err.issues });
      if (requestId !== null) await writeError(requestId, 'payload-invalid', err.message);
      throw new UnrecoverableError(formatFailure('payload-invalid', err.message));
    }
    const requestId = data.kind === 'prompt' ? data.requestId : null;
    try {
      return data.kind === 'document' ? await runDocument(job, data, signal) : await runPrompt(job, data, signal);
    } catch (err) {
      if (err instanceof HandBack) {
        log('info', 'handing the job back (shutting down)', { jobId: job.id });
        await job.moveToDelayed(Date.now(), token);
        throw new DelayedError();
      }
      const code = err instanceof JobPayloadError ? 'payload-invalid' : (errorCodeOf(err) ?? 'runtime');
      const message = err instanceof Error ? err.message : String(err);
      const deterministic = err instanceof JobPayloadError || isDeterministicError(err);
      const lastAttempt = job.attemptsMade + 1 >= (job.opts.attempts ?? 1);
      log(deterministic || lastAttempt ? 'error' : 'warn', 'prefill failed', { jobId: job.id, kind: data.kind, requestId, code, deterministic, attempt: job.attemptsMade + 1, ...errorFields(err) });
      if (requestId !== null && (deterministic || lastAttempt)) await writeError(requestId, code, message);
      if (deterministic) throw new UnrecoverableError(formatFailure(code, message));
      throw new Error(formatFailure(code, message), { cause: err });
    }
  };

  async function writeError(requestId: string, code: string, message: string): Promise<void> {
    try {
      await appendStreamEntry(deps.redis, requestId, { kind: 'error', code, message });
    } catch (err) {
      log('error', 'could not write the error entry', { requestId, code, ...errorFields(err) });
    }
  }
}
