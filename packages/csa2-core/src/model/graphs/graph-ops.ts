/**
 * @module model/graphs/graph-ops
 * Sub-graph emitters for the equations of the DeepSeek-V4.1 forward pass, each written to reproduce
 * the official reference's arithmetic: which values are rounded to bf16, which stay fp32, and the
 * order of the fp32 operations (csa2-reference.md §2–3, v41-trunk-reference.md §2–3).
 *
 * Numerics modes:
 *   'bf16' (default) — round to bf16 exactly where the reference holds a bf16 tensor; accumulate fp32.
 *   'fp32'           — plain float32 everywhere (no bf16 rounding; attention probabilities stay fp32).
 * The KV-side quantizers (FP8 window, FP4 caches, MXFP4 index q/k) run in both modes, as in the
 * reference, whose fp32 variant keeps them too.
 */
import type { GraphBuilder } from '../../onnx/graph-builder.js';
import { f32ToBf16Bits } from '../../numerics/bf16.js';

export type NumericsMode = 'bf16' | 'fp32';

/** bf16 little-endian bytes of float32 values (round to nearest even; exact for bf16 values). */
export function bf16Bytes(values: Float32Array): Uint8Array {
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = f32ToBf16Bits(values[i] as number);
  return new Uint8Array(out.buffer);
}

const FP8_MAX = 448;
const FP4_MAX = 6;
/** fp32(1/448) and fp32(1/6): the kernels multiply by these float32 reciprocals. */
const FP8_MAX_INV = Math.fround(1 / FP8_MAX);
const FP4_MAX_INV = Math.fround(1 / FP4_MAX);
/** Sparse attention walks its index list in blocks of this many entries (online softmax). */
export const ATTENTION_BLOCK = 64;

/** Transposes a row-major [rows, cols] matrix into a new [cols, rows] one. */
export function transposeMatrix(w: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(w.length);
  for (let r = 0; r < rows; r++) {
    const base = r * cols;
    for (let c = 0; c < cols; c++) out[c * rows + r] = w[base + c] as number;
  }
  return out;
}

/** An FP4 quantizer's blocks: scale [rows, blocks, 1], clamped input and its E2M1 rounding [rows, blocks, size]. */
export interface Fp4Blocks {
  readonly scale: string;
  readonly clamped: string;
  readonly rounded: string;
}

export class GraphOps {
  constructor(
    readonly g: GraphBuilder,
    readonly mode: NumericsMode,
    /** GraphContext.bf16Gemm: bf16 linears as bf16 GEMMs (bf16 mode only). */
    readonly bf16Gemm = false,
  ) {}

  /** Rounds to bf16 where the reference holds a bf16 tensor (identity in fp32 mode). */
  bf(x: string): string {
    if (this.mode === 'fp32') return x;
    return this.g.cast(this.g.cast(x, 'bfloat16'), 'float32');
  }

  /**
   * y = x @ W^T for W [out, in] (nn.Linear layout); bf16 output in bf16 mode (F.linear on bf16). `x`
   * holds bf16 values (every caller rounds it first, as the reference's bf16 tensors are). With
   * bf16Gemm the product is a bf16 GEMM: the casts of x and W to bf16 are exact, the GEMM accumulates
   * in fp32 and rounds its result to bf16 once, which is what bf(fp32 MatMul) computes up to the
   * accumulation order.
   */
  linear(x: string, name: string, w: Float32Array, outDim: number, inDim: number): string {
    const wt = transposeMatrix(w, outDim, inDim);
    if (this.bf16Gemm && this.mode === 'bf16') {
      const wb = this.g.initializer(name, 'bfloat16', [inDim, outDim], bf16Bytes(wt));
      return this.g.cast(this.g.matmul(this.g.cast(x, 'bfloat16'), wb), 'float32');
    }
    return this.bf(this.g.matmul(x, this.g.weight(name, wt, [inDim, outDim])));
  }

