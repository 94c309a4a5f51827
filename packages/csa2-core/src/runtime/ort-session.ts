/**
 * @module runtime/ort-session
 * The one file that imports onnxruntime-node. Everything else sees `GraphSession` and `HostTensor`.
 *
 * `session.run` executes synchronously on the calling thread inside onnxruntime-node, so callers that
 * serve requests run models inside a worker thread (@csa2/engine's EngineHost does).
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { dirname, join } from 'node:path';
import { isMainThread } from 'node:worker_threads';
import * as ort from 'onnxruntime-node';
import { Csa2Error } from '../errors.js';

export type ExecutionProvider = 'cpu' | 'cuda';

export interface RuntimeOptions {
  /** Where the graphs run. `cuda` needs an onnxruntime-node build with the CUDA provider. @defaultValue 'cpu' */
  readonly executionProvider: ExecutionProvider;
  /** The CUDA device the sessions run on (`cuda` only). @defaultValue 0 */
  readonly deviceId: number;
  /**
   * Let cuBLAS and cuDNN compute fp32 products in TF32 (10-bit mantissas), as onnxruntime's CUDA
   * provider does by default. Off, fp32 MatMuls keep fp32 inputs (the CPU provider's results to the
   * last bits' rounding); the bf16 GEMMs are unaffected. onnxruntime-node passes no such provider
   * option, so it is applied through NVIDIA_TF32_OVERRIDE (see applyCudaEnvironment). @defaultValue false
   */
  readonly tf32: boolean;
  /**
   * A `cuda` session whose graph has nodes the CUDA provider cannot run (onnxruntime places them on
   * the CPU: a device↔host copy around each, every run) is refused ('refuse'), or opened and reported
   * by name in `cudaCpuFallbackGraphs()` ('allow'). @defaultValue 'refuse'
   */
  readonly cudaCpuFallback: 'refuse' | 'allow';
  /**
   * Threads for one operator. 'auto': 1 for small models (see `resolveIntraOpThreads`), otherwise the
   * machine's available parallelism. @defaultValue 'auto'
   */
  readonly intraOpThreads: number | 'auto';
  /**
   * Let idle intra-op threads spin between operators. Off by default: a model is ~5 sessions per layer,
   * each with its own thread pool, and threads spinning after one session's run compete with the next
   * session on the same cores. Measured on the dim-1024 bench model (40 layers, 2 threads, 2 cores):
   * decode 2.1 s/token spinning vs 188 ms not; prefill unchanged. Turn it on only for a single
   * latency-critical session on an otherwise idle machine. @defaultValue false
   */
  readonly allowSpinning: boolean;
  /**
   * ORT graph optimization level. 'basic' keeps every floating-point operation as written (higher levels
   * may fuse and reorder arithmetic), which is what bit-faithful numerics need. @defaultValue 'basic'
   */
  readonly graphOptimization: 'disabled' | 'basic' | 'extended' | 'all';
  /**
   * onnxruntime's CPU memory arena. It keeps every session's peak allocation for good, and a model is
   * ~5 sessions a layer: at long contexts the peaks of the scans and attention tables added up, never
   * returned. Measured on the 40-layer tiny-width model decoding a 256K-token context: peak RSS 1.02
   * GB with the arena, 0.47 GB without, at the same CPU time per step (tiny decode at batch 1 and 16:
   * 5.4 / 18-21 ms CPU a step either way). @defaultValue false
   */
  readonly memoryArena: boolean;
  /**
   * onnxruntime's CPU memory arena for the two attention sessions only (window-only and compressed),
   * which every layer of their kind shares, so each holds one arena: its graph's intermediates (a
   * gathered [rows, 64, D] key block per 64 columns, the scores, the accumulators) come from memory
   * it keeps instead of a fresh allocation per run. Without it each of those is malloc'd and freed per
   * run; above glibc's mmap threshold (128 KiB under MALLOC_MMAP_THRESHOLD_=131072, as the worker
   * images run) that is a new mapping whose every page faults on first touch — 4 MiB per block at the
   * served model's 256-row prefill chunks and at a dim-1024 decode batch of 32. Measured here (2-core
   * VM, where a page fault costs ~10 µs): ingest of a 1K-token text on the served model 29.2 s → 13.1 s,
   * peak RSS +19 MB (bench/README.md, "Allocation"). `memoryArena` turns it on for every session.
   * @defaultValue true
   */
  readonly attentionArena: boolean;
  /**
   * With `attentionArena`, attention runs of more query rows than this use a second session of the
   * same graph without an arena (the same results bit for bit). The arena keeps the largest run's
   * intermediates for good (in regions that grow by doubling), so a process whose big runs are rare —
   * a decoder worker: a document question's replay of R + question rows, then decode steps of one row
   * a sequence — keeps a replay's peak on top of the document it loaded (measured: a 1M-token question
   * on the 40-layer tiny-width model, decoder peak − warm 0.88–0.93 × the artifact without the arena,
   * 1.23–1.31 × with it). The decoder worker sets DECODE_ATTENTION_ARENA_ROWS; the encoder, whose
   * prefill chunks are the runs that gain, keeps every run in the arena. @defaultValue Infinity
   */
  readonly attentionArenaMaxRows: number;
  /**
   * Diagnostics: every session opened writes onnxruntime's profile (a JSON array of events: each
   * node's execution with its operator type and provider, each run) to a file whose path starts with
   * this prefix and the graph's name, when the session is disposed (`summarizeOrtProfiles` reads them).
   * Under CUDA a node's time is its host side: the kernel's launch, or the wait where it synchronizes.
   * @defaultValue null (no profile)
   */
  readonly profilePrefix: string | null;
}

