/**
 * @module scheduler/engine-loop
 * The engine's step loop: while there is work, ask the scheduler for a step, run its spans in one
 * forward call, hand the outputs back, and yield to the event loop (so that new requests, aborts and
 * I/O completions are taken between steps). When nothing can run (every work is preparing or loading),
 * it sleeps until the scheduler wakes it.
 *
 * A forward call that throws fails the works of that step (their sequences are in an unknown state);
 * the loop and every other work go on.
 */
import type { Csa2Model } from '@csa2/core';
import type { Scheduler } from './scheduler.js';

export class EngineLoop {
  private running = false;
  private closed = false;
  private wakeUp: (() => void) | null = null;

  constructor(
    private readonly model: Csa2Model,
    private readonly scheduler: Scheduler,
  ) {}

  /** Starts the loop if it is not running; wakes it if it sleeps. */
  poke(): void {
    if (this.closed) return;
    const w = this.wakeUp;
    this.wakeUp = null;
    w?.();
    if (!this.running) {
      this.running = true;
      void this.run();
    }
  }

  /** Stops taking steps after the current one. */
  close(): void {
    this.closed = true;
    this.poke();
    this.wakeUp?.();
  }

  private async run(): Promise<void> {
    try {
      while (!this.closed && !this.scheduler.idle) {
        const plan = this.scheduler.plan();
        if (plan.spans.length === 0) {
          if (this.scheduler.idle) break;
          await new Promise<void>((resolve) => (this.wakeUp = resolve));
          continue;
        }
        const t0 = performance.now();
        try {
          const outs = await this.model.forward(plan.spans);
          this.scheduler.complete(plan, outs, performance.now() - t0);
        } catch (err) {
          this.scheduler.failStep(plan, err);
        }
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
    } finally {
      this.running = false;
    }
    // work may have arrived while the loop was ending
    if (!this.closed && !this.scheduler.idle) this.poke();
  }
}
