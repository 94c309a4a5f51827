/**
 * @module testing/reference64
 * Plain float64 reference implementations of the forward-pass equations of DeepSeek-V4.1-Flash (CSA2),
 * one function per equation, used as test oracles. They follow csa2-reference.md and
 * v41-trunk-reference.md literally and never round to bf16/fp32, so a test comparing a real
 * implementation against them must state a tolerance. The one exception is `ropeFreqsF32` /
 * `ropeCosSinF32`, which reproduce the reference's fp32 RoPE table for the model to use.
 *
 * Conventions: every tensor is a flat row-major array; shapes are given in the JSDoc as
 * [dim0, dim1, ...]. Inputs may be Float64Array or Float32Array; outputs are new Float64Arrays (index
 * results are Int32Array, masks Uint8Array). Lengths are checked on entry and a mismatch throws
 * `ShapeError`.
 */

import { ShapeError } from '../errors.js';

/** An input tensor: float64 or float32 values, flat row-major. */
export type Real = Float64Array | Float32Array;

function expectLength(label: string, values: ArrayLike<number>, dims: readonly number[]): void {
  const expected = dims.reduce((a, b) => a * b, 1);
  if (values.length !== expected) throw new ShapeError(label, dims, [values.length]);
}

function sigmoid(z: number): number {
  return 1 / (1 + Math.exp(-z));
}

/** Indices 0..n-1 ordered by score descending, ties to the lower index (the project's top-k rule). */
function rankByScore(scores: ArrayLike<number>): number[] {
  const order = Array.from({ length: scores.length }, (_, i) => i);
  order.sort((a, b) => {
    const sa = scores[a]!;
    const sb = scores[b]!;
    return sa > sb ? -1 : sa < sb ? 1 : a - b;
  });
  return order;
}

// ---------------------------------------------------------------------------------------------
// linear

/**
 * nn.Linear without bias (csa2 §2.1): y[r, o] = Σ_i x[r, i] · w[o, i], i.e. y = x · Wᵀ with W in the
 * [out, in] layout. x: [rows, inDim], w: [outDim, inDim] → [rows, outDim].
 */
export function linear64(x: Real, w: Real, rows: number, outDim: number, inDim: number): Float64Array {
  expectLength('linear64.x', x, [rows, inDim]);
  expectLength('linear64.w', w, [outDim, inDim]);
  const y = new Float64Array(rows * outDim);
  for (let r = 0; r < rows; r++) {
    for (let o = 0; o < outDim; o++) {
      let dot = 0;
      for (let i = 0; i < inDim; i++) dot += x[r * inDim + i]! * w[o * inDim + i]!;
      y[r * outDim + o] = dot;
    }
  }
  return y;
}

// ---------------------------------------------------------------------------------------------
// norms

/**
 * RMSNorm (trunk §2.5): y[r, c] = w[c] · x[r, c] / sqrt(mean_c(x[r, c]²) + eps).
 * x: [rows, dim], weight: [dim] → [rows, dim].
 */
export function rmsNorm64(x: Real, weight: Real, rows: number, dim: number, eps: number): Float64Array {
  expectLength('rmsNorm64.x', x, [rows, dim]);
  expectLength('rmsNorm64.weight', weight, [dim]);
  const y = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    let sumSquares = 0;
    for (let c = 0; c < dim; c++) sumSquares += x[r * dim + c]! ** 2;
    const inv = 1 / Math.sqrt(sumSquares / dim + eps);
    for (let c = 0; c < dim; c++) y[r * dim + c] = weight[c]! * (x[r * dim + c]! * inv);
  }
  return y;
}

// ---------------------------------------------------------------------------------------------
// RoPE (csa2-reference §2.2)

/** YaRN parameters (`rope_scaling`); `originalSeqLen` 0 turns YaRN off. */
export interface YarnParams {
  readonly originalSeqLen: number;
  readonly factor: number;
  readonly betaFast: number;
  readonly betaSlow: number;
}