  /**
   * bf(a @ b) for operands that hold bf16 values (bf16 activations, bf16 weights, MXFP4 or FP8 values,
   * which bf16 holds exactly): with bf16Gemm a bf16 GEMM (fp32 accumulation, one rounding), else an
   * fp32 MatMul rounded after.
   */
  matmulBf(a: string, b: string): string {
    if (this.bf16Gemm && this.mode === 'bf16') return this.g.cast(this.g.matmul(this.g.cast(a, 'bfloat16'), this.g.cast(b, 'bfloat16')), 'float32');
    return this.bf(this.g.matmul(a, b));
  }

  /**
   * hc_split_sinkhorn (trunk §2.3) as graph nodes, for the CUDA provider's large prefill spans, where
   * model/hc/hc-sinkhorn's per-row TypeScript would cost more than the layer's GEMMs: mixes [S, (2 + n)·n]
   * → pre [S, n] = sigmoid(m·s0 + b) + ε, post [S, n] = 2·sigmoid(m·s1 + b), comb [S, n, n] = the row
   * softmax + ε, then a column normalization and `iters − 1` row-and-column rounds (x / (sum + ε)).
   * The same float32 operations as the TypeScript, in the same order on the CPU (exp in float64 rounded
   * once, sums in index order): the same bits.
   */
  hcSplitSinkhorn(
    mixes: string,
    p: { readonly n: number; readonly iters: number; readonly eps: number; readonly scale: Float32Array; readonly base: Float32Array },
    name: string,
  ): { pre: string; post: string; comb: string } {
    const g = this.g;
    const n = p.n;
    const eps = g.scalar(Math.fround(p.eps));
    const part = (from: number, to: number, s: number, baseName: string): string =>
      g.add(
        g.mul(g.slice(mixes, [1], [from], [to]), g.scalar(Math.fround(p.scale[s] as number))),
        g.weight(`${name}_${baseName}`, p.base.slice(from, to), [to - from]),
      );
    const pre = g.add(this.sigmoidF32(part(0, n, 0, 'base_pre')), eps);
    const post = g.mul(g.scalar(2), this.sigmoidF32(part(n, 2 * n, 1, 'base_post')));
    let c = g.reshape(part(2 * n, (2 + n) * n, 2, 'base_comb'), [-1, n, n]);
    // sums in index order, ((c0 + c1) + c2) + c3, as the TypeScript's: onnxruntime's CPU ReduceSum adds a
    // middle axis in order but not the last one, so row sums are a product with a column of ones
    const ones = g.const(
      'float32',
      Array.from({ length: n }, () => 1),
      [n, 1],
    );
    const sum = (x: string, axis: number): string => (axis === 1 ? g.reduceSum(x, [1], true) : g.matmul(x, ones));
    const e = this.expF32(g.sub(c, g.reduceMax(c, [2], true)));
    c = g.add(g.div(e, sum(e, 2)), eps);
    const norm = (x: string, axis: number): string => g.div(x, g.add(sum(x, axis), eps));
    c = norm(c, 1);
    for (let t = 1; t < p.iters; t++) c = norm(norm(c, 2), 1);
    return { pre, post, comb: c };
  }

  /** y = x @ W^T kept in fp32 (fp32 parameters: compressor m>1, gate, head, hc_fn). */
  linearF32(x: string, name: string, w: Float32Array, outDim: number, inDim: number): string {
    const wt = this.g.weight(name, transposeMatrix(w, outDim, inDim), [inDim, outDim]);
    return this.g.matmul(x, wt);
  }

  /** RMSNorm over the last axis: bf16(w * (x * rsqrt(mean(x²) + eps))) (trunk §2.5). */
  rmsNorm(x: string, name: string, w: Float32Array, eps: number): string {
    const g = this.g;
    const ms = g.reduceMean(g.mul(x, x), [-1], true);
    const r = g.div(g.scalar(1), g.sqrt(g.add(ms, g.scalar(eps))));
    const weight = g.weight(name, w, [w.length]);
    return this.bf(g.mul(weight, g.mul(x, r)));
  }

