/**
 * @module relay
 * Reads a request's Redis Stream (format in @csa2/jobs stream.ts) from the start with blocking
 * XREADs and yields its entries until the final or error entry. Nobody waits on an implicit signal:
 *
 * - every `jobPollMs` without a terminal entry, the request's jobs are checked: a failed job ends the
 *   relay with its failure (`[code] message` failedReason → status by code), a job that vanished
 *   (both request jobs unknown on two polls in a row) ends it with 503 `job_lost`, and a decode job
 *   that completed with no terminal entry in its stream ends it with 500 `stream_invalid`;
 * - past `deadlineMs` the relay throws a 504 `timeout` (the caller sets the cancel key);
 * - when `signal` aborts, the relay returns (at the latest one block, ≤ 1 s, later) without a terminal
 *   entry; the caller knows why.
 *
 * Token entries are yielded once per index (a duplicate index is skipped).
 */
import { decodeStreamEntry, parseFailure, streamKey, type StreamEntry } from '@csa2/jobs';
import { ApiError, isRedisUnavailable, publicMessage, redisUnavailable, workerError } from './errors.js';
import type { GatewayDeps } from './deps.js';

export interface RelayOptions {
  readonly requestId: string;
  /** BullMQ ids of the request's jobs: the decode job, and the prefill job of a long prompt. */
  readonly decodeJobId: string;
  readonly prefillJobId: string | null;
  /** Epoch ms after which the relay gives up with a 504. */
  readonly deadlineMs: number;
  readonly signal: AbortSignal;
}

type XReadReply = [key: string, items: [id: string, fields: string[]][]][] | null;

export async function* relayStream(deps: GatewayDeps, options: RelayOptions): AsyncGenerator<StreamEntry, void, undefined> {
  const { readers } = deps;
  const key = streamKey(options.requestId);
  const conn = await readers.acquire();
  let healthy = true;
  let lastId = '0';
  let nextIndex = 0;
  let nextPollMs = Date.now() + deps.config.jobPollMs;
  const jobCheck = new JobCheck(deps, options);
  try {
    for (;;) {
      if (options.signal.aborted) return;
      const now = Date.now();
      const remainingMs = options.deadlineMs - now;
      if (remainingMs <= 0) throw new ApiError(504, `the request did not finish within ${deps.config.requestTimeoutMs} ms and was cancelled`, { code: 'timeout' });
      const blockMs = Math.max(1, Math.min(readers.blockMs, remainingMs, Math.max(1, nextPollMs - now)));
      let reply: XReadReply;
      try {
        reply = (await conn.xread('COUNT', 512, 'BLOCK', blockMs, 'STREAMS', key, lastId)) as XReadReply;
      } catch (err) {
        healthy = false;
        throw isRedisUnavailable(err) ? redisUnavailable(err) : err;
      }
      for (const [, items] of reply ?? []) {
        for (const [id, fields] of items) {
          lastId = id;
          let entry: StreamEntry;
          try {
            entry = decodeStreamEntry(fields);
          } catch (err) {
            throw new ApiError(500, publicMessage('stream-invalid'), { code: 'stream_invalid', detail: `malformed stream entry: ${err instanceof Error ? err.message : String(err)}` });
          }
          if (entry.kind === 'token') {
            if (entry.index < nextIndex) continue;
            nextIndex = entry.index + 1;
          }
          yield entry;
          if (entry.kind !== 'token') return;
        }
      }
      if ((reply === null || reply.length === 0) && Date.now() >= nextPollMs) {
        await jobCheck.run();
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
    private readonly deps: GatewayDeps,
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
    if (++this.lostPolls >= 2) throw new ApiError(503, 'the request was lost: its jobs are gone from the queue (was Redis restarted?)', { code: 'job_lost', headers: { 'retry-after': '1' } });
  }
}
