/**
 * @module processor
 * The decode job processor: a DecodeJob in, tokens appended to the request's Redis Stream, a
 * DecodeResult out. A plain function (job, token, signal) that BullMQ hosts; everything it needs
 * comes in `DecodeDeps`.
 *
 * Per job:
 * 1. parse the payload — malformed: error entry (when the request id is readable) + UnrecoverableError;
 * 2. read the stream — already ended (final or error entry): return at once, nothing regenerated;
 * 3. cancel key already set: final entry 'cancelled' at once;
 * 4. generate ([document tokens] + promptIds) in the engine thread, which batches it with the other
 *    jobs this worker runs; each token becomes a stream entry. A retry resumes: the tokens the stream
 *    already holds are fed to the engine (resumeTokens) instead of being generated again, and
 *    generation continues after them exactly as the undisturbed run would (greedy, or seeded
 *    sampling, whose randomness depends on (seed, token index) only); the cancel key is polled every
 *    `cancelPollMs` and aborts generation (finish_reason 'cancelled');
 * 5. the final entry: finish_reason, usage (prompt_tokens_details.cached_tokens = the job's
 *    cachedTokens when set — a long prompt's artifact: what was stored before the request — else the
 *    document's tokens),
 *    the tail text and the attempt's timing.
 *
 * Failures follow the workers' common policy (@csa2/jobs job-failure): deterministic codes (see
 * DETERMINISTIC_ERROR_CODES) → error entry + UnrecoverableError; anything else → thrown as is, so
 * BullMQ retries with backoff — on the job's last attempt the error entry is written first, so the
 * client is never left waiting. When BullMQ aborts `signal` (shutdown past its grace period) the job
 * stops and is handed back to the queue without using an attempt.
 */
import { FlowControl, type GenerateHooks, type GenerateOutcome, type GenerateRequest, type TokenEvent } from '@csa2/engine';
import {
  HandBackError,
  UnrecoverableError,
  appendStreamEntry,
  cancelKey,
  failJob,
  followJobSignal,
  formatFailure,
  handJobBack,
  parseDecodeJob,
  parseJobPayload,
  readStreamState,
  readableRequestId,
  silentLogger,
  writeErrorEntry,
  type Closable,
  type DecodeJob,
  type DecodeResult,
  type EngineJobDeps,
  type Job,
  type Redis,
  type StreamEntry,
  type StreamState,
} from '@csa2/jobs';

/** What the processor needs from the engine (EngineHost satisfies it). */
export interface DecodeEngine extends Closable {
  generate(req: GenerateRequest, hooks?: GenerateHooks): Promise<GenerateOutcome>;
}

/** `redis` (stream appends, cancel polls), `engine` and `log`, plus the decoder's settings. */
export interface DecodeDeps extends EngineJobDeps<DecodeEngine> {
  /** Replay length for jobs that leave it null; undefined = the engine's default. */
  readonly replayTokens?: number;
  /** How often a running job checks its cancel key. @defaultValue 50 */
  readonly cancelPollMs?: number;
  /** Stream TTL, refreshed on every append. @defaultValue STREAM_TTL_MS (1 h) */
  readonly streamTtlMs?: number;
}

export type DecodeProcessor = (job: Job<unknown, DecodeResult>, token: string | undefined, signal: AbortSignal | undefined) => Promise<DecodeResult>;

/** The engine stopped a generation nobody cancelled (it is closing): transient. */
class EngineAbortedError extends Error {
  readonly code = 'runtime';
  constructor() {
    super('the engine stopped the generation (engine closing or restarting)');
    this.name = 'EngineAbortedError';
  }
}

function resultFromEnd(end: Extract<StreamEntry, { kind: 'final' }>): DecodeResult {
  return {
    finishReason: end.finishReason,
    promptTokens: end.usage.prompt_tokens,
    cachedTokens: end.usage.prompt_tokens_details.cached_tokens,
    completionTokens: end.tokens,
  };
}

function usage(promptTokens: number, cachedTokens: number, completionTokens: number) {
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
    prompt_tokens_details: { cached_tokens: cachedTokens },
  };
}

