/**
 * @module flow-control
 * Backpressure for one generation: its consumer pauses it while it cannot take more tokens (a stream
 * whose writes to Redis stall) and resumes it when it caught up. A paused generation keeps its
 * admission and its sequence but gets no decode rows, so tokens nobody can deliver are not computed,
 * and a cancel that arrives meanwhile stops it with little work wasted. Works in-thread (Engine) and
 * across the thread boundary (EngineHost forwards the changes).
 */
export class FlowControl {
  private state = false;
  private readonly listeners = new Set<(paused: boolean) => void>();

  get paused(): boolean {
    return this.state;
  }

  pause(): void {
    this.set(true);
  }

  resume(): void {
    this.set(false);
  }

  /** Calls `fn` on every change; returns the unsubscribe. */
  onChange(fn: (paused: boolean) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  private set(paused: boolean): void {
    if (this.state === paused) return;
    this.state = paused;
    for (const fn of [...this.listeners]) fn(paused);
  }
}