  /**
   * RoPE on the last `ropeDim` dims, interleaved pairs as complex numbers (csa2 §2.2), fp32 math, the
   * result rounded to bf16. `cos`/`sin` are [rows, ropeDim/2]; x is [rows, width] or [rows, heads, width].
   */
  rope(x: string, rank: 2 | 3, width: number, ropeDim: number, cos: string, sin: string, inverse = false): string {
    const g = this.g;
    const half = ropeDim / 2;
    const nope = g.slice(x, [-1], [0], [width - ropeDim]);
    const r = g.slice(x, [-1], [width - ropeDim], [width]);
    const pairs = g.reshape(r, rank === 2 ? [0, half, 2] : [0, 0, half, 2]);
    const a = g.slice(pairs, [-1], [0], [1]);
    const b = g.slice(pairs, [-1], [1], [2]);
    // cos/sin [rows, half] -> [rows, half, 1] or [rows, 1, half, 1]
    const c = rank === 2 ? g.unsqueeze(cos, [-1]) : g.unsqueeze(cos, [1, 3]);
    let s = rank === 2 ? g.unsqueeze(sin, [-1]) : g.unsqueeze(sin, [1, 3]);
    if (inverse) s = g.neg(s);
    // c10::complex: (a + ib)(c + is) = (a*c - b*s) + i(a*s + b*c)
    const re = g.sub(g.mul(a, c), g.mul(b, s));
    const im = g.add(g.mul(a, s), g.mul(b, c));
    const rotated = g.reshape(g.concat([re, im], -1), rank === 2 ? [0, ropeDim] : [0, 0, ropeDim]);
    return g.concat([nope, this.bf(rotated)], -1);
  }

  /** 2^ceil(log2(t)) for positive t, exactly (fast_round_scale on the IEEE bits; floor 2^-126). */
  pow2Ceil(t: string): string {
    const g = this.g;
    const e = g.op('Ceil', [g.mul(g.log(t), g.scalar(1 / Math.LN2))]);
    let p = g.op('Pow', [g.scalar(2), e]);
    // the log is approximate: fix up by one step each way so that p/2 < t <= p holds exactly
    p = g.where(g.less(p, t), g.mul(p, g.scalar(2)), p);
    const halfP = g.mul(p, g.scalar(0.5));
    p = g.where(g.greaterOrEqual(halfP, t), halfP, p);
    return g.max(p, g.scalar(2 ** -126));
  }

  /** FP4 E2M1 round-to-nearest-even of v already clamped to [-6, 6] (csa2 §2.3). */
  e2m1Round(v: string): string {
    const g = this.g;
    const mag = g.abs(v);
    const step = g.where(g.less(mag, g.scalar(2)), g.scalar(0.5), g.where(g.less(mag, g.scalar(4)), g.scalar(1), g.scalar(2)));
    return g.mul(g.round(g.div(v, step)), step);
  }

  private blocks(x: string, lastDim: number, block: number): { grouped: string; amax: string } {
    const g = this.g;
    const grouped = g.reshape(x, [-1, lastDim / block, block]);
    return { grouped, amax: g.reduceMax(g.abs(grouped), [-1], true) };
  }

  /** act_quant(x, 32, ue8m0, inplace): FP8 E4M3 with a power-of-two scale per 32 (window KV, csa2 §2.3 C). */
  fakeQuantFp8Block32(x: string, lastDim: number, outDims: readonly number[]): string {
    const g = this.g;
    const { grouped, amax } = this.blocks(x, lastDim, 32);
    const s = this.pow2Ceil(g.mul(g.max(amax, g.scalar(1e-4)), g.scalar(FP8_MAX_INV)));
    const q = g.cast(g.cast(g.clip(g.div(grouped, s), -FP8_MAX, FP8_MAX), 'float8e4m3fn'), 'float32');
    return g.reshape(g.mul(q, s), outDims);
  }

  /**
   * fp4_act_quant(x, 16, e4m3 scale) up to the rounding (main compressed KV, csa2 §2.3 A): per block of 16,
   * the E4M3 scale s [rows, D/16, 1] (amax/6 rounded to E4M3), the clamped input v = clip(x/s) and its
   * E2M1 rounding q [rows, D/16, 16]. The fake-quantized value is q·s, exactly (≤ 6 significant bits).
   */
  fp4E4m3Block16(x: string, lastDim: number): Fp4Blocks {
    const g = this.g;
    const { grouped, amax } = this.blocks(x, lastDim, 16);
    const floor = g.max(amax, g.scalar(FP4_MAX * 2 ** -9));
    const s = g.cast(g.cast(g.clip(g.div(floor, g.scalar(FP4_MAX)), -FP8_MAX, FP8_MAX), 'float8e4m3fn'), 'float32');
    const v = g.clip(g.div(grouped, s), -FP4_MAX, FP4_MAX);
    return { scale: s, clamped: v, rounded: this.e2m1Round(v) };
  }

