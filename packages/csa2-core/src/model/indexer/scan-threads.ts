/**
 * @module model/indexer/scan-threads
 * Worker threads that take part of a long index scan (model/indexer/indexer-scan's scoreKeys): a Full layer's
 * decode row over a million keys, a replay's rows, a prefill's row blocks. The keys stay where they
 * are — sequences keep their index keys in SharedArrayBuffers (PackedRowStore `shareable`), so a task
 * carries views, not copies — and a thread scores with the fused kernel (model/indexer/indexer-fused, the same
 * per-key scores as the main thread's, bit for bit) into bounded heaps of its own, which the main
 * thread merges into the rows' heaps: the heaps rank by (score, position), a total order, so the best
 * k of the parts' best k are the best k of all, whatever the cut.
 *
 * How the work is shared: the scan is cut on block boundaries into slices of about equal work (rows ×
 * visible keys), and the main thread and every thread take the next slice from one shared counter
 * (Atomics) until none is left. Whoever is faster takes more: the main thread (slower per score here:
 * it also runs the event loop), a thread that starts late or is starved by other processes on a busy
 * machine. A thread that declines (queries that are not MXFP4 values) takes no slice; the slices a
 * thread took and could not report (it failed) are scored by the main thread afterwards.
 *
 * Threads start on first use (or warmUp) and do not keep the process alive while idle. A thread that
 * fails (an exception, an exit) retires them all: later scans run on the main thread alone, and
 * `failed` says why. Each thread holds ~12 MB of resident memory (V8 heap and the kernel's
 * WebAssembly memory), measured on this machine.
 */
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { Csa2Error } from '../../errors.js';

/** Below this many scores (rows × visible keys) a scan stays on the main thread: a task's round trip costs ~0.1–0.3 ms. */
export const THREAD_MIN_SCORES = 1 << 18;

/** A shared scan is cut into about this many slices per taker (the main thread and each thread)… */
export const SLICES_PER_TAKER = 4;
/** …of at least this many scores each (a slice's cost: one counter step and, per row, a few kernel runs). */
export const SLICE_MIN_SCORES = 1 << 16;

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

/** The views of keys [a, b) of the pieces (sorted, disjoint), each with its first position. */
export function keysIn(pieces: readonly ScanPiece[], rowBytes: number, a: number, b: number): ScanPiece[] {
  const out: ScanPiece[] = [];
  for (const p of pieces) {
    const end = p.k0 + p.keys.length / rowBytes;
    const p0 = Math.max(a, p.k0);
    const p1 = Math.min(b, end);
    if (p1 > p0) out.push({ k0: p0, keys: p.keys.subarray((p0 - p.k0) * rowBytes, (p1 - p.k0) * rowBytes) });
  }
  return out;
}

/** A scan shared with a thread: the rows' queries, their causal lengths, the keys and the slices to take from the counter. */
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
  /** Slice s is keys [slices[s], slices[s + 1]) (block-aligned, within the pieces). */
  readonly slices: Int32Array;
  /** counter[0]: the next slice to take (Atomics.add; shared by every taker of the scan). */
  readonly counter: Int32Array;
  /** Heap sizes: at least each row's top-k and (at the candidate source; else 0) its candidate blocks. */
  readonly topkCap: number;
  readonly blocksCap: number;
}

/** Bounded heaps as a thread returns them (model/indexer/indexer-ranking BoundedHeaps' arrays). */
export interface ScanHeaps {
  readonly capacity: number;
  readonly values: Float32Array;
  readonly ids: Int32Array;
  readonly size: Int32Array;
}

export type ScanReply =
  /** The slices this thread scored, into these heaps. */
  | { readonly kind: 'done'; readonly topk: ScanHeaps; readonly blocks: ScanHeaps | null; readonly slices: readonly number[] }
  /** The queries are not MXFP4 values (the fused kernel refuses them): no slice was taken. */
  | { readonly kind: 'declined' };

/** Messages between the main thread and a scan thread. */
export type ToThread = { readonly id: number; readonly task: ScanTask };
export type FromThread = { readonly id: number; readonly reply: ScanReply } | { readonly id: number; readonly error: string } | { readonly ready: true };

/** The fused kernel a thread compiles as it starts (workerData), so that its first scan does not pay for it. */
export interface ScanKernel {
  readonly heads: number;
  readonly dim: number;
  readonly round: boolean;
}

export interface ScanThreadsOptions {
  /** The thread script (tests). @defaultValue model/indexer/scan-worker */
  readonly script?: URL;
  readonly kernel?: ScanKernel;
}

interface Pending {
  readonly resolve: (r: ScanReply) => void;
  readonly reject: (e: Error) => void;
}

interface Thread {
  readonly worker: Worker;
  readonly pending: Map<number, Pending>;
  /** Resolves when the thread is ready (its script loaded, its kernel compiled), or when it failed first. */
  readonly online: Promise<void>;
}

const DEFAULT_SCRIPT = new URL('./scan-worker.js', import.meta.url);

export class ScanThreads {
  private threads: Thread[] | null = null;
  private failure: Error | null = null;
  private nextId = 0;
  /** Tasks run by the threads, declined by them (scored on the main thread) and lost to a failure. */
  readonly stats = { tasks: 0, declined: 0, failed: 0 };

  private readonly script: URL;
  private readonly kernel: ScanKernel | null;

  constructor(
    readonly count: number,
    options: ScanThreadsOptions = {},
  ) {
    this.script = options.script ?? DEFAULT_SCRIPT;
    this.kernel = options.kernel ?? null;
    if (!(Number.isInteger(count) && count >= 0 && count <= MAX_SCAN_THREADS))
      throw new Csa2Error('config-invalid', `ScanThreads: ${count} threads (0 to ${MAX_SCAN_THREADS})`);
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
      const worker = new Worker(this.script, { workerData: { kernel: this.kernel } });
      let ready: () => void = () => undefined;
      const online = new Promise<void>((resolve) => {
        ready = resolve;
        worker.once('error', () => resolve());
        worker.once('exit', () => resolve());
      });
      const t: Thread = { worker, pending: new Map(), online };
      worker.unref();
      worker.on('message', (m: FromThread) => {
        if ('ready' in m) {
          ready();
          return;
        }
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

  /** Starts the threads and waits until each is ready, its kernel compiled (a serving process's warm-up: the start is paid there, not by a scan). */
  async ready(): Promise<void> {
    this.start();
    await Promise.all((this.threads ?? []).map((t) => t.online));
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
