/**
 * @module host/engine-host
 * Runs an Engine in a worker thread so that onnxruntime's synchronous `session.run` never blocks the
 * caller's event loop (HTTP, BullMQ lock renewal, stream writes keep running during inference).
 *
 * @example
 *   const host = await EngineHost.start({ modelDir });
 *   const out = await host.generate({ promptIds, maxTokens: 16, sampling }, { onToken: (t) => write(t.text) });
 *   await host.close();
 *
 * Errors thrown inside the thread come back as `EngineError` (a Csa2Error) with the original `code`,
 * `name` and message, so callers keep deciding retry/status by code. If the thread dies, every pending
 * call rejects with an EngineError of code 'runtime' and `alive` turns false.
 */
import { Worker } from 'node:worker_threads';
import { Csa2Error, DEFAULT_RUNTIME_OPTIONS, applyCudaEnvironment, type Csa2ErrorCode } from '@csa2/core';
import type {
  EngineOptions,
  EngineStats,
  GenerateHooks,
  GenerateOutcome,
  GenerateRequest,
  IngestHooks,
  IngestOutcome,
  IngestRequest,
  ModelInfo,
  SerializedError,
  TokenEvent,
} from '../engine.js';
import type { FlowControl } from '../flow-control.js';
import type { EngineMethod, FromThread, ThreadData, ToThread } from './protocol.js';

/** An error raised inside the engine thread, re-created on the caller's side. */
export class EngineError extends Csa2Error {
  constructor(e: SerializedError) {
    super((e.code ?? 'runtime') as Csa2ErrorCode, e.message);
    this.name = e.name;
    if (e.stack !== undefined) this.stack = e.stack;
  }
}

interface Pending {
  resolve(value: unknown): void;
  reject(err: unknown): void;
  onEvent?: (event: unknown) => void;
  cleanup(): void;
}

/** Stack of the engine thread (MB). */
export const ENGINE_THREAD_STACK_MB = 64;

export class EngineHost {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private exited = false;
  /** close() was called: the host takes no new calls (and reads as not alive, so a restart starts a new one). */
  private closing = false;

  private constructor(
    private readonly worker: Worker,
    readonly info: ModelInfo,
  ) {
    worker.on('message', (msg: FromThread) => this.onMessage(msg));
    worker.on('error', (err) => this.failAll(`engine thread failed: ${err.message}`));
    worker.on('exit', (code) => {
      this.exited = true;
      this.failAll(`engine thread exited (code ${code})`);
    });
  }

  /** Starts the thread and waits until the model is loaded; load errors reject with their own code. */
  static async start(options: EngineOptions): Promise<EngineHost> {
    applyCudaEnvironment({ ...DEFAULT_RUNTIME_OPTIONS, ...options.runtime }); // native code reads the main thread's environment
    const data: ThreadData = { options };
    // a stack of its own size: onnxruntime's session creation recurses deeply (a 4 MB default stack
    // overflowed — a segfault — when the process had a long command line)
    const worker = new Worker(new URL('./engine-thread.js', import.meta.url), { workerData: data, resourceLimits: { stackSizeMb: ENGINE_THREAD_STACK_MB } });
    const info = await new Promise<ModelInfo>((resolve, reject) => {
      const onMessage = (msg: FromThread) => {
        if (msg.type === 'ready') resolve(msg.info);
        else if (msg.type === 'open-failed') reject(new EngineError(msg.error));
        else return;
        worker.off('message', onMessage);
        worker.off('exit', onExit);
      };
      const onExit = (code: number) => reject(new Csa2Error('runtime', `engine thread exited during start (code ${code})`));
      worker.on('message', onMessage);
      worker.once('exit', onExit);
    });
    return new EngineHost(worker, info);
  }

  /** False once the thread has exited (crashed or closed) or is closing. */
  get alive(): boolean {
    return !this.exited && !this.closing;
  }

