/**
 * @module observe-once
 * Runs a metric observation at most once per key across every gateway replica: the first caller
 * that sets the Redis flag `csa2:gateway:observed:<key>` (SET NX, kept a day) observes; a local
 * set of recent keys saves the round trip on repeated status reads. Used for document jobs, which
 * no single request follows to the end.
 */
import type { Redis } from '@csa2/jobs';

const FLAG_TTL_SECONDS = 24 * 3600;
const LOCAL_KEYS = 4096;

export class ObserveOnce {
  private readonly seen = new Set<string>();

  constructor(private readonly redis: Redis) {}

  /** Calls `observe` if no replica observed `key` yet; Redis errors skip the observation. */
  async run(key: string, observe: () => void | Promise<void>): Promise<void> {
    if (this.seen.has(key)) return;
    let first = false;
    try {
      first = (await this.redis.set(`csa2:gateway:observed:${key}`, '1', 'EX', FLAG_TTL_SECONDS, 'NX')) === 'OK';
    } catch {
      return;
    }
    this.seen.add(key);
    if (this.seen.size > LOCAL_KEYS) {
      const oldest = this.seen.values().next().value;
      if (oldest !== undefined) this.seen.delete(oldest);
    }
    if (first) await observe();
  }
}