/** Token entries not yet written at which the generation is paused, and resumed again (backpressure). */
export const STREAM_PAUSE_ENTRIES = 64;
export const STREAM_RESUME_ENTRIES = 16;

/**
 * Appends token entries one after another (in order) without holding up the engine's callbacks. While
 * STREAM_PAUSE_ENTRIES entries wait (Redis is slow or frozen) the generation is paused (`flow`), and
 * it resumes once they are down to STREAM_RESUME_ENTRIES: a decoder never computes far ahead of what
 * its clients can be sent, and a cancel set meanwhile finds little done.
 */
class TokenAppender {
  private chain: Promise<void> = Promise.resolve();
  private waiting = 0;
  failure: unknown = null;
  /** Another attempt ended the stream while this one was writing. */
  endedElsewhere = false;

  constructor(
    private readonly deps: DecodeDeps,
    private readonly requestId: string,
    private readonly onStop: () => void,
    private readonly flow: FlowControl,
  ) {}

  append(entry: StreamEntry): void {
    this.waiting++;
    if (this.waiting >= STREAM_PAUSE_ENTRIES) this.flow.pause();
    this.chain = this.chain.then(async () => {
      try {
        if (this.failure !== null || this.endedElsewhere) return;
        const r = await appendStreamEntry(this.deps.redis, this.requestId, entry, this.deps.streamTtlMs);
        if (r === 'ended') {
          this.endedElsewhere = true;
          this.onStop();
        }
      } catch (err) {
        this.failure = err;
        this.onStop();
      } finally {
        this.waiting--;
        if (this.waiting <= STREAM_RESUME_ENTRIES) this.flow.resume();
      }
    });
  }

  drain(): Promise<void> {
    return this.chain;
  }
}

/** Polls the cancel key every `everyMs` (one EXISTS at a time) until stopped. */
function watchCancel(redis: Redis, requestId: string, everyMs: number, onCancel: () => void): () => void {
  let busy = false;
  const timer = setInterval(() => {
    if (busy) return;
    busy = true;
    redis.exists(cancelKey(requestId)).then(
      (n) => {
        busy = false;
        if (n > 0) onCancel();
      },
      () => {
        busy = false; // a Redis hiccup: the stream appends will surface it
      },
    );
  }, everyMs);
  return () => clearInterval(timer);
}