  generate(req: GenerateRequest, hooks: GenerateHooks = {}): Promise<GenerateOutcome> {
    // the thread's generate events: token events, and the prompt logprobs once ({ promptLogprobs })
    const onEvent = (e: unknown) => {
      if (typeof e === 'object' && e !== null && 'promptLogprobs' in e)
        hooks.onPromptLogprobs?.((e as { promptLogprobs: Parameters<NonNullable<GenerateHooks['onPromptLogprobs']>>[0] }).promptLogprobs);
      else hooks.onToken?.(e as TokenEvent);
    };
    return this.call('generate', req, onEvent, hooks.signal, hooks.flow) as Promise<GenerateOutcome>;
  }

  /** Encodes a document into an artifact (see Engine.ingest); progress events stream back. */
  ingest(req: IngestRequest, hooks: IngestHooks = {}): Promise<IngestOutcome> {
    return this.call('ingest', req, hooks.onProgress as ((e: unknown) => void) | undefined, hooks.signal) as Promise<IngestOutcome>;
  }

  /** The engine scheduler's state and counters (running, waiting, KV bytes, step histograms). */
  stats(): Promise<EngineStats> {
    return this.call('stats', null) as Promise<EngineStats>;
  }

  tokenize(text: string): Promise<number[]> {
    return this.call('tokenize', text) as Promise<number[]>;
  }

  detokenize(ids: readonly number[]): Promise<string> {
    return this.call('detokenize', ids) as Promise<string>;
  }

  /** Sends a call to the thread; `signal` aborts it there (generation stops with 'cancelled'). */
  protected call(method: EngineMethod, args: unknown, onEvent?: (event: unknown) => void, signal?: AbortSignal, flow?: FlowControl): Promise<unknown> {
    if (this.exited || this.closing) return Promise.reject(new Csa2Error('runtime', 'the engine thread is not running'));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const onAbort = () => this.post({ type: 'abort', id });
      signal?.addEventListener('abort', onAbort, { once: true });
      const unfollowFlow = flow?.onChange((paused) => this.post({ type: 'flow', id, paused }));
      this.pending.set(id, {
        resolve,
        reject,
        ...(onEvent !== undefined ? { onEvent } : {}),
        cleanup: () => {
          signal?.removeEventListener('abort', onAbort);
          unfollowFlow?.();
        },
      });
      this.post({ type: 'call', id, method, args });
      if (flow?.paused === true) this.post({ type: 'flow', id, paused: true });
      if (signal?.aborted === true) onAbort();
    });
  }

  private post(msg: ToThread): void {
    if (!this.exited) this.worker.postMessage(msg);
  }

  private onMessage(msg: FromThread): void {
    if (msg.type !== 'event' && msg.type !== 'result' && msg.type !== 'error') return;
    const p = this.pending.get(msg.id);
    if (p === undefined) return;
    if (msg.type === 'event') {
      try {
        p.onEvent?.(msg.event);
      } catch (err) {
        // a throwing listener must not take the host down: abort the call and reject with the error
        this.post({ type: 'abort', id: msg.id });
        this.finish(msg.id);
        p.reject(err);
      }
      return;
    }
    this.finish(msg.id);
    if (msg.type === 'result') p.resolve(msg.value);
    else p.reject(new EngineError(msg.error));
  }

  private finish(id: number): void {
    const p = this.pending.get(id);
    if (p === undefined) return;
    this.pending.delete(id);
    p.cleanup();
  }

  private failAll(reason: string): void {
    for (const [id, p] of [...this.pending]) {
      this.finish(id);
      p.reject(new Csa2Error('runtime', reason));
    }
  }

  /** Stops the thread after releasing the model; pending calls are aborted. */
  async close(): Promise<void> {
    if (this.exited) return;
    this.closing = true;
    const exited = new Promise<void>((resolve) => this.worker.once('exit', () => resolve()));
    this.post({ type: 'close' });
    const timer = setTimeout(() => void this.worker.terminate(), 10_000);
    await exited;
    clearTimeout(timer);
  }
}