/** The released YaRN parameters of every ratio > 0 layer (base 160000). */
export const V41_YARN: YarnParams = { originalSeqLen: 65536, factor: 16, betaFast: 32, betaSlow: 1 };

/**
 * YaRN correction range (§2.2): corrected(r) = ropeDim·ln(orig / (2πr)) / (2 ln base);
 * low = max(floor(corrected(betaFast)), 0), high = min(ceil(corrected(betaSlow)), ropeDim - 1).
 * The upper clamp is ropeDim - 1 (not ropeDim/2 - 1), an upstream quirk kept on purpose.
 */
export function yarnCorrectionRange(ropeDim: number, base: number, yarn: YarnParams): { readonly low: number; readonly high: number } {
  const corrected = (rotations: number): number => (ropeDim * Math.log(yarn.originalSeqLen / (rotations * 2 * Math.PI))) / (2 * Math.log(base));
  return {
    low: Math.max(Math.floor(corrected(yarn.betaFast)), 0),
    high: Math.min(Math.ceil(corrected(yarn.betaSlow)), ropeDim - 1),
  };
}

/** Ramp divisor of `linear_ramp_factor`: high - low, or 0.001 when they are equal (as upstream). */
function rampDivisor(low: number, high: number): number {
  return high === low ? 0.001 : high - low;
}

/**
 * RoPE frequencies (§2.2), float64: f[i] = base^(-2i/ropeDim), i < ropeDim/2; with YaRN
 * (originalSeqLen > 0): ramp[i] = clamp((i - low)/(high - low), 0, 1) and
 * f[i] = f[i]/factor·ramp[i] + f[i]·(1 - ramp[i]). → [ropeDim/2].
 */
export function ropeFreqs64(ropeDim: number, base: number, yarn?: YarnParams): Float64Array {
  const half = ropeDim / 2;
  const freqs = new Float64Array(half);
  for (let i = 0; i < half; i++) freqs[i] = 1 / base ** ((2 * i) / ropeDim);
  if (yarn !== undefined && yarn.originalSeqLen > 0) {
    const { low, high } = yarnCorrectionRange(ropeDim, base, yarn);
    const divisor = rampDivisor(low, high);
    for (let i = 0; i < half; i++) {
      const ramp = Math.min(Math.max((i - low) / divisor, 0), 1);
      freqs[i] = (freqs[i]! / yarn.factor) * ramp + freqs[i]! * (1 - ramp);
    }
  }
  return freqs;
}

/**
 * RoPE frequencies exactly as the reference's `precompute_freqs_cis` computes them in fp32:
 * f = fp32(1 / fp32(base^fp32(2i/ropeDim))); with YaRN, ramp = clamp(fp32((i - low)/(high - low))),
 * smooth = fp32(1 - ramp), f = fp32(fp32(fp32(f/factor)·fp32(1 - smooth)) + fp32(f·smooth)).
 * `base^e` is the correctly rounded fp32 power (torch's powf may differ by an ulp on some platforms).
 * → [ropeDim/2].
 */
export function ropeFreqsF32(ropeDim: number, base: number, yarn?: YarnParams): Float32Array {
  const f = Math.fround;
  const half = ropeDim / 2;
  const freqs = new Float32Array(half);
  const baseF32 = f(base);
  for (let i = 0; i < half; i++) freqs[i] = f(1 / f(baseF32 ** f((2 * i) / ropeDim)));
  if (yarn !== undefined && yarn.originalSeqLen > 0) {
    const { low, high } = yarnCorrectionRange(ropeDim, base, yarn);
    const divisor = f(rampDivisor(low, high));
    const factor = f(yarn.factor);
    for (let i = 0; i < half; i++) {
      const ramp = Math.min(Math.max(f(f(i - low) / divisor), 0), 1);
      const smooth = f(1 - ramp);
      const fi = freqs[i]!;
      freqs[i] = f(f(f(fi / factor) * f(1 - smooth)) + f(fi * smooth));
    }
  }
  return freqs;
}