/**
 * The decoder worker's attentionArenaMaxRows: decode steps (one row a sequence, a batch of up to 64)
 * keep the attention arena; a document question's replay (R = 128 rows and the question) runs without.
 */
export const DECODE_ATTENTION_ARENA_ROWS = 64;

export const DEFAULT_RUNTIME_OPTIONS: RuntimeOptions = {
  executionProvider: 'cpu',
  deviceId: 0,
  tf32: false,
  cudaCpuFallback: 'refuse',
  intraOpThreads: 'auto',
  allowSpinning: false,
  graphOptimization: 'basic',
  memoryArena: false,
  attentionArena: true,
  attentionArenaMaxRows: Infinity,
  profilePrefix: null,
};

/**
 * Models narrower than this run single-threaded under intraOpThreads 'auto': their operators are so
 * small that waking a second thread costs more than it saves. Measured on tiny-a (dim 64) decode,
 * 2 cores: 7.4 ms/step on 1 thread, 31–68 ms/step on 2 spinning threads.
 */
export const SINGLE_THREAD_BELOW_DIM = 512;

/** The intra-op thread count for a model of width `dim`. */
export function resolveIntraOpThreads(options: RuntimeOptions, dim: number): number {
  if (options.intraOpThreads !== 'auto') {
    if (!Number.isInteger(options.intraOpThreads) || options.intraOpThreads < 1) {
      throw new Csa2Error('config-invalid', `runtime: intraOpThreads must be a positive integer or 'auto', got ${String(options.intraOpThreads)}`);
    }
    return options.intraOpThreads;
  }
  return dim < SINGLE_THREAD_BELOW_DIM ? 1 : availableParallelism();
}

/** The element types that cross the session boundary, and their typed arrays. */
export interface TensorData {
  readonly float32: Float32Array;
  readonly int32: Int32Array;
  readonly int64: BigInt64Array;
  /** bool tensors travel as one byte per element (0 / 1) */
  readonly bool: Uint8Array;
  readonly uint8: Uint8Array;
}
export type TensorType = keyof TensorData;

/** A host-side tensor of element type T with its dims. */
export interface TensorOf<T extends TensorType> {
  readonly type: T;
  readonly data: TensorData[T];
  readonly dims: readonly number[];
}

/** A host-side tensor of any of the session types. */
export type HostTensor = { [T in TensorType]: TensorOf<T> }[TensorType];

export const f32 = (data: Float32Array, dims: readonly number[]): TensorOf<'float32'> => ({ type: 'float32', data, dims });
export const i32 = (data: Int32Array, dims: readonly number[]): TensorOf<'int32'> => ({ type: 'int32', data, dims });
export const i64 = (data: BigInt64Array, dims: readonly number[]): TensorOf<'int64'> => ({ type: 'int64', data, dims });
export const bool = (data: Uint8Array, dims: readonly number[]): TensorOf<'bool'> => ({ type: 'bool', data, dims });
export const u8 = (data: Uint8Array, dims: readonly number[]): TensorOf<'uint8'> => ({ type: 'uint8', data, dims });

export interface GraphSession {
  readonly name: string;
  readonly inputNames: readonly string[];
  readonly outputNames: readonly string[];
  run(feeds: Readonly<Record<string, HostTensor>>): Promise<Record<string, HostTensor>>;
  dispose(): Promise<void>;
}

function toOrt(t: HostTensor): ort.Tensor {
  switch (t.type) {
    case 'float32':
      return new ort.Tensor('float32', t.data, t.dims);
    case 'int32':
      return new ort.Tensor('int32', t.data, t.dims);
    case 'int64':
      return new ort.Tensor('int64', t.data, t.dims);
    case 'bool':
      return new ort.Tensor('bool', t.data, t.dims);
    case 'uint8':
      // onnxruntime refuses views of a SharedArrayBuffer (sequences' index keys live in one): a copy
      return new ort.Tensor('uint8', t.data.buffer instanceof SharedArrayBuffer ? t.data.slice() : t.data, t.dims);
  }
}