  /** fp4_act_quant(x, 16, e4m3 scale): FP4 E2M1 with an E4M3 scale per 16 (main compressed KV, csa2 §2.3 A). */
  fakeQuantFp4E4m3Block16(x: string, lastDim: number, outDims: readonly number[]): string {
    const b = this.fp4E4m3Block16(x, lastDim);
    return this.g.reshape(this.g.mul(b.rounded, b.scale), outDims);
  }

  /** fp4_act_quant(x, 32, ue8m0 scale) up to the rounding (MXFP4: index q/k, csa2 §2.3 B); see fp4E4m3Block16. */
  fp4Ue8m0Block32(x: string, lastDim: number): Fp4Blocks {
    const g = this.g;
    const { grouped, amax } = this.blocks(x, lastDim, 32);
    const s = this.pow2Ceil(g.mul(g.max(amax, g.scalar(FP4_MAX * 2 ** -126)), g.scalar(FP4_MAX_INV)));
    const v = g.clip(g.div(grouped, s), -FP4_MAX, FP4_MAX);
    return { scale: s, clamped: v, rounded: this.e2m1Round(v) };
  }

  /** fp4_act_quant(x, 32, ue8m0 scale): MXFP4, FP4 E2M1 with a power-of-two scale per 32 (index q/k, csa2 §2.3 B). */
  fakeQuantFp4Ue8m0Block32(x: string, lastDim: number, outDims: readonly number[]): string {
    const b = this.fp4Ue8m0Block32(x, lastDim);
    return this.g.reshape(this.g.mul(b.rounded, b.scale), outDims);
  }

  /**
   * hc_mixes (trunk §2.3) for X [rows, n, d] → mixes [rows, (2 + n)·n] = (fn · flatten(x))·r with
   * r = rsqrt(mean(x²) + norm_eps), all fp32. hc_split_sinkhorn of the mixes runs in TypeScript
   * (model/hc/hc-sinkhorn).
   */
  hcMixLogits(x: string, name: string, fn: Float32Array, dims: { n: number; d: number; normEps: number }): string {
    const g = this.g;
    const { n, d } = dims;
    const flat = g.reshape(x, [0, n * d]);
    const r = g.div(g.scalar(1), g.sqrt(g.add(g.reduceMean(g.mul(flat, flat), [-1], true), g.scalar(dims.normEps))));
    return g.mul(this.linearF32(flat, name, fn, (2 + n) * n, n * d), r);
  }

  /** hc_pre: Σ_j pre[j]·X[j] in fp32, rounded to the stream dtype. X [rows, n, d], pre [rows, n] → [rows, d]. */
  hcPre(x: string, pre: string): string {
    const g = this.g;
    return this.bf(g.reduceSum(g.mul(g.unsqueeze(pre, [-1]), x), [1], false));
  }

  /** hc_post: Y[k] = post[k]·y + Σ_j comb[j][k]·R[j], fp32, rounded. y [rows, d], R [rows, n, d]. */
  hcPost(y: string, residual: string, post: string, comb: string): string {
    const g = this.g;
    const expanded = g.mul(g.unsqueeze(post, [-1]), g.unsqueeze(y, [1]));
    const mixed = g.reduceSum(g.mul(g.unsqueeze(comb, [-1]), g.unsqueeze(residual, [2])), [1], false);
    return this.bf(g.add(expanded, mixed));
  }

  /**
   * Math.fround(Math.exp(x)): the exponential in float64, rounded once to float32, as the TypeScript steps
   * compute it (onnxruntime's float32 Exp is off by an ulp in ~7 % of values on the CPU). For the small
   * tensors of the mixes and the MoE gate, which the graph encoder computes in the graph.
   */
  expF32(x: string): string {
    return this.g.cast(this.g.exp(this.g.cast(x, 'float64')), 'float32');
  }

