/**
 * @module restartable
 * Keeps one instance of a resource that can die (an engine thread) and restarts it on demand.
 *
 * `get()` returns the current instance while it is alive; once `alive` turns false (the thread
 * crashed or exited) the next `get()` starts a new one. Concurrent callers share one start. A start
 * that fails rejects those callers; the next `get()` tries again. The job that saw the instance die
 * fails with a transient error and BullMQ retries it; its retry gets the fresh instance.
 *
 * A failed start rejects with StartFailedError (code 'start-failed', the original error as `cause`):
 * whatever the cause says — even a deterministic code such as 'checkpoint-invalid' — it is this
 * worker that cannot serve, not the job that is wrong, so the job must stay retryable.
 */

export class StartFailedError extends Error {
  readonly code = 'start-failed';
  constructor(cause: unknown) {
    super(`could not start: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'StartFailedError';
  }
}
export interface Closable {
  readonly alive: boolean;
  close(): Promise<void>;
}

export class Restartable<T extends Closable> {
  private current: T | null = null;
  private starting: Promise<T> | null = null;
  private closed = false;
  /** How many times an instance was started (1 after the first start). */
  starts = 0;

  constructor(
    private readonly start: () => Promise<T>,
    private readonly onRestart: (startNumber: number) => void = () => undefined,
  ) {}

  /** The instance when one is up and alive, else null (starting, restarting, dead or closed); starts nothing. */
  get live(): T | null {
    return this.current?.alive ? this.current : null;
  }

  /** The live instance, starting one when there is none (or the last one died). */
  get(): Promise<T> {
    if (this.closed) return Promise.reject(new Error('closed'));
    if (this.current?.alive) return Promise.resolve(this.current);
    if (this.starting !== null) return this.starting;
    const died = this.current !== null;
    this.current = null;
    this.starting = (async () => {
      try {
        let instance: T;
        try {
          instance = await this.start();
        } catch (err) {
          throw new StartFailedError(err);
        }
        this.starts++;
        if (died) this.onRestart(this.starts);
        if (this.closed) {
          await instance.close();
          throw new Error('closed');
        }
        this.current = instance;
        return instance;
      } finally {
        this.starting = null;
      }
    })();
    return this.starting;
  }

  /** Closes the instance (waiting for a start in progress); later `get()` calls reject. */
  async close(): Promise<void> {
    this.closed = true;
    const pending = this.starting;
    if (pending !== null) await pending.catch(() => undefined);
    const c = this.current;
    this.current = null;
    if (c !== null) await c.close();
  }
}
