/**
 * @module relay
 * Reads a request's Redis Streams (format in @csa2/jobs stream.ts; one per choice, choiceStreamId)
 * from the start with blocking XREADs (one XREAD covers every choice still open, choice 0's stream
 * first) and yields their entries, each with its choice, until every choice's final entry or an
 * error entry. Nobody waits on an implicit signal:
 *
 * - every `jobPollMs` without a terminal entry, the request's jobs are checked: a failed job ends the
 *   relay with its failure (`[code] message` failedReason → status by code), a job that vanished
 *   (both request jobs unknown on two polls in a row) ends it with 503 `job_lost`, and a decode job
 *   that completed with no terminal entry in its stream ends it with 500 `stream_invalid`;
 * - the same poll reports what the request is waiting on to `onProgress` (queued, a prefill's tokens
 *   encoded so far, an active job whose lock expired because its worker died and that is about to be
 *   picked up again, a recovered retry), which the SSE relay sends as progress comments: a client of
 *   a quiet stream sees where its request is, not only keep-alives;
 * - past `deadlineMs` the relay throws a 504 `timeout` (the caller sets the cancel key);
 * - when `signal` aborts, the relay returns (at the latest one block, ≤ 1 s, later) without a terminal
 *   entry; the caller knows why.
 *
 * Token entries are yielded once per index and choice (a duplicate index is skipped). Entries of one
 * choice come in their stream's order; choices interleave as their entries arrive.
 */
import { choiceStreamId, decodeStreamEntry, parseFailure, streamKey, type StreamEntry } from '@csa2/jobs';
import { ApiError, isRedisUnavailable, publicMessage, redisUnavailable, workerError } from './errors.js';
import type { GatewayDeps } from './capabilities.js';

/** The capabilities this module takes. */
export type RelayDeps = Pick<GatewayDeps, 'config' | 'queues' | 'redis' | 'readers'>;

export interface RelayOptions {
  readonly requestId: string;
  /** BullMQ ids of the request's jobs: the decode job, and the prefill job of a long prompt. */
  readonly decodeJobId: string;
  readonly prefillJobId: string | null;
  /** Epoch ms after which the relay gives up with a 504. */
  readonly deadlineMs: number;
  readonly signal: AbortSignal;
  /** Choices of the request (DecodeJob.n): the streams read. @defaultValue 1 */
  readonly choices?: number;
  /** Called at each job poll that found no new entry, with what the request is waiting on. */
  readonly onProgress?: (progress: RelayProgress) => void;
}

/** An entry of one of the request's streams. */
export interface RelayedEntry {
  readonly choice: number;
  readonly entry: StreamEntry;
}

/** Where a request without new entries stands (one job poll). */
export interface RelayProgress {
  /** The job it waits on: its long prompt's prefill, or its decode. */
  readonly stage: 'prefill' | 'decode';
  /** The job's BullMQ state: waiting, prioritized, delayed (a retry's backoff), active. */
  readonly state: string;
  /** prefill: tokens encoded so far and to encode (the job's PrefillProgress). */
  readonly tokensDone?: number;
  readonly tokensTotal?: number;
  /** decode: tokens relayed so far. */
  readonly tokens?: number;
  /** 1-based attempt of the job. */
  readonly attempt: number;
  /** Active, but its lock expired: its worker is gone, and a stalled check puts it back in the queue. */
  readonly stalled: boolean;
  /** Times the job was taken back from a dead worker so far. */
  readonly recoveries: number;
}

/** The SSE comment line of a progress report (snake_case JSON, one line). */
export function progressComment(p: RelayProgress): string {
  return `progress ${JSON.stringify({
    stage: p.stage,
    state: p.state,
    ...(p.tokensDone !== undefined ? { tokens_done: p.tokensDone } : {}),
    ...(p.tokensTotal !== undefined ? { tokens_total: p.tokensTotal } : {}),
    ...(p.tokens !== undefined ? { tokens: p.tokens } : {}),
    attempt: p.attempt,
    ...(p.stalled ? { stalled: true } : {}),
    ...(p.recoveries > 0 ? { recoveries: p.recoveries } : {}),
  })}`;
}

type XReadReply = [key: string, items: [id: string, fields: string[]][]][] | null;