/** cos/sin of angle[p][k] = positions[p] · freqs[k] (§2.2), float64. → cos, sin: [positions, ropeDim/2]. */
export function ropeCosSin64(freqs: Real, positions: ArrayLike<number>): { cos: Float64Array; sin: Float64Array } {
  const half = freqs.length;
  const cos = new Float64Array(positions.length * half);
  const sin = new Float64Array(positions.length * half);
  for (let p = 0; p < positions.length; p++) {
    for (let k = 0; k < half; k++) {
      const angle = positions[p]! * freqs[k]!;
      cos[p * half + k] = Math.cos(angle);
      sin[p * half + k] = Math.sin(angle);
    }
  }
  return { cos, sin };
}

/**
 * The reference's fp32 cis table: angle = fp32(fp32(p) · f[k]), cos/sin rounded to fp32 (torch.polar).
 * freqsF32: [ropeDim/2] from `ropeFreqsF32` → cos, sin: [positions, ropeDim/2].
 */
export function ropeCosSinF32(freqsF32: Float32Array, positions: ArrayLike<number>): { cos: Float32Array; sin: Float32Array } {
  const half = freqsF32.length;
  const cos = new Float32Array(positions.length * half);
  const sin = new Float32Array(positions.length * half);
  for (let p = 0; p < positions.length; p++) {
    const position = Math.fround(positions[p]!);
    for (let k = 0; k < half; k++) {
      const angle = Math.fround(position * freqsF32[k]!);
      cos[p * half + k] = Math.cos(angle);
      sin[p * half + k] = Math.sin(angle);
    }
  }
  return { cos, sin };
}

/**
 * apply_rotary_emb (§2.2): on the LAST ropeDim dims of each row, the interleaved pair
 * (x[2k], x[2k+1]) is a complex number multiplied by cis = cos + i·sin (by its conjugate when
 * `inverse`). x: [rows, width]; cos, sin: [P, ropeDim/2] with rows a multiple of P: rows are grouped
 * by position, row r uses position ⌊r / (rows/P)⌋ (so [S, H, width] with one position per token works,
 * and P = 1 broadcasts one position). → [rows, width]; the first width - ropeDim dims are copied.
 */
export function applyRope64(x: Real, rows: number, width: number, ropeDim: number, cos: Real, sin: Real, inverse: boolean): Float64Array {
  expectLength('applyRope64.x', x, [rows, width]);
  const half = ropeDim / 2;
  const positions = cos.length / half;
  if (!Number.isInteger(positions) || positions === 0 || rows % positions !== 0 || ropeDim > width) {
    throw new ShapeError('applyRope64.cos', ['P dividing rows', half], [cos.length]);
  }
  expectLength('applyRope64.sin', sin, [positions, half]);
  const rowsPerPosition = rows / positions;
  const sign = inverse ? -1 : 1;
  const y = Float64Array.from(x);
  for (let r = 0; r < rows; r++) {
    const p = Math.floor(r / rowsPerPosition);
    const offset = r * width + width - ropeDim;
    for (let k = 0; k < half; k++) {
      const c = cos[p * half + k]!;
      const s = sign * sin[p * half + k]!;
      const re = x[offset + 2 * k]!;
      const im = x[offset + 2 * k + 1]!;
      y[offset + 2 * k] = re * c - im * s;
      y[offset + 2 * k + 1] = re * s + im * c;
    }
  }
  return y;
}

// ---------------------------------------------------------------------------------------------
// hyper-connections (trunk §2.3, §2.4)

/** Output of `hcMixes64` / `hcSplitSinkhorn64` for one token. */
export interface HcMix64 {
  /** [n] collapse weights, sigmoid + eps. */
  readonly pre: Float64Array;
  /** [n] output weights, 2·sigmoid. */
  readonly post: Float64Array;
  /** [n, n] residual mixing, row-major: comb[j·n + k] carries source copy j into output copy k. */
  readonly comb: Float64Array;
}

