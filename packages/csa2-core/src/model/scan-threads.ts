/**
 * @module model/scan-threads
 * Worker threads that take part of a long index scan (model/indexer-scan's scoreKeys): a Full layer's
 * decode row over a million keys, a replay's rows, a prefill's row blocks. The keys stay where they
 * are — sequences keep their index keys in SharedArrayBuffers (PackedRowStore `shareable`), so a task
 * carries views, not copies — and a thread scores its part with the fused kernel (model/indexer-fused,
 * the same per-key scores as the main thread's, bit for bit) into bounded heaps of its own, which the
 * main thread merges into the rows' heaps: the heaps rank by (score, position), a total order, so the
 * best k of the parts' best k are the best k of all, whatever the cut.
 *
 * Threads start on first use (or warmUp) and do not keep the process alive while idle. A thread that
 * fails (an exception, an exit) retires them all: the scan scores the part itself, the scans after it
 * run on the main thread alone, and `failed` says why. Each thread holds ~12 MB of resident memory
 * (V8 heap and the kernel's WebAssembly memory), measured on this machine.
 *
 * How the work is cut: the main thread's own part first, then one part per thread, by a share of
 * the work (rows × visible keys). The main thread is slower per score than a thread (it also runs
 * the event loop, and its kernel's memory is colder: measured 1.2–1.4× on this machine), so its share
 * follows the measured speeds (a moving average of the ratio, between 1/4 and 4).
 */
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { Csa2Error } from '../errors.js';

/** Below this many scores (rows × visible keys) a scan stays on the main thread: a task's round trip costs ~0.1–0.3 ms. */
export const THREAD_MIN_SCORES = 1 << 18;

/** 'auto' takes min(this, cores − 1) threads: the scans' speed-up flattens with more (memory bandwidth), each costs ~12 MB. */
export const MAX_AUTO_SCAN_THREADS = 3;

/** The most scan threads a setting may ask for. */
export const MAX_SCAN_THREADS = 64;

/** How many scan threads a setting means: a count (0 = none), or 'auto' = min(MAX_AUTO_SCAN_THREADS, cores − 1). */
export function resolveScanThreads(setting: number | 'auto', cores = availableParallelism()): number {
  if (setting === 'auto') return Math.max(0, Math.min(MAX_AUTO_SCAN_THREADS, cores - 1));
  if (!(Number.isInteger(setting) && setting >= 0 && setting <= MAX_SCAN_THREADS)) {
    throw new Csa2Error('config-invalid', `scan threads must be 'auto' or an integer from 0 to ${MAX_SCAN_THREADS}, got ${String(setting)}`);
  }
  return setting;
}

/** A contiguous run of packed index keys: positions [k0, k0 + rows of keys). */
export interface ScanPiece {
  readonly k0: number;
  readonly keys: Uint8Array;
}

/** One thread's part of a scan: the rows' queries, their causal lengths and the keys to score. */
export interface ScanTask {
  readonly heads: number;
  readonly dim: number;
  /** bf16 numerics (the kernel rounds as onnxruntime's casts do). */
  readonly round: boolean;
  readonly rowBytes: number;
  readonly blockSize: number;
  readonly budgetValues: number;
  /** [rows, heads, dim] index queries and [rows, heads] head weights. */
  readonly iq: Float32Array;
  readonly iw: Float32Array;
  readonly rows: number;
  /** Each row's causal length (it sees keys below it). */
  readonly clen: Int32Array;
  readonly pieces: readonly ScanPiece[];
  /** Heap sizes: at least each row's top-k and (at the candidate source; else 0) its candidate blocks. */
  readonly topkCap: number;
  readonly blocksCap: number;
}

/** Bounded heaps as a thread returns them (model/indexer-ranking BoundedHeaps' arrays). */
export interface ScanHeaps {
  readonly capacity: number;
  readonly values: Float32Array;
  readonly ids: Int32Array;
  readonly size: Int32Array;
}

export type ScanReply =
  | { readonly kind: 'done'; readonly topk: ScanHeaps; readonly blocks: ScanHeaps | null; readonly ms: number }
  /** The queries are not MXFP4 values (the fused kernel refuses them): the caller scores the part. */
  | { readonly kind: 'declined' };

/** Messages between the main thread and a scan thread. */
export type ToThread = { readonly id: number; readonly task: ScanTask };
export type FromThread = { readonly id: number; readonly reply: ScanReply } | { readonly id: number; readonly error: string };

interface Pending {
  readonly resolve: (r: ScanReply) => void;
  readonly reject: (e: Error) => void;
}

