/**
 * @module reader-pool
 * Connections for blocking XREADs. A blocking command holds its connection for the whole block, so
 * every relayed stream reads on a connection of its own, taken from this pool and handed back after.
 * Reader connections never reconnect or queue: a dropped one fails its read at once (the relay then
 * answers 503) and is discarded; the pool dials a new one for the next request.
 */
import type { Redis } from '@csa2/jobs';
import { redisUnavailable, withTimeout } from './errors.js';

export interface ReaderPoolOptions {
  /** Idle connections kept for reuse. @defaultValue 16 */
  readonly maxIdle?: number;
  /** Dial timeout of a new connection. @defaultValue 2000 */
  readonly connectTimeoutMs?: number;
  /** Per-command timeout on top of the block time a read asks for. @defaultValue 5000 */
  readonly commandTimeoutMs?: number;
  /** Longest block a read asks for (XREAD BLOCK). @defaultValue 1000 */
  readonly blockMs?: number;
}

export class ReaderPool {
  readonly blockMs: number;
  private readonly idle: Redis[] = [];
  private readonly busy = new Set<Redis>();
  private readonly maxIdle: number;
  private readonly connectTimeoutMs: number;
  private readonly commandTimeoutMs: number;
  private closed = false;

  /** `base` is the connection whose settings (URL, auth, db) readers copy. */
  constructor(
    private readonly base: Redis,
    options: ReaderPoolOptions = {},
  ) {
    this.maxIdle = options.maxIdle ?? 16;
    this.connectTimeoutMs = options.connectTimeoutMs ?? 2000;
    this.commandTimeoutMs = options.commandTimeoutMs ?? 5000;
    this.blockMs = options.blockMs ?? 1000;
  }

  /** A ready connection for blocking reads; throws a 503 ApiError when Redis cannot be reached. */
  async acquire(): Promise<Redis> {
    if (this.closed) throw redisUnavailable(new Error('the gateway is shutting down'));
    for (;;) {
      const conn = this.idle.pop();
      if (conn === undefined) break;
      if (conn.status === 'ready') {
        this.busy.add(conn);
        return conn;
      }
      conn.disconnect();
    }
    const conn = this.base.duplicate({
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      commandTimeout: this.blockMs + this.commandTimeoutMs,
      connectionName: 'csa2-gateway-reader',
    });
    conn.on('error', () => undefined); // failures surface on the command that hits them
    try {
      await withTimeout(conn.connect(), this.connectTimeoutMs, () => new Error(`connect ETIMEDOUT after ${this.connectTimeoutMs} ms`));
    } catch (err) {
      conn.disconnect();
      throw redisUnavailable(err);
    }
    this.busy.add(conn);
    return conn;
  }

  /** Hands a connection back; `healthy: false` (a read failed or was abandoned) discards it. */
  release(conn: Redis, healthy: boolean): void {
    this.busy.delete(conn);
    if (healthy && !this.closed && conn.status === 'ready' && this.idle.length < this.maxIdle) this.idle.push(conn);
    else conn.disconnect();
  }

  /** Disconnects every connection (busy ones too: their reads fail). */
  close(): void {
    this.closed = true;
    for (const conn of this.idle.splice(0)) conn.disconnect();
    for (const conn of this.busy) conn.disconnect();
    this.busy.clear();
  }
}