function fromOrt(name: string, t: ort.Tensor): HostTensor {
  const dims = t.dims.map(Number);
  switch (t.type) {
    case 'float32':
      return { type: 'float32', data: t.data as Float32Array, dims };
    case 'int32':
      return { type: 'int32', data: t.data as Int32Array, dims };
    case 'int64':
      return { type: 'int64', data: t.data as BigInt64Array, dims };
    case 'bool':
      return { type: 'bool', data: t.data as Uint8Array, dims };
    case 'uint8':
      return { type: 'uint8', data: t.data as Uint8Array, dims };
    default:
      throw new Csa2Error('runtime', `graph output ${name} has unsupported type ${t.type}`);
  }
}

function describeFeeds(feeds: Readonly<Record<string, HostTensor>>): string {
  return Object.entries(feeds)
    .map(([k, v]) => `${k}: ${v.type}[${v.dims.join(', ')}]`)
    .join('; ');
}

/** The folder of onnxruntime-node's native binding, where its execution provider libraries lie. */
export function ortBindingDir(): string {
  const require = createRequire(import.meta.url);
  const pkg = dirname(require.resolve('onnxruntime-node/package.json'));
  return join(pkg, 'bin', `napi-v${ORT_NAPI_VERSION}`, process.platform, process.arch);
}
const ORT_NAPI_VERSION = 6;

/** The libraries the CUDA provider needs beside onnxruntime-node's binding. */
export const CUDA_PROVIDER_LIBRARIES = ['libonnxruntime_providers_shared.so', 'libonnxruntime_providers_cuda.so'] as const;

export const CUDA_INSTALL_HINT =
  'install onnxruntime-node with its CUDA provider (`ONNXRUNTIME_NODE_INSTALL=cuda12 npm ci`, which downloads it; ' +
  'the encoder-worker-gpu target of infra/docker/Dockerfile does this) on a machine with an NVIDIA driver and the CUDA 12/13 ' +
  'runtime, cuBLAS and cuDNN 9 libraries on LD_LIBRARY_PATH (infra/README.md, "GPU encoder workers")';

/**
 * Checks that the CUDA provider can be loaded at all; throws a Csa2Error ('config-invalid') naming
 * what is missing and how to install it. `bindingDir` is for tests.
 */
export function checkCudaProviderInstalled(bindingDir: string = ortBindingDir()): void {
  const missing = CUDA_PROVIDER_LIBRARIES.filter((f) => !existsSync(join(bindingDir, f)));
  if (missing.length > 0) {
    throw new Csa2Error(
      'config-invalid',
      `the CUDA execution provider is not installed: ${missing.join(' and ')} ${missing.length > 1 ? 'are' : 'is'} missing from ${bindingDir}; ${CUDA_INSTALL_HINT}`,
    );
  }
}

/**
 * Sets what the CUDA libraries read from the environment before a CUDA session is created:
 * NVIDIA_TF32_OVERRIDE=0 unless `tf32` (cuBLAS and cuDNN then never use TF32). It must run on the main
 * thread (a worker thread's process.env is its own copy, which native code does not see) before the
 * first CUDA session of the process; EngineHost does it before it starts its thread. An explicit
 * NVIDIA_TF32_OVERRIDE in the environment wins. Returns whether TF32 is off.
 */
export function applyCudaEnvironment(options: Pick<RuntimeOptions, 'executionProvider' | 'tf32'>): boolean {
  if (options.executionProvider !== 'cuda') return true;
  if (isMainThread && process.env['NVIDIA_TF32_OVERRIDE'] === undefined && !options.tf32) process.env['NVIDIA_TF32_OVERRIDE'] = '0';
  return process.env['NVIDIA_TF32_OVERRIDE'] === '0';
}

const fallbackGraphs = new Set<string>();

/** Bytes of the inputs and outputs of every graph run in this thread (host↔device traffic under CUDA). */
const ioBytes = { inputs: 0, outputs: 0, runs: 0 };

/**
 * The bytes that crossed the session boundary in this thread so far: under the CUDA provider every
 * input is copied to the device and every output back to the host, so this is the run's PCIe traffic.
 */
export function graphIoBytes(): { readonly inputs: number; readonly outputs: number; readonly runs: number } {
  return { ...ioBytes };
}

/** Graphs opened on `cuda` with nodes placed on the CPU (RuntimeOptions.cudaCpuFallback 'allow'), by name. */
export function cudaCpuFallbackGraphs(): readonly string[] {
  return [...fallbackGraphs].sort();
}

/** onnxruntime's refusal when session.disable_cpu_ep_fallback is set and a node has no CUDA kernel. */
const CPU_FALLBACK_REFUSED = /fallback to CPU EP has been explicitly disabled|assigned to the default CPU EP/i;

