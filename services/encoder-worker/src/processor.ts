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
 *   the job id `requestDecodeJobId(requestId)` in the request's fair-share flow (a batch line's
 *   decode job stays in the tenant's batch flow), with `cachedTokens` = the leading tokens whose chunks
 *   were stored before the job first ran (never those it encoded itself, also across a retry: the
 *   count is kept in the job's progress) — BullMQ ignores an add whose id exists, so a retried
 *   or repeated prefill job enqueues one decode job. A request whose stream already ended, or whose
 *   cancel key is set, is not encoded (a cancelled one gets its final 'cancelled' entry here, since
 *   no decode job will write it).
 *
 * Failures follow the workers' common policy (@csa2/jobs job-failure): deterministic codes →
 * UnrecoverableError `[code] message`; other errors are thrown so BullMQ retries with backoff. For
 * 'prompt' jobs the request's stream gets an error entry when the failure is final (deterministic, or
 * the last attempt), so the client is not left waiting. When BullMQ aborts `signal` (shutdown past its
 * grace period) the ingest stops and the job is handed back to the queue without using an attempt.
 */
import { deleteTokenList, getTokenList, manifestObjectKey, type ObjectStore } from '@csa2/artifacts';
import type { IngestHooks, IngestOutcome, IngestProgress, IngestRequest } from '@csa2/engine';
import type { PrefillSlots } from './slots.js';
import {
  DECODE_JOB_NAME,
  DEFAULT_DECODE_JOB_OPTIONS,
  HandBackError,
  JobPayloadError,
  appendStreamEntry,
  failJob,
  decodeCostTokens,
  fairFlow,
  fairPriority,
  followJobSignal,
  handJobBack,
  isCancelled,
  isFinalFailure,
  promptPrefixTokens,
  watchCancelKey,
  parseJobPayload,
  parsePrefillJob,
  promptDocumentId,
  readStreamState,
  readableRequestId,
  requestDecodeJobId,
  silentLogger,
  writeErrorEntry,
  type Closable,
  type DecodeJob,
  type DocumentPrefillJob,
  type EngineJobDeps,
  type Job,
  type PrefillProgress,
  type PrefillResult,
  type PromptPrefillJob,
  type Queue,
  type TokenListRefPayload,
} from '@csa2/jobs';

/** What the processor needs from the engine (EngineHost satisfies it). */
export interface EncodeEngine extends Closable {
  ingest(req: IngestRequest, hooks?: IngestHooks): Promise<IngestOutcome>;
}

/** `redis` (request streams, cancel keys), `engine` and `log`, plus the encoder's own. */
export interface EncodeDeps extends EngineJobDeps<EncodeEngine> {
  /** The decode queue, where 'prompt' jobs hand their request on. */
  readonly decodeQueue: Queue;
  /** The artifact store (the engine's): a cancelled request's prompt artifact is deleted here. */
  readonly store: ObjectStore;
  /** How often a running prompt job checks its request's cancel key. @defaultValue 50 */
  readonly cancelPollMs?: number;
  /** Tokens per chunk; undefined = the engine's default. */
  readonly chunkTokens?: number;
  /** Least time between two progress updates of one job. @defaultValue 200 */
  readonly progressIntervalMs?: number;
  /** The worker's slots (reserved slots for prompts and starved tenants); told when each job starts and ends. */
  readonly slots?: Pick<PrefillSlots, 'enter' | 'leave'>;
}

/**
 * The engine priority of a prefill (lower first among one tenant's work; across tenants the engine
 * shares prefill time fairly): an interactive prompt before its tenant's documents, so a document yields to it
 * between two chunks; a batch line's prompt with the documents.
 */
export const PROMPT_ENGINE_PRIORITY = 0;
export const DOCUMENT_ENGINE_PRIORITY = 1;

export type EncodeProcessor = (job: Job<unknown, PrefillResult>, token: string | undefined, signal: AbortSignal | undefined) => Promise<PrefillResult>;

/**
 * The reused-token count an earlier attempt of this job recorded in its progress (the chunks stored
 * before the job first ran), or null on a first attempt.
 */