/**
 * hc_split_sinkhorn (trunk §2.3) for one token. mixes: [M = (2+n)·n], scale: [3], base: [M].
 * pre = sigmoid(m·s0 + b) + eps; post = 2·sigmoid(m·s1 + b); comb = row softmax(m·s2 + b) + eps, then a
 * column normalization, then (iters - 1) × (row, column) normalizations, each dividing by (sum + eps).
 */
export function hcSplitSinkhorn64(mixes: Real, scale: Real, base: Real, n: number, iters: number, eps: number): HcMix64 {
  const m = (2 + n) * n;
  expectLength('hcSplitSinkhorn64.mixes', mixes, [m]);
  expectLength('hcSplitSinkhorn64.scale', scale, [3]);
  expectLength('hcSplitSinkhorn64.base', base, [m]);
  const pre = new Float64Array(n);
  const post = new Float64Array(n);
  for (let j = 0; j < n; j++) {
    pre[j] = sigmoid(mixes[j]! * scale[0]! + base[j]!) + eps;
    post[j] = 2 * sigmoid(mixes[n + j]! * scale[1]! + base[n + j]!);
  }
  const comb = new Float64Array(n * n);
  for (let j = 0; j < n; j++) {
    let rowMax = -Infinity;
    for (let k = 0; k < n; k++) {
      const i = 2 * n + j * n + k;
      comb[j * n + k] = mixes[i]! * scale[2]! + base[i]!;
      rowMax = Math.max(rowMax, comb[j * n + k]!);
    }
    let rowSum = 0;
    for (let k = 0; k < n; k++) {
      comb[j * n + k] = Math.exp(comb[j * n + k]! - rowMax);
      rowSum += comb[j * n + k]!;
    }
    for (let k = 0; k < n; k++) comb[j * n + k] = comb[j * n + k]! / rowSum + eps;
  }
  const normalizeColumns = (): void => {
    for (let k = 0; k < n; k++) {
      let colSum = 0;
      for (let j = 0; j < n; j++) colSum += comb[j * n + k]!;
      for (let j = 0; j < n; j++) comb[j * n + k] = comb[j * n + k]! / (colSum + eps);
    }
  };
  const normalizeRows = (): void => {
    for (let j = 0; j < n; j++) {
      let rowSum = 0;
      for (let k = 0; k < n; k++) rowSum += comb[j * n + k]!;
      for (let k = 0; k < n; k++) comb[j * n + k] = comb[j * n + k]! / (rowSum + eps);
    }
  };
  normalizeColumns();
  for (let t = 1; t < iters; t++) {
    normalizeRows();
    normalizeColumns();
  }
  return { pre, post, comb };
}

/**
 * hc_mixes (trunk §2.3) for one token: r = 1/sqrt(mean(x²) + normEps) over all n·d values of the
 * stream, mixes = (fn · x)·r, then `hcSplitSinkhorn64`. stream: [n, d]; fn: [M, n·d]; scale: [3];
 * base: [M], with M = (2+n)·n.
 */
export function hcMixes64(stream: Real, fn: Real, scale: Real, base: Real, n: number, iters: number, hcEps: number, normEps: number): HcMix64 {
  const width = stream.length;
  const m = (2 + n) * n;
  expectLength('hcMixes64.fn', fn, [m, width]);
  let sumSquares = 0;
  for (let i = 0; i < width; i++) sumSquares += stream[i]! ** 2;
  const r = 1 / Math.sqrt(sumSquares / width + normEps);
  const mixes = new Float64Array(m);
  for (let row = 0; row < m; row++) {
    let dot = 0;
    for (let i = 0; i < width; i++) dot += fn[row * width + i]! * stream[i]!;
    mixes[row] = dot * r;
  }
  return hcSplitSinkhorn64(mixes, scale, base, n, iters, hcEps);
}