function sessionOptions(
  name: string,
  options: RuntimeOptions,
  intraOpThreads: number,
  memoryArena: boolean,
  strict: boolean,
): ort.InferenceSession.SessionOptions {
  const cuda = options.executionProvider === 'cuda';
  const profile = options.profilePrefix ?? null;
  return {
    ...(profile !== null ? { enableProfiling: true, profileFilePrefix: `${profile}${name.replace(/[^A-Za-z0-9_.-]/g, '_')}` } : {}),
    executionProviders: cuda ? [{ name: 'cuda', deviceId: options.deviceId }, 'cpu'] : ['cpu'],
    intraOpNumThreads: intraOpThreads,
    interOpNumThreads: 1,
    graphOptimizationLevel: options.graphOptimization,
    executionMode: 'sequential',
    enableMemPattern: false,
    enableCpuMemArena: memoryArena,
    extra: { session: { intra_op: { allow_spinning: options.allowSpinning ? '1' : '0' }, ...(cuda && strict ? { disable_cpu_ep_fallback: '1' } : {}) } },
  };
}

/** Opens a session over serialized ONNX bytes. */
export async function openGraphSession(
  name: string,
  model: Uint8Array,
  options: RuntimeOptions = DEFAULT_RUNTIME_OPTIONS,
  intraOpThreads: number = resolveIntraOpThreads(options, Number.POSITIVE_INFINITY),
  memoryArena: boolean = options.memoryArena,
): Promise<GraphSession> {
  const cuda = options.executionProvider === 'cuda';
  if (cuda) {
    if (!(Number.isInteger(options.deviceId) && options.deviceId >= 0))
      throw new Csa2Error('config-invalid', `runtime: deviceId must be a non-negative integer, got ${String(options.deviceId)}`);
    checkCudaProviderInstalled();
    applyCudaEnvironment(options);
  }
  let session: ort.InferenceSession;
  try {
    session = await ort.InferenceSession.create(model, sessionOptions(name, options, intraOpThreads, memoryArena, cuda));
  } catch (cause) {
    const text = String(cause);
    if (cuda && CPU_FALLBACK_REFUSED.test(text)) {
      if (options.cudaCpuFallback === 'refuse') {
        throw new Csa2Error(
          'config-invalid',
          `graph ${name} has nodes the CUDA provider cannot run (onnxruntime would run them on the CPU, a host round trip each); refused: set CSA2_CUDA_CPU_FALLBACK=allow (RuntimeOptions.cudaCpuFallback) to run it anyway`,
          { cause },
        );
      }
      fallbackGraphs.add(name);
      try {
        session = await ort.InferenceSession.create(model, sessionOptions(name, options, intraOpThreads, memoryArena, false));
      } catch (again) {
        throw new Csa2Error('runtime', `cannot create onnxruntime session for graph ${name}: ${String(again)}`, { cause: again });
      }
    } else if (cuda && /Failed to load (shared )?library|cannot open shared object|CUDA failure|cudaErrorNoDevice|no CUDA-capable device/i.test(text)) {
      throw new Csa2Error(
        'config-invalid',
        `the CUDA execution provider could not start for graph ${name} on device ${options.deviceId}: ${text.split('\n')[0]}; ${CUDA_INSTALL_HINT}`,
        { cause },
      );
    } else {
      throw new Csa2Error('runtime', `cannot create onnxruntime session for graph ${name}: ${text}`, { cause });
    }
  }
  const inputNames = [...session.inputNames];
  const outputNames = [...session.outputNames];
  return {
    name,
    inputNames,
    outputNames,
    async run(feeds) {
      const missing = inputNames.filter((n) => !(n in feeds));
      if (missing.length > 0) {
        throw new Csa2Error('runtime', `graph ${name}: missing inputs ${missing.join(', ')} (given: ${describeFeeds(feeds)})`);
      }
      const ortFeeds: Record<string, ort.Tensor> = {};
      for (const n of inputNames) {
        const t = feeds[n] as HostTensor;
        ioBytes.inputs += t.data.byteLength;
        ortFeeds[n] = toOrt(t);
      }
      ioBytes.runs++;
      let out: ort.InferenceSession.ReturnType;
      try {
        out = await session.run(ortFeeds);
      } catch (cause) {
        throw new Csa2Error('runtime', `graph ${name} failed with inputs ${describeFeeds(feeds)}: ${String(cause)}`, { cause });
      }
      const result: Record<string, HostTensor> = {};
      for (const n of outputNames) {
        result[n] = fromOrt(n, out[n] as ort.Tensor);
        ioBytes.outputs += (result[n] as HostTensor).data.byteLength;
      }
      return result;
    },
    async dispose() {
      if ((options.profilePrefix ?? null) !== null) session.endProfiling();
      await session.release();
    },
  };
}