interface Thread {
  readonly worker: Worker;
  readonly pending: Map<number, Pending>;
}

const DEFAULT_SCRIPT = new URL('./scan-worker.js', import.meta.url);

/** Bounds of the main thread's share (a thread's is 1). */
const SHARE_MIN = 0.25;
const SHARE_MAX = 4;

export class ScanThreads {
  private threads: Thread[] | null = null;
  private failure: Error | null = null;
  private nextId = 0;
  /** The main thread's share of a scan's work against a thread's 1, from the measured speeds. */
  ownShare = 1;
  /** Tasks run by the threads, declined by them (scored on the main thread) and lost to a failure. */
  readonly stats = { tasks: 0, declined: 0, failed: 0 };

  constructor(
    readonly count: number,
    private readonly script: URL = DEFAULT_SCRIPT,
  ) {
    if (!(Number.isInteger(count) && count >= 0 && count <= MAX_SCAN_THREADS)) throw new Csa2Error('config-invalid', `ScanThreads: ${count} threads (0 to ${MAX_SCAN_THREADS})`);
  }

  /** Whether scans may use the threads: there are some and none has failed. */
  get usable(): boolean {
    return this.count > 0 && this.failure === null;
  }

  /** Why the threads were retired, or null. */
  get failed(): Error | null {
    return this.failure;
  }

  /** Starts the threads (scans start them when first needed). */
  start(): void {
    if (this.threads !== null || !this.usable) return;
    this.threads = Array.from({ length: this.count }, () => {
      const worker = new Worker(this.script);
      const t: Thread = { worker, pending: new Map() };
      worker.unref();
      worker.on('message', (m: FromThread) => {
        const p = t.pending.get(m.id);
        if (p === undefined) return;
        t.pending.delete(m.id);
        if (t.pending.size === 0) worker.unref();
        if ('error' in m) {
          const err = new Csa2Error('runtime', `scan thread: ${m.error}`);
          p.reject(err);
          this.retire(err);
        } else p.resolve(m.reply);
      });
      worker.on('error', (e) => this.retire(new Csa2Error('runtime', `scan thread failed: ${e.message}`, { cause: e })));
      worker.on('exit', (code) => this.retire(new Csa2Error('runtime', `scan thread exited (code ${code})`)));
      return t;
    });
  }

  /** Runs a task on thread i (0 ≤ i < count); rejects when the threads are (or get) retired before it is done. */
  run(i: number, task: ScanTask): Promise<ScanReply> {
    if (this.failure !== null) return Promise.reject(this.failure);
    this.start();
    const t = (this.threads as Thread[])[i];
    if (t === undefined) return Promise.reject(new Csa2Error('runtime', `ScanThreads.run: thread ${i} of ${this.count}`));
    const id = this.nextId++;
    return new Promise<ScanReply>((resolve, reject) => {
      if (t.pending.size === 0) t.worker.ref();
      t.pending.set(id, {
        resolve: (r) => {
          if (r.kind === 'declined') this.stats.declined++;
          else this.stats.tasks++;
          resolve(r);
        },
        reject: (e) => {
          this.stats.failed++;
          reject(e);
        },
      });
      t.worker.postMessage({ id, task } satisfies ToThread);
    });
  }

  /** Takes a scan's measured speeds (scores per ms) of the main thread and of the threads into ownShare. */
  noteSpeeds(ownPerMs: number, threadPerMs: number): void {
    if (!(ownPerMs > 0 && threadPerMs > 0 && Number.isFinite(ownPerMs) && Number.isFinite(threadPerMs))) return;
    const target = Math.min(SHARE_MAX, Math.max(SHARE_MIN, ownPerMs / threadPerMs));
    this.ownShare = Math.min(SHARE_MAX, Math.max(SHARE_MIN, 0.7 * this.ownShare + 0.3 * target));
  }

  /** Stops the threads; scans after it run on the main thread. */
  async terminate(): Promise<void> {
    const threads = this.threads;
    this.retire(new Csa2Error('runtime', 'scan threads terminated'));
    if (threads !== null) await Promise.all(threads.map((t) => t.worker.terminate()));
  }

  private retire(err: Error): void {
    if (this.failure === null) this.failure = err;
    const threads = this.threads;
    this.threads = null;
    if (threads === null) return;
    for (const t of threads) {
      for (const p of t.pending.values()) p.reject(err);
      t.pending.clear();
      t.worker.removeAllListeners('exit');
      t.worker.on('error', () => undefined);
      void t.worker.terminate();
    }
  }
}
