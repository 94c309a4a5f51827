/**
 * @module model/hc/hc-sinkhorn
 * hc_split_sinkhorn (trunk §2.3) in TypeScript, with float32 arithmetic: every operation's result is
 * rounded to float32 (Math.fround) in the order the reference writes it, sums left to right.
 *
 * The mixes themselves ((fn · x)·r over the whole stream) are a matrix product and stay in the graphs
 * (GraphOps.hcMixLogits); this part works on (2 + n)·n numbers per token, and as ONNX nodes it was
 * ~240 of a layer's ~800 nodes (20 Sinkhorn iterations, twice per layer), i.e. per-node overhead on
 * every decode step for a few hundred flops.
 */
import { sigmoidF32 as sigmoid } from '../../numerics/f32.js';
import type { TensorOf } from '../../runtime/ort-session.js';

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
  if (p.n !== 4) return hcSplitSinkhornAnyN(mixes, p);
  const out = hcSplitSinkhornAnyN(mixes, p, true);
  for (let r = 0; r < out.comb.length / 16; r++) sinkhorn4(out.comb, r * 16, p.iters, Math.fround(p.eps));
  return out;
}

/**
 * The Sinkhorn iterations of one 4 × 4 comb in place (n = 4: the released hc_mult), as
 * hcSplitSinkhornAnyN's loops do them, with the 16 values in locals: ~4× faster (a batch of 32 decode
 * rows of the 6-layer tiny model spent 12% of its step in the loops). The same float32 operations in
 * the same order (each sum left to right from 0, each quotient rounded): bit for bit (tested).
 */
function sinkhorn4(c: Float32Array, o: number, iters: number, eps: number): void {
  let c00 = c[o] as number,
    c01 = c[o + 1] as number,
    c02 = c[o + 2] as number,
    c03 = c[o + 3] as number;
  let c10 = c[o + 4] as number,
    c11 = c[o + 5] as number,
    c12 = c[o + 6] as number,
    c13 = c[o + 7] as number;
  let c20 = c[o + 8] as number,
    c21 = c[o + 9] as number,
    c22 = c[o + 10] as number,
    c23 = c[o + 11] as number;
  let c30 = c[o + 12] as number,
    c31 = c[o + 13] as number,
    c32 = c[o + 14] as number,
    c33 = c[o + 15] as number;
  let d: number;
  // at least one column pass, as the loops below (their first pass comes before the iteration loop)
  for (let t = 0; t < Math.max(1, iters); t++) {
    if (t > 0) {
      // rows (the first iteration has none: the softmax normalized them)
      d = f(f(f(f(c00 + c01) + c02) + c03) + eps);
      c00 = f(c00 / d);
      c01 = f(c01 / d);
      c02 = f(c02 / d);
      c03 = f(c03 / d);
      d = f(f(f(f(c10 + c11) + c12) + c13) + eps);
      c10 = f(c10 / d);
      c11 = f(c11 / d);
      c12 = f(c12 / d);
      c13 = f(c13 / d);
      d = f(f(f(f(c20 + c21) + c22) + c23) + eps);
      c20 = f(c20 / d);
      c21 = f(c21 / d);
      c22 = f(c22 / d);
      c23 = f(c23 / d);
      d = f(f(f(f(c30 + c31) + c32) + c33) + eps);
      c30 = f(c30 / d);
      c31 = f(c31 / d);
      c32 = f(c32 / d);
      c33 = f(c33 / d);
    }
    // columns
    d = f(f(f(f(c00 + c10) + c20) + c30) + eps);
    c00 = f(c00 / d);
    c10 = f(c10 / d);
    c20 = f(c20 / d);
    c30 = f(c30 / d);
    d = f(f(f(f(c01 + c11) + c21) + c31) + eps);
    c01 = f(c01 / d);
    c11 = f(c11 / d);
    c21 = f(c21 / d);
    c31 = f(c31 / d);
    d = f(f(f(f(c02 + c12) + c22) + c32) + eps);
    c02 = f(c02 / d);
    c12 = f(c12 / d);
    c22 = f(c22 / d);
    c32 = f(c32 / d);
    d = f(f(f(f(c03 + c13) + c23) + c33) + eps);
    c03 = f(c03 / d);
    c13 = f(c13 / d);
    c23 = f(c23 / d);
    c33 = f(c33 / d);
  }
  c[o] = c00;
  c[o + 1] = c01;
  c[o + 2] = c02;
  c[o + 3] = c03;
  c[o + 4] = c10;
  c[o + 5] = c11;
  c[o + 6] = c12;
  c[o + 7] = c13;
  c[o + 8] = c20;
  c[o + 9] = c21;
  c[o + 10] = c22;
  c[o + 11] = c23;
  c[o + 12] = c30;
  c[o + 13] = c31;
  c[o + 14] = c32;
  c[o + 15] = c33;
}

/**
 * Any n: the loops as the reference writes them (what hcSplitSinkhorn's n = 4 path is tested against);
 * `softmaxOnly`: stop after the row softmax (the caller runs the iterations).
 */
export function hcSplitSinkhornAnyN(mixes: Float32Array, p: HcSplitParams, softmaxOnly = false): HcSplit {
  const { n, iters } = p;
  const M = (2 + n) * n;
  if (mixes.length % M !== 0) throw new Error(`hcSplitSinkhorn: ${mixes.length} mixes is not a multiple of (2 + n)·n = ${M}`);
  if (p.base.length !== M || p.scale.length !== 3)
    throw new Error(`hcSplitSinkhorn: base must have ${M} values and scale 3, got ${p.base.length} and ${p.scale.length}`);
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
    if (softmaxOnly) {
      comb.set(c, r * n * n);
      continue;
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

/** A sublayer's hc split: computed in its graph (GraphContext.sinkhornInGraph), or here from its mixes. */
export function splitMixes(
  pre: TensorOf<'float32'> | undefined,
  post: TensorOf<'float32'> | undefined,
  comb: TensorOf<'float32'> | undefined,
  mixes: TensorOf<'float32'> | undefined,
  params: HcSplitParams,
  graph: string,
): HcSplit {
  if (pre !== undefined && post !== undefined && comb !== undefined) return { pre: pre.data, post: post.data, comb: comb.data };
  if (mixes === undefined) throw new Error(`graph ${graph} returned neither its hc mixes nor their split`);
  return hcSplitSinkhorn(mixes.data, params);
}