export async function* relayStream(deps: RelayDeps, options: RelayOptions): AsyncGenerator<RelayedEntry, void, undefined> {
  const { readers } = deps;
  const n = options.choices ?? 1;
  const keys = Array.from({ length: n }, (_, i) => streamKey(choiceStreamId(options.requestId, i)));
  const choiceOf = new Map(keys.map((k, i) => [k, i]));
  const conn = await readers.acquire();
  let healthy = true;
  const lastIds = keys.map(() => '0');
  const nextIndex = keys.map(() => 0);
  /** Choices whose stream has not ended, in order (choice 0 first: its prompt entry precedes every token). */
  let open = keys.map((_, i) => i);
  let nextPollMs = Date.now() + deps.config.jobPollMs;
  const jobCheck = new JobCheck(deps, options);
  try {
    for (;;) {
      if (options.signal.aborted) return;
      const now = Date.now();
      const remainingMs = options.deadlineMs - now;
      if (remainingMs <= 0)
        throw new ApiError(504, `the request did not finish within ${deps.config.requestTimeoutMs} ms and was cancelled`, { code: 'timeout' });
      const blockMs = Math.max(1, Math.min(readers.blockMs, remainingMs, Math.max(1, nextPollMs - now)));
      let reply: XReadReply;
      try {
        reply = (await conn.xread(
          'COUNT',
          512,
          'BLOCK',
          blockMs,
          'STREAMS',
          ...open.map((c) => keys[c] as string),
          ...open.map((c) => lastIds[c] as string),
        )) as XReadReply;
      } catch (err) {
        healthy = false;
        throw isRedisUnavailable(err) ? redisUnavailable(err) : err;
      }
      const ended = new Set<number>();
      for (const [key, items] of reply ?? []) {
        const choice = choiceOf.get(key);
        if (choice === undefined) continue;
        for (const [id, fields] of items) {
          lastIds[choice] = id;
          let entry: StreamEntry;
          try {
            entry = decodeStreamEntry(fields);
          } catch (err) {
            throw new ApiError(500, publicMessage('stream-invalid'), {
              code: 'stream_invalid',
              detail: `malformed stream entry: ${err instanceof Error ? err.message : String(err)}`,
            });
          }
          if (entry.kind === 'token') {
            if (entry.index < (nextIndex[choice] as number)) continue;
            nextIndex[choice] = entry.index + 1;
          }
          yield { choice, entry };
          if (entry.kind === 'error') return;
          if (entry.kind === 'final') {
            ended.add(choice);
            break;
          }
        }
      }
      if (ended.size > 0) {
        open = open.filter((c) => !ended.has(c));
        if (open.length === 0) return;
      }
      if ((reply === null || reply.length === 0) && Date.now() >= nextPollMs) {
        await jobCheck.run();
        if (options.onProgress !== undefined) {
          const progress = await jobCheck.progress(nextIndex.reduce((a, b) => a + b, 0));
          if (progress !== null && !options.signal.aborted) options.onProgress(progress);
        }
        nextPollMs = Date.now() + deps.config.jobPollMs;
      }
    }
  } finally {
    readers.release(conn, healthy);
  }
}

/** The periodic "did my jobs fail?" check of a waiting relay. */
class JobCheck {
  private lostPolls = 0;
  private completedPolls = 0;

  constructor(
    private readonly deps: RelayDeps,
    private readonly options: RelayOptions,
  ) {}

  async run(): Promise<void> {
    try {
      await this.check();
    } catch (err) {
      if (err instanceof ApiError) throw err;
      throw isRedisUnavailable(err) ? redisUnavailable(err) : err;
    }
  }

  /**
   * What the request waits on now: its decode job once that exists, else its prefill job; null when
   * neither is pending or Redis cannot say (progress is best-effort).
   */
  async progress(tokens: number): Promise<RelayProgress | null> {
    try {
      const decode = await this.pendingJob('decode', this.options.decodeJobId);
      if (decode !== null) return { stage: 'decode', ...decode, tokens };
      if (this.options.prefillJobId === null) return null;
      const prefill = await this.pendingJob('prefill', this.options.prefillJobId);
      if (prefill === null) return null;
      const p: unknown = prefill.progress;
      const done = typeof p === 'object' && p !== null ? (p as Record<string, unknown>) : {};
      return {
        stage: 'prefill',
        state: prefill.state,
        attempt: prefill.attempt,
        stalled: prefill.stalled,
        recoveries: prefill.recoveries,
        ...(typeof done['tokensDone'] === 'number' ? { tokensDone: done['tokensDone'] } : {}),
        ...(typeof done['tokensTotal'] === 'number' ? { tokensTotal: done['tokensTotal'] } : {}),
      };
    } catch {
      return null;
    }
  }

  /** A job's state, attempt and health when it is waiting or running; null when it is not (or gone). */
  private async pendingJob(
    queue: 'decode' | 'prefill',
    jobId: string,
  ): Promise<{ state: string; attempt: number; stalled: boolean; recoveries: number; progress: unknown } | null> {
    const q = this.deps.queues[queue];
    const state = await q.getJobState(jobId);
    if (state === 'unknown' || state === 'completed' || state === 'failed') return null;
    const job = await q.getJob(jobId);
    if (job === undefined) return null;
    const stalled = state === 'active' && (await this.deps.redis.exists(q.toKey(`${jobId}:lock`))) === 0;
    return { state, attempt: job.attemptsMade + 1, stalled, recoveries: job.stalledCounter, progress: job.progress };
  }

  private async failure(queue: 'decode' | 'prefill', jobId: string): Promise<ApiError> {
    const job = await this.deps.queues[queue].getJob(jobId);
    const { code, message } = parseFailure(job?.failedReason ?? 'the job failed');
    return workerError(code, message);
  }

  private async check(): Promise<void> {
    const { queues } = this.deps;
    const decodeState = await queues.decode.getJobState(this.options.decodeJobId);
    if (decodeState === 'failed') throw await this.failure('decode', this.options.decodeJobId);
    if (decodeState === 'completed') {
      // The final entry is written before the job completes; give a slow XREAD one more poll.
      if (++this.completedPolls >= 2) throw new ApiError(500, 'the decode job completed but its token stream has no final entry', { code: 'stream_invalid' });
      return;
    }
    if (decodeState !== 'unknown') {
      this.lostPolls = 0;
      return;
    }
    if (this.options.prefillJobId !== null) {
      const prefillState = await queues.prefill.getJobState(this.options.prefillJobId);
      if (prefillState === 'failed') throw await this.failure('prefill', this.options.prefillJobId);
      if (prefillState !== 'unknown') {
        this.lostPolls = 0;
        return;
      }
    }
    if (++this.lostPolls >= 2)
      throw new ApiError(503, 'the request was lost: its jobs are gone from the queue (was Redis restarted?)', {
        code: 'job_lost',
        headers: { 'retry-after': '1' },
      });
  }
}
