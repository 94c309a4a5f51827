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
 *    jobs this worker runs; each token becomes a stream entry (with its logprobs when the job asks).
 *    A job with n choices is one engine generation (one prefill, the sequence forked after it) whose
 *    choice i writes its own stream (choiceStreamId; choice 0's is the request's), and the prompt's
 *    logprobs (echo) are one entry opening choice 0's stream, before any token of any choice (one
 *    append chain for all the request's entries keeps that order). A retry resumes: the tokens each
 *    choice's stream already holds are fed to the engine (resumeTokens; resumeChoices with n > 1)
 *    instead of being generated again, and generation continues after them exactly as the
 *    undisturbed run would (greedy, or seeded sampling, whose randomness depends on (seed, token
 *    index) only); a choice whose stream already ended keeps its end, and its tokens are not written
 *    again. The cancel key is polled every `cancelPollMs` and aborts every choice (finish_reason
 *    'cancelled'). maxTokens 0 (echo of the prompt only): the engine generates one token, which is
 *    not written;
 * 5. per choice, the final entry: finish_reason, usage (the prompt's tokens, that choice's tokens;
 *    prompt_tokens_details.cached_tokens = the job's cachedTokens when set — a long prompt's
 *    artifact: what was stored before the request — else the document's tokens), the tail text and
 *    the attempt's timing. The job's result counts the prompt once and sums the choices' tokens.
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
  choiceStreamId,
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

/** The prompt's logprobs as the engine reports them (GenerateHooks.onPromptLogprobs). */
type PromptLogprobs = Parameters<NonNullable<GenerateHooks['onPromptLogprobs']>>[0];

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

/** Another attempt ended some of the choices' streams while this one ran, not all of them: retry. */
class EndedElsewhereError extends Error {
  readonly code = 'runtime';
  constructor() {
    super('another attempt ended some choices of this request while this one ran; a retry resumes the rest from their streams');
    this.name = 'EndedElsewhereError';
  }
}

type FinalEntry = Extract<StreamEntry, { kind: 'final' }>;

/** The result of a request whose choices' streams all ended with a final entry: the prompt once, the choices' tokens summed. */
function resultFromEnds(ends: readonly FinalEntry[]): DecodeResult {
  const first = ends[0] as FinalEntry;
  return {
    finishReason: first.finishReason,
    promptTokens: first.usage.prompt_tokens,
    cachedTokens: first.usage.prompt_tokens_details.cached_tokens,
    completionTokens: ends.reduce((sum, e) => sum + e.tokens, 0),
  };
}

/** What the choices' streams hold: ended for good (an error entry on any), all ended (their finals), or some open. */
function streamsOutcome(
  states: readonly StreamState[],
): { kind: 'failed'; code: string; message: string } | { kind: 'ended'; result: DecodeResult } | { kind: 'open' } {
  for (const s of states) if (s.end?.kind === 'error') return { kind: 'failed', code: s.end.code, message: s.end.message };
  if (states.every((s) => s.end !== null)) return { kind: 'ended', result: resultFromEnds(states.map((s) => s.end as FinalEntry)) };
  return { kind: 'open' };
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
 * Appends a request's entries (every choice's, to its stream) one after another, in the order they
 * were made, without holding up the engine's callbacks. While STREAM_PAUSE_ENTRIES entries per choice
 * wait (Redis is slow or frozen) the generation is paused (`flow`), and it resumes once they are down
 * to STREAM_RESUME_ENTRIES per choice: a decoder never computes far ahead of what its clients can be
 * sent, and a cancel set meanwhile finds little done.
 */
class TokenAppender {
  private chain: Promise<void> = Promise.resolve();
  private waiting = 0;
  failure: unknown = null;
  /** Another attempt ended the stream while this one was writing. */
  endedElsewhere = false;

  constructor(
    private readonly deps: DecodeDeps,
    private readonly choices: number,
    private readonly onStop: () => void,
    private readonly flow: FlowControl,
  ) {}

  /** Appends `entry` to the stream `streamId` (a choice's: choiceStreamId) after everything appended before. */
  append(streamId: string, entry: StreamEntry): void {
    this.waiting++;
    if (this.waiting >= STREAM_PAUSE_ENTRIES * this.choices) this.flow.pause();
    this.chain = this.chain.then(async () => {
      try {
        if (this.failure !== null || this.endedElsewhere) return;
        const r = await appendStreamEntry(this.deps.redis, streamId, entry, this.deps.streamTtlMs);
        if (r === 'ended') {
          this.endedElsewhere = true;
          this.onStop();
        }
      } catch (err) {
        this.failure = err;
        this.onStop();
      } finally {
        this.waiting--;
        if (this.waiting <= STREAM_RESUME_ENTRIES * this.choices) this.flow.resume();
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
    const n = data.n ?? 1;
    const streams = Array.from({ length: n }, (_, i) => choiceStreamId(requestId, i));
    const readStates = () => Promise.all(streams.map((s) => readStreamState(deps.redis, s)));
    const states = await readStates();
    const before = streamsOutcome(states);
    if (before.kind !== 'open') {
      log('info', 'stream already ended; nothing to do', { requestId, jobId: job.id, end: before.kind === 'failed' ? 'error' : 'final' });
      if (before.kind === 'ended') return before.result;
      throw new UnrecoverableError(formatFailure(before.code, before.message));
    }
    // per choice: the tokens an earlier attempt streamed, and whether its stream still waits for its end
    const streamed = states.map((s) => s.tokenIds);
    const open = states.map((s) => s.end === null);
    const endedTokens = (i: number): number => (states[i]?.end?.kind === 'final' ? states[i].end.tokens : (streamed[i]?.length ?? 0));
    if ((await deps.redis.exists(cancelKey(requestId))) > 0) {
      const promptTokens = data.promptIds.length;
      for (const [i, stream] of streams.entries()) {
        const tokens = streamed[i]?.length ?? 0;
        if (open[i])
          await appendStreamEntry(
            deps.redis,
            stream,
            { kind: 'final', finishReason: 'cancelled', usage: usage(promptTokens, 0, tokens), tokens },
            deps.streamTtlMs,
          );
      }
      return { finishReason: 'cancelled', promptTokens, cachedTokens: 0, completionTokens: streams.reduce((sum, _, i) => sum + endedTokens(i), 0) };
    }

    const engine = await deps.engine();
    const abort = new AbortController();
    let cancelled = false;
    let handBack = false;
    const stop = () => abort.abort();
    const flow = new FlowControl();
    const appender = new TokenAppender(deps, n, stop, flow);
    const unfollowJob = followJobSignal(signal, () => {
      handBack = true;
      stop();
    });
    const stopWatching = watchCancel(deps.redis, requestId, cancelPollMs, () => {
      cancelled = true;
      stop();
    });
    // maxTokens 0: the prompt only (echo); the engine generates at least one token, which is dropped
    const promptOnly = data.maxTokens === 0;
    const tails = streams.map(() => '');
    let firstAtMs = 0;
    let lastAtMs = 0;
    const onToken = (t: TokenEvent) => {
      if (promptOnly || open[t.choice] !== true) return; // a choice that ended in an earlier attempt keeps its stream as it is
      if (t.id < 0) {
        tails[t.choice] += t.text; // text released at the end of generation (held-back stop prefix, split UTF-8)
        return;
      }
      lastAtMs = Date.now();
      if (firstAtMs === 0) firstAtMs = lastAtMs;
      const logprobs = t.logprob !== undefined ? { logprob: t.logprob, top: t.topLogprobs ?? [] } : {};
      appender.append(streams[t.choice] as string, { kind: 'token', index: t.index, id: t.id, text: t.text, ...logprobs });
    };
    // the prompt's logprobs open choice 0's stream (the engine reports them before any token; a retry's are 'exists')
    const onPromptLogprobs = (logprobs: PromptLogprobs) => {
      if (open[0] !== true) return;
      appender.append(streams[0] as string, {
        kind: 'prompt',
        logprobs: logprobs.map((p) => (p === null ? null : { id: p.id, logprob: p.logprob, top: p.topLogprobs })),
      });
    };

    const replayTokens = data.replayTokens ?? deps.replayTokens;
    const resumed = streamed.some((ids) => ids.length > 0);
    const req: GenerateRequest = {
      tenant: data.tenant,
      priority: job.opts.priority ?? 0,
      ...(n > 1 ? { n, ...(resumed ? { resumeChoices: streamed } : {}) } : resumed ? { resumeTokens: streamed[0] ?? [] } : {}),
      promptIds: data.promptIds,
      maxTokens: Math.max(1, data.maxTokens),
      sampling: data.sampling,
      ignoreEos: data.ignoreEos,
      ...(data.stop.length > 0 ? { stopSequences: data.stop } : {}),
      ...(replayTokens !== undefined ? { replayTokens } : {}),
      ...(data.logprobs !== undefined && !promptOnly ? { logprobs: data.logprobs } : {}),
      ...(data.promptLogprobs !== undefined ? { promptLogprobs: data.promptLogprobs } : {}),
      ...(data.documentId !== null
        ? {
            document: {
              tenant: data.tenant,
              documentId: data.documentId,
              ...(typeof data.cachedTokens === 'number' ? { cachedTokens: data.cachedTokens } : {}),
            },
          }
        : {}),
    };
    let outcome: GenerateOutcome;
    const engineAtMs = Date.now();
    try {
      outcome = await engine.generate(req, { onToken, ...(data.promptLogprobs !== undefined ? { onPromptLogprobs } : {}), signal: abort.signal, flow });
    } finally {
      stopWatching();
      unfollowJob();
      await appender.drain();
    }

    // the answer is right either way (the tail was computed), but the stored one is missing or damaged: say so
    if (outcome.storedTailRejected !== undefined)
      log('warn', "the document's stored encoder tail was not used; this question computed it", {
        requestId,
        jobId: job.id,
        reason: outcome.storedTailRejected,
      });
    if (appender.failure !== null) throw appender.failure;
    if (appender.endedElsewhere) {
      const now = streamsOutcome(await readStates());
      if (now.kind === 'ended') return now.result;
      if (now.kind === 'failed') throw new UnrecoverableError(formatFailure(now.code, now.message));
      throw new EndedElsewhereError();
    }
    if (handBack) throw new HandBackError();
    if (outcome.choices.some((c) => c.finishReason === 'cancelled') && !cancelled) {
      // nobody here asked for it: the engine was closed or its thread is going away — retry
      throw new EngineAbortedError();
    }

    const timing = {
      queueMs: Math.max(0, startedAtMs - data.acceptedAtMs),
      prefillMs: firstAtMs > 0 ? firstAtMs - startedAtMs : Date.now() - startedAtMs,
      decodeMs: firstAtMs > 0 ? lastAtMs - firstAtMs : 0,
      attempt: job.attemptsMade + 1,
    };
    let completionTokens = 0;
    const reasons: DecodeResult['finishReason'][] = [];
    for (const [i, stream] of streams.entries()) {
      const choice = outcome.choices[i];
      const earlier = states[i]?.end;
      if (earlier?.kind === 'final') {
        completionTokens += earlier.tokens;
        reasons.push(earlier.finishReason);
        continue;
      }
      if (choice === undefined) throw new EngineAbortedError(); // the engine answered fewer choices than asked: not this job's fault
      const tokens = promptOnly ? 0 : Math.max(streamed[i]?.length ?? 0, choice.tokens.length);
      const finishReason = promptOnly && choice.finishReason !== 'cancelled' ? 'length' : choice.finishReason;
      const tail = tails[i] ?? '';
      const end: StreamEntry = {
        kind: 'final',
        finishReason,
        usage: usage(outcome.promptTokens, outcome.cachedTokens, tokens),
        tokens,
        ...(tail !== '' ? { text: tail } : {}),
        timing,
      };
      const written = await appendStreamEntry(deps.redis, stream, end, deps.streamTtlMs);
      if (written !== 'written') log('warn', 'another attempt wrote the end of the stream', { requestId, choice: i, outcome: written });
      completionTokens += tokens;
      reasons.push(finishReason);
    }
    const finishReason = reasons[0] ?? 'length';
    // where the time to the first token went: before the engine got the request, and in it (its prefill)
    const timings = {
      queueMs: timing.queueMs,
      toEngineMs: engineAtMs - startedAtMs,
      firstTokenMs: timing.prefillMs,
      enginePrefillMs: Math.round(outcome.timings.prefillMs),
    };
    log('info', 'decode done', {
      requestId,
      jobId: job.id,
      finishReason,
      choices: n,
      completionTokens,
      cachedTokens: outcome.cachedTokens,
      skipped: streamed.reduce((a, ids) => a + ids.length, 0),
      attempt: job.attemptsMade + 1,
      ...timings,
    });
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
