/**
 * @module runtime/ort-profile
 * Reads the profiles onnxruntime writes for sessions opened with RuntimeOptions.profilePrefix: per
 * operator type and provider, the nodes executed, their summed time and share, beside the runs' own
 * wall time. Where the node times add up to about the runs' time, the host is the limit (on CUDA: one
 * kernel launch per node); where the runs take much longer, the device is.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { Csa2Error } from '../errors.js';

export interface OrtOpTime {
  /** Operator type, e.g. MatMul. */
  readonly op: string;
  /** The execution provider that ran it, e.g. CUDAExecutionProvider. */
  readonly provider: string;
  /** Node executions (a node run twice counts twice). */
  readonly executions: number;
  readonly ms: number;
  /** Bytes the executions read and wrote: their inputs (activations and initializers) and outputs, as onnxruntime reports them. */
  readonly bytes: number;
  /** Multiply-adds × 2 of the matrix products (MatMul, Gemm) from their shapes; 0 for other operators. */
  readonly flops: number;
}

/** One session's profile: its file and its runs. */
export interface OrtSessionTime {
  /** The file's name less the folder, the prefix's last part and onnxruntime's date suffix: the graph's name. */
  readonly name: string;
  readonly runs: number;
  readonly runMs: number;
  /** Node executions, and the bytes they read and wrote. */
  readonly executions: number;
  readonly bytes: number;
}

export interface OrtProfileSummary {
  readonly files: number;
  /** Per session (profile file), the longest first. */
  readonly sessions: readonly OrtSessionTime[];
  /** Session runs and their summed wall time. */
  readonly runs: number;
  readonly runMs: number;
  /** Every node execution's time, summed. */
  readonly nodeMs: number;
  /** Per operator type and provider, the longest first. */
  readonly ops: readonly OrtOpTime[];
}

type ShapeList = ReadonlyArray<Readonly<Record<string, readonly number[]>>>;

interface OrtEvent {
  readonly cat?: string;
  readonly name?: string;
  readonly dur?: number;
  readonly args?: {
    readonly op_name?: string;
    readonly provider?: string;
    readonly activation_size?: string;
    readonly parameter_size?: string;
    readonly output_size?: string;
    readonly input_type_shape?: ShapeList;
    readonly output_type_shape?: ShapeList;
  };
}

const shapeOf = (list: ShapeList | undefined, i: number): readonly number[] | null => {
  const entry = list?.[i];
  if (entry === undefined) return null;
  const dims = Object.values(entry)[0];
  return Array.isArray(dims) ? dims : null;
};
const product = (dims: readonly number[]): number => dims.reduce((a, b) => a * b, 1);

/** 2·M·K·N per output matrix of a MatMul or Gemm, from the input and output shapes (0 when they are not reported). */
export function matmulFlops(op: string, inputs: ShapeList | undefined, outputs: ShapeList | undefined): number {
  if (op !== 'MatMul' && op !== 'Gemm') return 0;
  const a = shapeOf(inputs, 0);
  const y = shapeOf(outputs, 0);
  if (a === null || y === null || a.length === 0) return 0;
  // MatMul: a [..., M, K]; Gemm: a [M, K] or its transpose, y [M, N]
  const k = op === 'MatMul' ? (a[a.length - 1] as number) : product(a) / (y[0] as number);
  return 2 * product(y) * k;
}

/** The profile files written under `prefix` (every file in its folder whose name starts with its last part and ends with .json). */
export function ortProfileFiles(prefix: string): string[] {
  const dir = dirname(prefix);
  const head = basename(prefix);
  return readdirSync(dir)
    .filter((f) => f.startsWith(head) && f.endsWith('.json'))
    .sort()
    .map((f) => join(dir, f));
}

/** Sums the node and run events of the profile files. */
export function summarizeOrtProfiles(files: readonly string[], prefix = ''): OrtProfileSummary {
  const head = basename(prefix);
  const sessions: OrtSessionTime[] = [];
  const ops = new Map<string, { op: string; provider: string; executions: number; us: number; bytes: number; flops: number }>();
  let runs = 0;
  let runUs = 0;
  let nodeUs = 0;
  for (const file of files) {
    let events: unknown;
    try {
      events = JSON.parse(readFileSync(file, 'utf8'));
    } catch (cause) {
      throw new Csa2Error('input-invalid', `onnxruntime profile ${file} is not JSON: ${String(cause)}`, { cause });
    }
    if (!Array.isArray(events)) throw new Csa2Error('input-invalid', `onnxruntime profile ${file} is not an array of events`);
    let name = basename(file, '.json');
    if (head !== '' && name.startsWith(head)) name = name.slice(head.length);
    const session = { name: name.replace(/_\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}(_\d+)?$/, ''), runs: 0, runMs: 0, executions: 0, bytes: 0 };
    sessions.push(session);
    for (const e of events as OrtEvent[]) {
      const dur = typeof e.dur === 'number' ? e.dur : 0;
      if (e.cat === 'Session' && e.name === 'model_run') {
        runs++;
        runUs += dur;
        session.runs++;
        session.runMs += dur / 1000;
      } else if (e.cat === 'Node' && typeof e.name === 'string' && e.name.endsWith('_kernel_time')) {
        const op = e.args?.op_name ?? '?';
        const provider = e.args?.provider ?? '?';
        const key = `${op}\u0000${provider}`;
        const o = ops.get(key) ?? { op, provider, executions: 0, us: 0, bytes: 0, flops: 0 };
        o.executions++;
        o.us += dur;
        const size = (v: string | undefined): number => (v === undefined || !Number.isFinite(Number(v)) ? 0 : Number(v));
        const bytes = size(e.args?.activation_size) + size(e.args?.parameter_size) + size(e.args?.output_size);
        o.bytes += bytes;
        session.executions++;
        session.bytes += bytes;
        o.flops += matmulFlops(op, e.args?.input_type_shape, e.args?.output_type_shape);
        ops.set(key, o);
        nodeUs += dur;
      }
    }
  }
  return {
    files: files.length,
    sessions: sessions.sort((a, b) => b.runMs - a.runMs),
    runs,
    runMs: runUs / 1000,
    nodeMs: nodeUs / 1000,
    ops: [...ops.values()]
      .sort((a, b) => b.us - a.us)
      .map((o) => ({ op: o.op, provider: o.provider, executions: o.executions, ms: o.us / 1000, bytes: o.bytes, flops: o.flops })),
  };
}
