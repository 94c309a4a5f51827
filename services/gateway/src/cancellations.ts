/**
 * @module cancellations
 * Cancelling a request means setting its cancel key (`csa2:cancel:<requestId>`, read by the workers
 * between two tokens or two prefill chunks). It must land even when Redis is what failed: a request
 * whose client got a 503 because Redis froze would otherwise run to its end once Redis is back, for
 * nobody, ahead of new requests. So a cancel that Redis refuses stays pending here and is retried
 * every `retryMs` (all pending keys in one pipeline) until it lands or its stream's TTL has passed.
 *
 * The gateway cancels a request whenever it ends without its answer: the client went away, the
 * relay failed (Redis, a lost job, a worker error), the request timed out, the gateway is shutting
 * down, or its enqueue failed (a timed-out add may still have reached Redis).
 */
import type { Logger } from 'pino';
import { STREAM_TTL_SECONDS, cancelKey, type Redis } from '@csa2/jobs';

export interface CancellationsOptions {
  /** Time between two attempts at the pending cancels. @defaultValue 250 */
  readonly retryMs?: number;
  /** Pending cancels kept at most (the oldest are dropped past it, with a warning). @defaultValue 100000 */
  readonly maxPending?: number;
}

export class Cancellations {
  /** requestId → when to give up (ms since epoch): the stream, and any job of it, are gone by then */
  private readonly pending = new Map<string, number>();
  private readonly retryMs: number;
  private readonly maxPending: number;
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;
  private closed = false;

  constructor(
    private readonly redis: Redis,
    private readonly logger: Logger,
    options: CancellationsOptions = {},
  ) {
    this.retryMs = options.retryMs ?? 250;
    this.maxPending = options.maxPending ?? 100_000;
  }

  /** Cancels still waiting for Redis. */
  get pendingCount(): number {
    return this.pending.size;
  }

  /** Sets the request's cancel key now, or as soon as Redis takes it. Never throws. */
  cancel(requestId: string): void {
    if (this.closed) return;
    if (!this.pending.has(requestId) && this.pending.size >= this.maxPending) {
      const oldest = this.pending.keys().next().value;
      if (oldest !== undefined) this.pending.delete(oldest);
      this.logger.warn({ maxPending: this.maxPending }, 'too many cancels waiting for Redis: the oldest was dropped');
    }
    this.pending.set(requestId, Date.now() + STREAM_TTL_SECONDS * 1000);
    void this.flush();
  }

  /** One attempt at every pending cancel (one pipeline); what fails stays pending and is retried. */
  flush(): Promise<void> {
    this.flushing ??= this.attempt().finally(() => {
      this.flushing = null;
      this.schedule();
    });
    return this.flushing;
  }

  private async attempt(): Promise<void> {
    const now = Date.now();
    for (const [id, giveUpAtMs] of this.pending) if (giveUpAtMs <= now) this.pending.delete(id);
    const ids = [...this.pending.keys()];
    if (ids.length === 0) return;
    const pipe = this.redis.pipeline();
    for (const id of ids) pipe.set(cancelKey(id), '1', 'EX', STREAM_TTL_SECONDS);
    let results: [Error | null, unknown][] | null = null;
    try {
      results = await pipe.exec();
    } catch (err) {
      this.logger.debug({ pending: ids.length, err: err instanceof Error ? err.message : String(err) }, 'cancel keys not set yet (Redis); retrying');
      return;
    }
    let landed = 0;
    ids.forEach((id, i) => {
      if (results?.[i]?.[0] === null) {
        this.pending.delete(id);
        landed++;
      }
    });
    if (landed < ids.length) this.logger.debug({ pending: this.pending.size }, 'some cancel keys not set yet (Redis); retrying');
    else if (ids.length > 1) this.logger.info({ cancelled: landed }, 'pending cancels set');
  }

  private schedule(): void {
    if (this.closed || this.pending.size === 0 || this.timer !== null) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.flush();
    }, this.retryMs);
    this.timer.unref();
  }

  /** One last attempt at what is pending, then stops retrying. */
  async close(): Promise<void> {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    await this.flush().catch(() => undefined);
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }
}
