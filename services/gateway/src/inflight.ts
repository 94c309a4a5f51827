/**
 * @module inflight
 * The completions in flight, so a shutdown can let them finish (up to a grace period) and then
 * cancel the rest: their AbortControllers are aborted with reason 'shutdown', which ends their
 * relays, sets their cancel keys and answers 503 (or an SSE error event).
 */

export type AbortReason = 'client' | 'shutdown';

export class Inflight {
  private readonly controllers = new Set<AbortController>();
  private readonly idleWaiters: (() => void)[] = [];
  private accepting = true;

  get size(): number {
    return this.controllers.size;
  }

  /** False once a shutdown began: new completions are refused with 503. */
  get isAccepting(): boolean {
    return this.accepting;
  }

  /** Registers a request; call the returned function when it ends. */
  track(controller: AbortController): () => void {
    this.controllers.add(controller);
    return () => {
      this.controllers.delete(controller);
      if (this.controllers.size === 0) for (const w of this.idleWaiters.splice(0)) w();
    };
  }

  private idle(timeoutMs: number): Promise<void> {
    if (this.controllers.size === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, timeoutMs);
      this.idleWaiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  /**
   * Stops accepting, waits up to `graceMs` for the requests in flight, aborts the rest with
   * 'shutdown' and waits (up to `abortWaitMs`) for them to wind down.
   */
  async drain(graceMs: number, abortWaitMs = 3000): Promise<void> {
    this.accepting = false;
    await this.idle(graceMs);
    for (const c of this.controllers) c.abort('shutdown' satisfies AbortReason);
    await this.idle(abortWaitMs);
  }
}