/** hc_pre (trunk §2.4): y[c] = Σ_j pre[j] · X[j, c]. stream: [n, d], pre: [n] → [d]. */
export function hcPre64(stream: Real, pre: Real, n: number, d: number): Float64Array {
  expectLength('hcPre64.stream', stream, [n, d]);
  expectLength('hcPre64.pre', pre, [n]);
  const y = new Float64Array(d);
  for (let j = 0; j < n; j++) for (let c = 0; c < d; c++) y[c] = y[c]! + pre[j]! * stream[j * d + c]!;
  return y;
}

/**
 * hc_post (trunk §2.4): Y[k, c] = post[k]·x[c] + Σ_j comb[j·n + k]·R[j, c] (output copy k takes
 * column k of comb). x: [d], residual: [n, d], post: [n], comb: [n, n] → [n, d].
 */
export function hcPost64(x: Real, residual: Real, post: Real, comb: Real, n: number, d: number): Float64Array {
  expectLength('hcPost64.x', x, [d]);
  expectLength('hcPost64.residual', residual, [n, d]);
  expectLength('hcPost64.post', post, [n]);
  expectLength('hcPost64.comb', comb, [n, n]);
  const y = new Float64Array(n * d);
  for (let k = 0; k < n; k++) {
    for (let c = 0; c < d; c++) {
      let v = post[k]! * x[c]!;
      for (let j = 0; j < n; j++) v += comb[j * n + k]! * residual[j * d + c]!;
      y[k * d + c] = v;
    }
  }
  return y;
}

// ---------------------------------------------------------------------------------------------
// compressor (csa2-reference §3.1)

/**
 * Gated pooling of one group of m tokens (§3.1): pooled[c] = Σ_r kv[r, c]·softmax_r(score[r, c]).
 * A slot with score -inf gets weight 0 (an all -inf channel gives NaN, as torch does).
 * kv, score: [m, D] → [D].
 */
export function compressPool64(kv: Real, score: Real, m: number, headDim: number): Float64Array {
  expectLength('compressPool64.kv', kv, [m, headDim]);
  expectLength('compressPool64.score', score, [m, headDim]);
  const pooled = new Float64Array(headDim);
  for (let c = 0; c < headDim; c++) {
    let max = -Infinity;
    for (let r = 0; r < m; r++) max = Math.max(max, score[r * headDim + c]!);
    let denominator = 0;
    let numerator = 0;
    for (let r = 0; r < m; r++) {
      const w = Math.exp(score[r * headDim + c]! - max);
      denominator += w;
      numerator += w * kv[r * headDim + c]!;
    }
    pooled[c] = numerator / denominator;
  }
  return pooled;
}

/** Ratio-2 compression (§3.1): softmax over the 2 tokens of the group per channel. kv, score: [2, D] → [D]. */
export function compressRatio2_64(kv: Real, score: Real): Float64Array {
  return compressPool64(kv, score, 2, kv.length / 2);
}

/** Ratio-1 compression (§3.1): the latent is the token's own projection (no gate), i.e. the identity. [D] → [D]. */
export function compressRatio1_64(kv: Real): Float64Array {
  return Float64Array.from(kv);
}

// ---------------------------------------------------------------------------------------------
// indexer, top-k and candidates (csa2-reference §3.2, §3.3)

/**
 * Index scores (§3.2.3): scores[j] = Σ_h w[h] · relu(q[h] · K[j]).
 * q: [h, dI], w: [h], K: [n, dI] → [n].
 */
export function indexScores64(q: Real, w: Real, keys: Real, h: number, dI: number): Float64Array {
  expectLength('indexScores64.q', q, [h, dI]);
  expectLength('indexScores64.w', w, [h]);
  const n = keys.length / dI;
  expectLength('indexScores64.K', keys, [n, dI]);
  const scores = new Float64Array(n);
  for (let j = 0; j < n; j++) {
    let total = 0;
    for (let head = 0; head < h; head++) {
      let dot = 0;
      for (let c = 0; c < dI; c++) dot += q[head * dI + c]! * keys[j * dI + c]!;
      total += w[head]! * Math.max(dot, 0);
    }
    scores[j] = total;
  }
  return scores;
}

