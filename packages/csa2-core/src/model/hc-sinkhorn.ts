/**
 * @module model/hc-sinkhorn
 * hc_split_sinkhorn (trunk §2.3) in TypeScript, with float32 arithmetic: every operation's result is
 * rounded to float32 (Math.fround) in the order the reference writes it, sums left to right.
 *
 * The mixes themselves ((fn · x)·r over the whole stream) are a matrix product and stay in the graphs
 * (GraphOps.hcMixLogits); this part works on (2 + n)·n numbers per token, and as ONNX nodes it was
 * ~240 of a layer's ~800 nodes (20 Sinkhorn iterations, twice per layer), i.e. per-node overhead on
 * every decode step for a few hundred flops.
 */
import { sigmoidF32 as sigmoid } from '../numerics/f32.js';

const f = Math.fround;

export interface HcSplit {
  /** [rows, n]: sigmoid(mix·scale[0] + base) + ε. */
  readonly pre: Float32Array;
  /** [rows, n]: 2·sigmoid(mix·scale[1] + base). */
  readonly post: Float32Array;
  /** [rows, n, n]: comb[j][k] from copy j into copy k, after the Sinkhorn normalization. */
  readonly comb: Float32Array;
}

export interface HcSplitParams {
  readonly n: number;
  readonly iters: number;
  readonly eps: number;
  /** [3] */
  readonly scale: Float32Array;
  /** [(2 + n)·n] */
  readonly base: Float32Array;
}


/** Splits mixes [rows, (2 + n)·n] into pre, post and the Sinkhorn-normalized comb. */
export function hcSplitSinkhorn(mixes: Float32Array, p: HcSplitParams): HcSplit {
  const { n, iters } = p;
  const M = (2 + n) * n;
  if (mixes.length % M !== 0) throw new Error(`hcSplitSinkhorn: ${mixes.length} mixes is not a multiple of (2 + n)·n = ${M}`);
  if (p.base.length !== M || p.scale.length !== 3) throw new Error(`hcSplitSinkhorn: base must have ${M} values and scale 3, got ${p.base.length} and ${p.scale.length}`);
  const rows = mixes.length / M;
  const eps = f(p.eps);
  const [s0, s1, s2] = [f(p.scale[0] as number), f(p.scale[1] as number), f(p.scale[2] as number)];
  const pre = new Float32Array(rows * n);
  const post = new Float32Array(rows * n);
  const comb = new Float32Array(rows * n * n);
  const c = new Float64Array(n * n); // float32 values held in doubles while a row is worked on
  const colSum = new Float64Array(n);
  for (let r = 0; r < rows; r++) {
    const m = r * M;
    for (let j = 0; j < n; j++) {
      pre[r * n + j] = f(sigmoid(f(f((mixes[m + j] as number) * s0) + (p.base[j] as number))) + eps);
      post[r * n + j] = f(2 * sigmoid(f(f((mixes[m + n + j] as number) * s1) + (p.base[n + j] as number))));
    }
    for (let i = 0; i < n * n; i++) c[i] = f(f((mixes[m + 2 * n + i] as number) * s2) + (p.base[2 * n + i] as number));
    // row softmax (max-subtracted exp over the row sum), + ε
    for (let j = 0; j < n; j++) {
      let max = -Infinity;
      for (let k = 0; k < n; k++) max = Math.max(max, c[j * n + k] as number);
      let sum = 0;
      for (let k = 0; k < n; k++) {
        const e = f(Math.exp(f((c[j * n + k] as number) - max)));
        c[j * n + k] = e;
        sum = f(sum + e);
      }
      for (let k = 0; k < n; k++) c[j * n + k] = f(f((c[j * n + k] as number) / sum) + eps);
    }
    const normalizeColumns = () => {
      colSum.fill(0);
      for (let j = 0; j < n; j++) for (let k = 0; k < n; k++) colSum[k] = f((colSum[k] as number) + (c[j * n + k] as number));
      for (let k = 0; k < n; k++) {
        const den = f((colSum[k] as number) + eps);
        for (let j = 0; j < n; j++) c[j * n + k] = f((c[j * n + k] as number) / den);
      }
    };
    normalizeColumns();
    for (let t = 1; t < iters; t++) {
      for (let j = 0; j < n; j++) {
        let sum = 0;
        for (let k = 0; k < n; k++) sum = f(sum + (c[j * n + k] as number));
        const den = f(sum + eps);
        for (let k = 0; k < n; k++) c[j * n + k] = f((c[j * n + k] as number) / den);
      }
      normalizeColumns();
    }
    comb.set(c, r * n * n);
  }
  return { pre, post, comb };
}