function firstAttemptReusedTokens(job: Job<unknown, PrefillResult>): number | null {
  const p: unknown = job.progress;
  if (typeof p !== 'object' || p === null) return null;
  const reused = (p as { reusedTokens?: unknown }).reusedTokens;
  return typeof reused === 'number' && Number.isSafeInteger(reused) && reused >= 0 ? reused : null;
}

/**
 * Forwards progress to the job, at most every `intervalMs` (always the last one), in order. Every
 * update carries `reusedTokens`: the first attempt's count when a retry runs (`firstReused`).
 */
function progressForwarder(job: Job<unknown, PrefillResult>, intervalMs: number, firstReused: number | null) {
  let chain: Promise<void> = Promise.resolve();
  let lastAtMs = 0;
  let pending: IngestProgress | null = null;
  const send = (p: IngestProgress) => {
    const progress: PrefillProgress = { tokensDone: p.tokensDone, tokensTotal: p.tokensTotal, reusedTokens: firstReused ?? p.reusedTokens };
    chain = chain.then(() => job.updateProgress(progress)).catch(() => undefined);
  };
  return {
    onProgress(p: IngestProgress) {
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

/** The request of a prompt job was cancelled while it was being encoded (its client is gone). */
class RequestCancelledError extends Error {
  constructor(readonly tokensDone: number) {
    super('the request was cancelled during its prefill');
    this.name = 'RequestCancelledError';
  }
}

function toResult(out: IngestOutcome): PrefillResult {
  return {
    documentId: out.documentId,
    tokens: out.tokens,
    bytesWritten: out.bytesWritten,
    artifactBytes: out.artifactBytes,
    tailBytes: out.tailBytes,
    reusedTokens: out.reusedTokens,
  };
}

export function createEncodeProcessor(deps: EncodeDeps): EncodeProcessor {
  const log = deps.log ?? silentLogger;
  const progressIntervalMs = deps.progressIntervalMs ?? 200;
  const cancelPollMs = deps.cancelPollMs ?? 50;
  const writeError = (requestId: string, code: string, message: string) => writeErrorEntry(deps.redis, log, requestId, code, message);

  /**
   * The ingest and the tokens stored before this job first ran (what a decode may count as cached).
   * With `requestId` (a prompt job) the request's cancel key is polled meanwhile: once it is set the
   * engine stops between two chunks and this throws RequestCancelledError.
   */
  async function ingest(
    job: Job<unknown, PrefillResult>,
    req: IngestRequest,
    signal: AbortSignal | undefined,
    requestId: string | null,
  ): Promise<{ out: IngestOutcome; reusedBeforeJob: number }> {
    const engine = await deps.engine();
    const firstReused = firstAttemptReusedTokens(job);
    const progress = progressForwarder(job, progressIntervalMs, firstReused);
    const abort = new AbortController();
    let handBack = false;
    let cancelled = false;
    let tokensDone = 0;
    const unfollowJob = followJobSignal(signal, () => {
      handBack = true;
      abort.abort();
    });
    const stopWatching =
      requestId === null
        ? () => undefined
        : watchCancelKey(deps.redis, requestId, cancelPollMs, () => {
            cancelled = true;
            abort.abort();
          });
    try {
      const out = await engine.ingest(req, {
        onProgress: (p) => {
          tokensDone = p.tokensDone;
          progress.onProgress(p);
        },
        signal: abort.signal,
      });
      progress.onProgress({ tokensDone: out.tokens, tokensTotal: out.tokens, reusedTokens: out.reusedTokens });
      return { out, reusedBeforeJob: Math.min(out.reusedTokens, firstReused ?? out.reusedTokens) };
    } catch (err) {
      if (handBack) throw new HandBackError();
      if (cancelled) throw new RequestCancelledError(tokensDone);
      throw err;
    } finally {
      stopWatching();
      unfollowJob();
      await progress.flush();
    }
  }

  /** A payload's token list: inline, or read back from the object store (size and SHA-256 verified). */
  async function tokenList(tenant: string, inline: number[] | undefined, ref: TokenListRefPayload | undefined): Promise<number[]> {
    if (inline !== undefined) return inline;
    if (ref === undefined) throw new JobPayloadError('prefill', ['tokenIds: neither token ids nor a tokensRef']);
    return getTokenList(deps.store, tenant, ref);
  }

  async function runDocument(job: Job<unknown, PrefillResult>, data: DocumentPrefillJob, signal: AbortSignal | undefined): Promise<PrefillResult> {
    const { input } = data;
    const req: IngestRequest = {
      tenant: data.tenant,
      documentId: data.documentId,
      priority: DOCUMENT_ENGINE_PRIORITY,
      ...('text' in input
        ? { text: input.text }
        : { tokenIds: await tokenList(data.tenant, 'tokenIds' in input ? input.tokenIds : undefined, 'tokensRef' in input ? input.tokensRef : undefined) }),
      ...(deps.chunkTokens !== undefined ? { chunkTokens: deps.chunkTokens } : {}),
      createdAtMs: data.acceptedAtMs,
    };
    const { out } = await ingest(job, req, signal, null);
    log('info', 'document ingested', {
      jobId: job.id,
      tenant: data.tenant,
      documentId: data.documentId,
      tokens: out.tokens,
      reusedTokens: out.reusedTokens,
      bytesWritten: out.bytesWritten,
    });
    return toResult(out);
  }

  async function runPrompt(job: Job<unknown, PrefillResult>, data: PromptPrefillJob, signal: AbortSignal | undefined): Promise<PrefillResult> {
    const { requestId, tenant } = data;
    const documentId = promptDocumentId(requestId);
    const empty: PrefillResult = { documentId, tokens: 0, bytesWritten: 0, artifactBytes: 0, reusedTokens: 0 };
    if (data.decode.requestId !== requestId || data.decode.tenant !== tenant) {
      throw new JobPayloadError('prefill', [
        `decode: requestId/tenant (${data.decode.requestId}/${data.decode.tenant}) differ from the prefill job's (${requestId}/${tenant})`,
      ]);
    }
    if (data.decode.documentId !== null && data.decode.documentId !== documentId) {
      throw new JobPayloadError('prefill', [`decode.documentId: must be null or ${documentId} (a long prompt cannot continue another document)`]);
    }
    const state = await readStreamState(deps.redis, requestId);
    if (state.end !== null) {
      log('info', 'request already ended; not encoding', { jobId: job.id, requestId, end: state.end.kind });
      return empty;
    }
    /** Ends the stream of a cancelled request (no decode job will): final entry 'cancelled'. */
    const endCancelled = async (when: string, fields: Readonly<Record<string, unknown>> = {}): Promise<PrefillResult> => {
      const promptTokens = promptPrefixTokens(data) + data.decode.promptIds.length;
      const usage = { prompt_tokens: promptTokens, completion_tokens: 0, total_tokens: promptTokens, prompt_tokens_details: { cached_tokens: 0 } };
      await appendStreamEntry(deps.redis, requestId, { kind: 'final', finishReason: 'cancelled', usage, tokens: 0 });
      log('info', `request cancelled ${when}`, { jobId: job.id, requestId, ...fields });
      return empty;
    };
    if (await isCancelled(deps.redis, requestId)) return endCancelled('before encoding');
    const tokenIds = await tokenList(tenant, data.tokenIds, data.tokensRef);
    const prefixDocumentId = data.prefixDocumentId ?? null;
    let encoded: { out: IngestOutcome; reusedBeforeJob: number };
    try {
      encoded = await ingest(
        job,
        {
          tenant,
          documentId,
          tokenIds,
          priority: data.batch === true ? DOCUMENT_ENGINE_PRIORITY : PROMPT_ENGINE_PRIORITY,
          // no stored encoder tail: a prompt's artifact has one question, whose decoder computes the
          // same rows itself (bit for bit); here they were ~10 more engine steps of 16–128 rows, each
          // sharing its step with a whole chunk of any document being ingested (another tenant's flood)
          tailReplayTokens: 0,
          createdAtMs: data.acceptedAtMs,
          ...(prefixDocumentId !== null ? { prefix: { tenant, documentId: prefixDocumentId } } : {}),
          ...(deps.chunkTokens !== undefined ? { chunkTokens: deps.chunkTokens } : {}),
        },
        signal,
        requestId,
      );
    } catch (err) {
      // stopped between two chunks: no manifest was written (the chunks written stay, shared and reusable)
      if (err instanceof RequestCancelledError) return endCancelled('during encoding', { tokensDone: err.tokensDone, tokensTotal: tokenIds.length });
      throw err;
    }
    const { out, reusedBeforeJob } = encoded;
    // cancelled after the last check, or answered with an error meanwhile: nobody will read the artifact
    const ended = (await readStreamState(deps.redis, requestId)).end !== null;
    if (ended || (await isCancelled(deps.redis, requestId))) {
      await deps.store.delete(manifestObjectKey(tenant, documentId));
      if (ended) {
        log('info', 'request ended during encoding; prompt artifact removed', { jobId: job.id, requestId });
        return empty;
      }
      return endCancelled('at the end of encoding; prompt artifact removed');
    }
    // cached: only the tokens of chunks stored before this request, not those it just encoded
    const decode: DecodeJob = { ...data.decode, documentId, cachedTokens: reusedBeforeJob };
    // the id makes this add a no-op when the decode job exists already (a retried/repeated prefill job);
    // its priority is the flow's fair share of the decode queue, as the gateway gives its own decode jobs
    const priority = await fairPriority(deps.redis, deps.decodeQueue.name, {
      tenant: fairFlow(tenant, data.batch === true),
      costTokens: decodeCostTokens(decode),
      ...(data.weight !== undefined ? { weight: data.weight } : {}),
    });
    await deps.decodeQueue.add(DECODE_JOB_NAME, decode, { ...DEFAULT_DECODE_JOB_OPTIONS, jobId: requestDecodeJobId(requestId), priority });
    log('info', 'prompt encoded; decode enqueued', {
      jobId: job.id,
      requestId,
      tokens: out.tokens,
      reusedTokens: out.reusedTokens,
      cachedTokens: reusedBeforeJob,
    });
    return toResult(out);
  }

  /** The job's input token list is not needed once the job is done for good (best-effort). */
  async function dropInput(job: Job<unknown, PrefillResult>, ref: TokenListRefPayload | undefined): Promise<void> {
    if (ref === undefined) return;
    await deleteTokenList(deps.store, ref).catch((err: unknown) =>
      log('warn', "could not delete the job's input token list", { jobId: job.id, key: ref.key, err: String(err) }),
    );
  }

  return async function processPrefillJob(job, token, signal) {
    // only a prompt job has a request stream to write the error entry to
    const data = await parseJobPayload(job, parsePrefillJob, { what: 'prefill', log, requestIdOf: (d) => readableRequestId(d, 'prompt'), writeError });
    const requestId = data.kind === 'prompt' ? data.requestId : null;
    const inputRef = data.kind === 'prompt' ? data.tokensRef : 'tokensRef' in data.input ? data.input.tokensRef : undefined;
    const slotId = job.id ?? token ?? '';
    deps.slots?.enter(slotId, { kind: data.kind, tenant: data.tenant, batch: data.kind === 'prompt' && data.batch === true });
    try {
      const result = data.kind === 'document' ? await runDocument(job, data, signal) : await runPrompt(job, data, signal);
      await dropInput(job, inputRef);
      return result;
    } catch (err) {
      if (err instanceof HandBackError) throw await handJobBack(job, token, log, { jobId: job.id });
      const failure = await failJob(err, job, { log, msg: 'prefill failed', fields: { jobId: job.id, kind: data.kind, requestId }, requestId, writeError });
      if (isFinalFailure(err, job)) await dropInput(job, inputRef);
      throw failure;
    } finally {
      deps.slots?.leave(slotId);
    }
  };
}