/**
 * Top-k (§3.2.5) with the project's tie rule: kk = min(k, n) picks by higher score first, then lower
 * index; the picks are sorted ascending by index, then every pick whose score is -inf is replaced by -1
 * in place. (The reference maps picks with idx >= compress_len to -1; with causally masked scores the
 * -inf picks are exactly those, and they sort to the end, so the -1s come last.) scores: [n] → [kk].
 */
export function topK64(scores: Real, k: number): Int32Array {
  const kk = Math.min(k, scores.length);
  const picks = rankByScore(scores)
    .slice(0, kk)
    .sort((a, b) => a - b);
  return Int32Array.from(picks, (j) => (scores[j] === -Infinity ? -1 : j));
}

/**
 * HSI level-1 candidate mask (§3.3) for one query row. scores: [n], already -inf beyond the causal
 * limit. Pads to whole blocks with -inf, takes each block's max, pins block ⌊(compressLen - 1)/blockSize⌋
 * to +inf (no block when compressLen is 0), keeps the top min(topBlocks, numBlocks) blocks (higher score
 * first, then lower block), drops kept blocks whose score is -inf, and expands to positions.
 * → mask [n] (1 = candidate).
 */
export function candidateBlocks64(scores: Real, compressLen: number, topBlocks: number, blockSize: number): Uint8Array {
  const n = scores.length;
  const numBlocks = Math.ceil(n / blockSize);
  const blockScores = new Float64Array(numBlocks).fill(-Infinity);
  for (let j = 0; j < n; j++) {
    const b = Math.floor(j / blockSize);
    blockScores[b] = Math.max(blockScores[b]!, scores[j]!);
  }
  if (compressLen > 0) {
    const newest = Math.floor((compressLen - 1) / blockSize);
    if (newest < numBlocks) blockScores[newest] = Infinity;
  }
  const keep = new Uint8Array(numBlocks);
  for (const b of rankByScore(blockScores).slice(0, Math.min(topBlocks, numBlocks))) {
    if (blockScores[b] !== -Infinity) keep[b] = 1;
  }
  const mask = new Uint8Array(n);
  for (let j = 0; j < n; j++) mask[j] = keep[Math.floor(j / blockSize)]!;
  return mask;
}

// ---------------------------------------------------------------------------------------------
// attention (csa2-reference §2.5)

/**
 * Sparse MQA attention with a sink (§2.5) for one query token: for head h, one softmax over the rows
 * kvRows[idx[c]] (idx -1 = no key) with the sink logit sink[h] in the denominator only, V = K:
 * o[h] = Σ_c e^{s_c}·K[idx[c]] / (Σ_c e^{s_c} + e^{sink[h]}), s_c = scale·(q[h]·K[idx[c]]).
 * Duplicate indices count twice. A head with no valid key outputs 0.
 * q: [H, D], kvRows: [R, D], idx: [C], sink: [H] → [H, D] (H = sink.length).
 */
export function sparseAttention64(q: Real, kvRows: Real, idx: ArrayLike<number>, sink: Real, scale: number): Float64Array {
  const numHeads = sink.length;
  const headDim = q.length / numHeads;
  const probs = sparseAttentionProbs64(q, kvRows, idx, sink, scale);
  const columns = idx.length;
  const out = new Float64Array(numHeads * headDim);
  for (let h = 0; h < numHeads; h++) {
    for (let c = 0; c < columns; c++) {
      const p = probs[h * columns + c]!;
      if (p === 0) continue;
      const row = idx[c]!;
      for (let i = 0; i < headDim; i++) out[h * headDim + i] = out[h * headDim + i]! + p * kvRows[row * headDim + i]!;
    }
  }
  return out;
}

