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
}

export interface OrtProfileSummary {
  readonly files: number;
  /** Session runs and their summed wall time. */
  readonly runs: number;
  readonly runMs: number;
  /** Every node execution's time, summed. */
  readonly nodeMs: number;
  /** Per operator type and provider, the longest first. */
  readonly ops: readonly OrtOpTime[];
}

interface OrtEvent {
  readonly cat?: string;
  readonly name?: string;
  readonly dur?: number;
  readonly args?: { readonly op_name?: string; readonly provider?: string };
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
export function summarizeOrtProfiles(files: readonly string[]): OrtProfileSummary {
  const ops = new Map<string, { op: string; provider: string; executions: number; us: number }>();
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
    for (const e of events as OrtEvent[]) {
      const dur = typeof e.dur === 'number' ? e.dur : 0;
      if (e.cat === 'Session' && e.name === 'model_run') {
        runs++;
        runUs += dur;
      } else if (e.cat === 'Node' && typeof e.name === 'string' && e.name.endsWith('_kernel_time')) {
        const op = e.args?.op_name ?? '?';
        const provider = e.args?.provider ?? '?';
        const key = `${op}\u0000${provider}`;
        const o = ops.get(key) ?? { op, provider, executions: 0, us: 0 };
        o.executions++;
        o.us += dur;
        ops.set(key, o);
        nodeUs += dur;
      }
    }
  }
  return {
    files: files.length,
    runs,
    runMs: runUs / 1000,
    nodeMs: nodeUs / 1000,
    ops: [...ops.values()].sort((a, b) => b.us - a.us).map((o) => ({ op: o.op, provider: o.provider, executions: o.executions, ms: o.us / 1000 })),
  };
}