export function createDecodeProcessor(deps: DecodeDeps): DecodeProcessor {
  const log = deps.log ?? silentLogger;
  const cancelPollMs = deps.cancelPollMs ?? 50;
  const writeError = (requestId: string, code: string, message: string) => writeErrorEntry(deps.redis, log, requestId, code, message, deps.streamTtlMs);

  async function run(data: DecodeJob, job: Job<unknown, DecodeResult>, signal: AbortSignal | undefined, startedAtMs: number): Promise<DecodeResult> {
    const { requestId } = data;
    const state: StreamState = await readStreamState(deps.redis, requestId);
    if (state.end !== null) {
      log('info', 'stream already ended; nothing to do', { requestId, jobId: job.id, end: state.end.kind });
      if (state.end.kind === 'final') return resultFromEnd(state.end);
      throw new UnrecoverableError(formatFailure(state.end.code, state.end.message));
    }
    const streamed = state.tokenIds;
    if ((await deps.redis.exists(cancelKey(requestId))) > 0) {
      const promptTokens = data.promptIds.length;
      await appendStreamEntry(deps.redis, requestId, { kind: 'final', finishReason: 'cancelled', usage: usage(promptTokens, 0, streamed.length), tokens: streamed.length }, deps.streamTtlMs);
      return { finishReason: 'cancelled', promptTokens, cachedTokens: 0, completionTokens: streamed.length };
    }

    const engine = await deps.engine();
    const abort = new AbortController();
    let cancelled = false;
    let handBack = false;
    const stop = () => abort.abort();
    const flow = new FlowControl();
    const appender = new TokenAppender(deps, requestId, stop, flow);
    const unfollowJob = followJobSignal(signal, () => {
      handBack = true;
      stop();
    });
    const stopWatching = watchCancel(deps.redis, requestId, cancelPollMs, () => {
      cancelled = true;
      stop();
    });
    let tail = '';
    let firstAtMs = 0;
    let lastAtMs = 0;
    const onToken = (t: TokenEvent) => {
      if (t.id < 0) {
        tail += t.text; // text released at the end of generation (held-back stop prefix, split UTF-8)
        return;
      }
      lastAtMs = Date.now();
      if (firstAtMs === 0) firstAtMs = lastAtMs;
      appender.append({ kind: 'token', index: t.index, id: t.id, text: t.text });
    };

    const replayTokens = data.replayTokens ?? deps.replayTokens;
    const req: GenerateRequest = {
      tenant: data.tenant,
      priority: job.opts.priority ?? 0,
      ...(streamed.length > 0 ? { resumeTokens: streamed } : {}),
      promptIds: data.promptIds,
      maxTokens: data.maxTokens,
      sampling: data.sampling,
      ignoreEos: data.ignoreEos,
      ...(data.stop.length > 0 ? { stopSequences: data.stop } : {}),
      ...(replayTokens !== undefined ? { replayTokens } : {}),
      ...(data.documentId !== null
        ? { document: { tenant: data.tenant, documentId: data.documentId, ...(typeof data.cachedTokens === 'number' ? { cachedTokens: data.cachedTokens } : {}) } }
        : {}),
    };
    let outcome: GenerateOutcome;
    try {
      outcome = await engine.generate(req, { onToken, signal: abort.signal, flow });
    } finally {
      stopWatching();
      unfollowJob();
      await appender.drain();
    }

    if (appender.failure !== null) throw appender.failure;
    if (appender.endedElsewhere) {
      const now = await readStreamState(deps.redis, requestId);
      if (now.end?.kind === 'final') return resultFromEnd(now.end);
      throw new UnrecoverableError(formatFailure(now.end?.code ?? 'stream-invalid', now.end?.message ?? 'the stream ended elsewhere'));
    }
    if (handBack) throw new HandBackError();
    if (outcome.finishReason === 'cancelled' && !cancelled) {
      // nobody here asked for it: the engine was closed or its thread is going away — retry
      throw new EngineAbortedError();
    }

    const finishReason = outcome.finishReason;
    const completionTokens = Math.max(streamed.length, outcome.tokens.length);
    const end: StreamEntry = {
      kind: 'final',
      finishReason,
      usage: usage(outcome.promptTokens, outcome.cachedTokens, completionTokens),
      tokens: completionTokens,
      ...(tail !== '' ? { text: tail } : {}),
      timing: {
        queueMs: Math.max(0, startedAtMs - data.acceptedAtMs),
        prefillMs: firstAtMs > 0 ? firstAtMs - startedAtMs : Date.now() - startedAtMs,
        decodeMs: firstAtMs > 0 ? lastAtMs - firstAtMs : 0,
        attempt: job.attemptsMade + 1,
      },
    };
    const written = await appendStreamEntry(deps.redis, requestId, end, deps.streamTtlMs);
    if (written !== 'written') log('warn', 'another attempt wrote the end of the stream', { requestId, outcome: written });
    log('info', 'decode done', { requestId, jobId: job.id, finishReason, completionTokens, cachedTokens: outcome.cachedTokens, skipped: streamed.length, attempt: job.attemptsMade + 1 });
    return { finishReason, promptTokens: outcome.promptTokens, cachedTokens: outcome.cachedTokens, completionTokens };
  }

  return async function processDecodeJob(job, token, signal) {
    const startedAtMs = Date.now();
    const data = await parseJobPayload(job, parseDecodeJob, { what: 'decode', log, requestIdOf: readableRequestId, writeError });
    const { requestId } = data;
    try {
      return await run(data, job, signal, startedAtMs);
    } catch (err) {
      if (err instanceof UnrecoverableError) throw err;
      if (err instanceof HandBackError) throw await handJobBack(job, token, log, { requestId, jobId: job.id });
      throw await failJob(err, job, { log, msg: 'decode failed', fields: { requestId, jobId: job.id }, requestId, writeError });
    }
  };
}