/**
 * The softmax weights of `sparseAttention64` (§2.5) for one query token: P[h, c] = e^{s_c} /
 * (Σ_c' e^{s_c'} + e^{sink[h]}) for a valid column c, 0 for idx[c] = -1 (so the sink's share is
 * 1 - Σ_c P[h, c], and sparseAttention64's o[h] = Σ_c P[h, c]·K[idx[c]]). Duplicate indices are
 * separate columns. q: [H, D], kvRows: [R, D], idx: [C], sink: [H] → [H, C].
 */
export function sparseAttentionProbs64(q: Real, kvRows: Real, idx: ArrayLike<number>, sink: Real, scale: number): Float64Array {
  const numHeads = sink.length;
  const headDim = q.length / numHeads;
  expectLength('sparseAttentionProbs64.q', q, [numHeads, headDim]);
  const numRows = kvRows.length / headDim;
  expectLength('sparseAttentionProbs64.kvRows', kvRows, [numRows, headDim]);
  const columns = idx.length;
  const probs = new Float64Array(numHeads * columns);
  for (let h = 0; h < numHeads; h++) {
    const logits = new Float64Array(columns).fill(-Infinity);
    let max = sink[h]!;
    for (let c = 0; c < columns; c++) {
      const row = idx[c]!;
      if (row === -1) continue;
      if (!Number.isInteger(row) || row < 0 || row >= numRows) {
        throw new ShapeError('sparseAttentionProbs64.idx', [`-1 or 0..${numRows - 1}`], [row]);
      }
      let dot = 0;
      for (let i = 0; i < headDim; i++) dot += q[h * headDim + i]! * kvRows[row * headDim + i]!;
      logits[c] = dot * scale;
      max = Math.max(max, logits[c]!);
    }
    let denominator = Math.exp(sink[h]! - max);
    for (let c = 0; c < columns; c++) denominator += Math.exp(logits[c]! - max);
    for (let c = 0; c < columns; c++) probs[h * columns + c] = Math.exp(logits[c]! - max) / denominator;
  }
  return probs;
}

/**
 * Grouped low-rank output projection (§2.5): o viewed as [G, H·D/G] (group g = heads g·H/G ..),
 * mid[g, r] = Σ_i woA[g·R + r, i] · o[g, i]; out = woB · flatten(mid).
 * o: [H, D], woA: [G·R, H·D/G], woB: [dim, G·R] → [dim].
 */