  /** sigmoidF32 (numerics/f32): 1 / (1 + expF32(-x)), each step rounded to float32. */
  sigmoidF32(x: string): string {
    const g = this.g;
    return g.div(g.scalar(1), g.add(g.scalar(1), this.expF32(g.neg(x))));
  }

  /**
   * softplusF32 (numerics/f32, torch's threshold 20): x above 20, else log1p(expF32(x)) in float64 (log(w) −
   * ((w − 1) − u)/w with w = 1 + u, exact where w rounds to 1), rounded to float32.
   */
  softplusF32(x: string): string {
    const g = this.g;
    const u = g.cast(this.expF32(g.min(x, g.scalar(20))), 'float64');
    const one = g.cast(g.scalar(1), 'float64');
    const w = g.add(one, u);
    const log1p = g.where(g.equal(w, one), u, g.sub(g.log(w), g.div(g.sub(g.sub(w, one), u), w)));
    return g.where(g.greater(x, g.scalar(20)), x, g.cast(log1p, 'float32'));
  }

  /** F.silu as torch computes it: x / (1 + exp(-x)). */
  silu(x: string): string {
    const g = this.g;
    return g.div(x, g.add(g.scalar(1), g.exp(g.neg(x))));
  }

  /**
   * Sparse attention (csa2 §2.5) as the kernel computes it: per query row, the index list `idx` [rows, C]
   * (-1 = no key) into the key table `table` [N, D] (V = K) is walked in blocks of ATTENTION_BLOCK
   * columns with a running max floored at -1e30; probabilities are rounded to bf16 before the PV product
   * (bf16 mode); the sink adds exp(sink - max) to the denominator only. q [rows, H, D], sink [H] →
   * [rows, H, D] (bf16 values in bf16 mode); C = `columns`, a multiple of ATTENTION_BLOCK. Each block's keys are gathered from the table just before
   * they are used, so no [rows, C, D] tensor is ever materialized (the gathered keys are C·D values per
   * row: 1.3 MB at the released shape, and copying them dominated the attention time).
   */
  sparseAttention(q: string, table: string, idx: string, sink: string, scale: number, columns: number): string {
    const g = this.g;
    const negInf = g.scalar(-Infinity);
    const scaleT = g.scalar(Math.fround(scale));
    const idx64 = g.cast(idx, 'int64');
    const rowOf = g.max(idx64, g.const('int64', [0], [])); // -1 reads row 0, masked out below
    const valid = g.greaterOrEqual(idx64, g.const('int64', [0], []));
    const qT = g.transpose(q, [0, 2, 1]); // [rows, D, H]
    let runMax = '';
    let sumExp = '';
    let acc = '';
    for (let b = 0; b * ATTENTION_BLOCK < columns; b++) {
      const lo = b * ATTENTION_BLOCK;
      const hi = lo + ATTENTION_BLOCK;
      const kb = g.gather(table, g.slice(rowOf, [1], [lo], [hi])); // [rows, 64, D]
      const vb = g.unsqueeze(g.slice(valid, [1], [lo], [hi]), [1]); // [rows, 1, 64]
      const logits = g.transpose(g.matmul(kb, qT), [0, 2, 1]); // [rows, H, 64]: q·k per key, fp32
      const s = g.mul(g.where(vb, logits, negInf), scaleT);
      const prevMax = b === 0 ? g.scalar(-1e30) : runMax;
      runMax = g.max(prevMax, g.reduceMax(s, [-1], false)); // [rows, H]
      const rescale = g.exp(g.sub(prevMax, runMax));
      const p = g.exp(g.sub(s, g.unsqueeze(runMax, [-1])));
      const blockSum = g.reduceSum(p, [-1], false);
      const pv = g.matmul(this.bf(p), kb); // [rows, H, D]
      if (b === 0) {
        sumExp = blockSum;
        acc = pv;
      } else {
        sumExp = g.add(g.mul(sumExp, rescale), blockSum);
        acc = g.add(g.mul(acc, g.unsqueeze(rescale, [-1])), pv);
      }
    }
    // the sink adds exp(sink - max) to the denominator only (its value vector is zero)
    const den = g.add(sumExp, g.exp(g.sub(sink, runMax)));
    return this.bf(g.div(acc, g.unsqueeze(den, [-1])));
  }
}
