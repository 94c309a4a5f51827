/**
 * @module format/bounded-concurrency
 * A counting semaphore for the writer's puts and the reader's gets: at most `limit` operations in
 * flight, waiters served in arrival order.
 */

export class Semaphore {
  private active = 0;
  private readonly waiters: Array<() => void> = [];

  constructor(readonly limit: number) {
    if (!Number.isSafeInteger(limit) || limit < 1) throw new RangeError(`concurrency limit must be a positive integer, got ${limit}`);
  }

  /** Operations holding a slot now. */
  get inFlight(): number {
    return this.active;
  }

  /** Resolves once a slot is free; the caller must call `release()` exactly once afterwards. */
  async acquire(): Promise<void> {
    if (this.active < this.limit) {
      this.active++;
      return;
    }
    await new Promise<void>((resolve) => this.waiters.push(resolve));
  }

  release(): void {
    const next = this.waiters.shift();
    if (next !== undefined)
      next(); // the slot passes straight to the next waiter
    else this.active--;
  }

  /** Runs `task` in a slot. */
  async run<T>(task: () => Promise<T>): Promise<T> {
    await this.acquire();
    try {
      return await task();
    } finally {
      this.release();
    }
  }
}