export function groupedOutProj64(o: Real, woA: Real, woB: Real, numHeads: number, headDim: number, groups: number, rank: number): Float64Array {
  expectLength('groupedOutProj64.o', o, [numHeads, headDim]);
  const groupWidth = (numHeads * headDim) / groups;
  expectLength('groupedOutProj64.woA', woA, [groups * rank, groupWidth]);
  const dim = woB.length / (groups * rank);
  expectLength('groupedOutProj64.woB', woB, [dim, groups * rank]);
  const mid = new Float64Array(groups * rank);
  for (let g = 0; g < groups; g++) {
    for (let r = 0; r < rank; r++) {
      let dot = 0;
      for (let i = 0; i < groupWidth; i++) dot += woA[(g * rank + r) * groupWidth + i]! * o[g * groupWidth + i]!;
      mid[g * rank + r] = dot;
    }
  }
  const out = new Float64Array(dim);
  for (let row = 0; row < dim; row++) {
    let dot = 0;
    for (let i = 0; i < groups * rank; i++) dot += woB[row * groups * rank + i]! * mid[i]!;
    out[row] = dot;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// MoE (trunk §3)

/** Router score functions of `Gate`. */
export type MoeScoreFunc = 'sqrtsoftplus' | 'softmax' | 'sigmoid';

/** torch.nn.functional.softplus with beta 1 and threshold 20: z above 20 passes through. */
export function softplus64(z: number): number {
  return z > 20 ? z : Math.log1p(Math.exp(z));
}

/** SiLU (trunk §3.2): z · sigmoid(z) = z / (1 + e^-z). */
export function silu64(z: number): number {
  return z * sigmoid(z);
}

/**
 * MoE gate (trunk §3.1) for one token: s = scoreFunc(gateW · x) (sqrtsoftplus: sqrt(softplus(z)));
 * the top-k experts are chosen on s + bias (higher first, then lower id; returned in that order);
 * weights are the unbiased s of the chosen experts, divided by (Σ + 1e-20) when normTopK and k > 1,
 * times routeScale. x: [d], gateW: [E, d], bias: [E] → indices [k], weights [k].
 */
export function moeGate64(
  x: Real,
  gateW: Real,
  bias: Real,
  k: number,
  routeScale: number,
  normTopK: boolean,
  scoreFunc: MoeScoreFunc,
): { indices: Int32Array; weights: Float64Array } {
  const numExperts = bias.length;
  const d = x.length;
  expectLength('moeGate64.gateW', gateW, [numExperts, d]);
  const logits = new Float64Array(numExperts);
  for (let e = 0; e < numExperts; e++) {
    let dot = 0;
    for (let c = 0; c < d; c++) dot += gateW[e * d + c]! * x[c]!;
    logits[e] = dot;
  }
  let scores: Float64Array;
  if (scoreFunc === 'softmax') {
    const max = Math.max(...logits);
    const exps = logits.map((z) => Math.exp(z - max));
    const total = exps.reduce((a, b) => a + b, 0);
    scores = exps.map((v) => v / total);
  } else if (scoreFunc === 'sigmoid') {
    scores = logits.map(sigmoid);
  } else {
    scores = logits.map((z) => Math.sqrt(softplus64(z)));
  }
  const biased = scores.map((s, e) => s + bias[e]!);
  const indices = Int32Array.from(rankByScore(biased).slice(0, k));
  const weights = Float64Array.from(indices, (e) => scores[e]!);
  if (normTopK && k > 1) {
    const total = weights.reduce((a, b) => a + b, 0) + 1e-20;
    for (let i = 0; i < weights.length; i++) weights[i] = weights[i]! / total;
  }
  for (let i = 0; i < weights.length; i++) weights[i] = weights[i]! * routeScale;
  return { indices, weights };
}

/**
 * SwiGLU expert (trunk §3.2): g = w1·x, u = w3·x; when limit > 0, u = clamp(u, -limit, limit) and
 * g = min(g, limit) (gate clamped above only); h = silu(g)·u, times the routing weight when given
 * (before w2); out = w2·h. x: [d], w1, w3: [inter, d], w2: [d, inter] → [d].
 */
export function swigluExpert64(x: Real, w1: Real, w3: Real, w2: Real, d: number, inter: number, limit: number, weight?: number): Float64Array {
  expectLength('swigluExpert64.x', x, [d]);
  expectLength('swigluExpert64.w1', w1, [inter, d]);
  expectLength('swigluExpert64.w3', w3, [inter, d]);
  expectLength('swigluExpert64.w2', w2, [d, inter]);
  const hidden = new Float64Array(inter);
  for (let i = 0; i < inter; i++) {
    let g = 0;
    let u = 0;
    for (let c = 0; c < d; c++) {
      g += w1[i * d + c]! * x[c]!;
      u += w3[i * d + c]! * x[c]!;
    }
    if (limit > 0) {
      u = Math.min(Math.max(u, -limit), limit);
      g = Math.min(g, limit);
    }
    hidden[i] = g * sigmoid(g) * u * (weight ?? 1);
  }
  const out = new Float64Array(d);
  for (let c = 0; c < d; c++) {
    let dot = 0;
    for (let i = 0; i < inter; i++) dot += w2[c * inter + i]! * hidden[i]!;
    out[c] = dot;
  }
  return out;
}
