/**
 * @module model/graphs/signatures
 * The inputs and outputs of every model graph, shared by the builders (graphs/*) and the model code
 * (through TypedGraph). Shapes: S rows, n = hcMult, d = dim, H heads of D = headDim, rd = ropeHeadDim,
 * hI × dI index heads, R = D/2 + D/16 and r = dI/2 + dI/32 packed row bytes, G compressed groups of m
 * rows, C attention columns, E routed experts.
 */
import type { GraphSignature, Io } from './graph-io.js';

type AnySignature = GraphSignature<Io, Io, Io, Io>;

/**
 * attnIn[l]: X [S,n,d], pre [S,n], cos/sin [S,rd/2] → a_mix [S,(2+n)·n] (hc mixes before the Sinkhorn),
 * q [S,H,D] (RoPE'd), kvw [S,D] (window KV, RoPE'd, FP8); KV sources: latent [S,D] (m = 1) or
 * ckv, cscore [S,D] (m > 1, fp32 compressor inputs); index sources: iq [S,hI,dI] (MXFP4), iw [S,hI].
 */
export const ATTN_IN = {
  inputs: { X: 'float32', pre: 'float32', cos: 'float32', sin: 'float32' },
  outputs: { q: 'float32', kvw: 'float32' },
  /** a_mix, or with GraphContext.sinkhornInGraph its split a_pre, a_post, a_comb */
  optionalOutputs: {
    a_mix: 'float32',
    a_pre: 'float32',
    a_post: 'float32',
    a_comb: 'float32',
    latent: 'float32',
    ckv: 'float32',
    cscore: 'float32',
    iq: 'float32',
    iw: 'float32',
  },
} as const satisfies AnySignature;

/** The decoder's first KV source's compressor inputs from the encoder output: X, pre → latent | ckv, cscore. */
export const ATTN_IN_COMPRESS = {
  inputs: { X: 'float32', pre: 'float32' },
  outputs: {},
  optionalOutputs: { latent: 'float32', ckv: 'float32', cscore: 'float32' },
} as const satisfies AnySignature;

/**
 * compress[l]: G completed groups → packed main-KV rows ckv [G,R] and index-K rows ik [G,r] (uint8).
 * Inputs m = 1: latent [G,D]; m > 1: gkv, gscore [G,m,D]; cos/sin [G,rd/2] at positions j·m.
 */
export const COMPRESS = {
  inputs: { cos: 'float32', sin: 'float32' },
  optionalInputs: { latent: 'float32', gkv: 'float32', gscore: 'float32' },
  outputs: { ckv: 'uint8', ik: 'uint8' },
} as const satisfies AnySignature;

/**
 * indexer[l] (scan of G spans at once): K [G,N,r] packed index keys, span g's at coordinates
 * [kbase[g], kbase[g]+N); iq [G,S,hI,dI], iw [G,S,hI]; lo, hi [G,S,1] the coordinates each row may
 * pick; kk [1] → topv [G,S,k] scores and topi [G,S,k] coordinates of each row's best k = min(kk, N) (by
 * score, ties to the lower coordinate); the candidate source also takes pin [G,S,1] (the row's newest
 * visible block) and gives blockv, blocki [G,S,kb] its best candidate blocks. Layers after the
 * candidate source, when they scan everything: cand_in [G,S,N], the pool as a mask.
 */
export const INDEXER_SCAN = {
  inputs: { iq: 'float32', iw: 'float32', K: 'uint8', kbase: 'int64', lo: 'int64', hi: 'int64', kk: 'int32' },
  optionalInputs: { cand_in: 'bool', pin: 'int64' },
  outputs: { topv: 'float32', topi: 'int32' },
  optionalOutputs: { blockv: 'float32', blocki: 'int32' },
} as const satisfies AnySignature;

/**
 * indexer[l] (candidate pool): iq, iw; K [U,r] the pool's packed index keys; allow [S,U] (in the row's
 * candidate blocks and visible); kk [1] → pick [S,k'] pool columns by descending score (ties: lower
 * column), k' = min(kk, U), and finite [S,k'] (the pick's score is not -inf).
 */
export const INDEXER_POOL = {
  inputs: { iq: 'float32', iw: 'float32', K: 'uint8', allow: 'bool', kk: 'int32' },
  outputs: { pick: 'int32', finite: 'bool' },
} as const satisfies AnySignature;

/**
 * index_scores (every index source by default; model/indexer/indexer-scores unpacks the keys and picks):
 * q [M,dI] the rows' index queries, M = rows × hI (row-major [rows, hI]); k [N,dI] the keys' values
 * → p [M,N] the per-head products q·k (fp32, the scan's einsum before its bf16 rounding); where the
 * head sum is not done in TypeScript (more than 4 index heads), also iw [rows,hI] → scores [rows,N],
 * the scan's bf16 einsum.
 */
export const INDEX_SCORES = {
  inputs: { q: 'float32', k: 'float32' },
  optionalInputs: { iw: 'float32' },
  outputs: {},
  optionalOutputs: { p: 'float32', scores: 'float32' },
} as const satisfies AnySignature;

/** attention (both layer kinds): q [S,H,D], kv [N,D] key table, idx [S,C] rows of kv (-1 none), sink [H] → att [S,H,D]. */
export const ATTENTION = {
  inputs: { q: 'float32', kv: 'float32', idx: 'int32', sink: 'float32' },
  outputs: { att: 'float32' },
} as const satisfies AnySignature;

/**
 * attnOut[l]: att [S,H,D], X [S,n,d], a_pre, a_post [S,n], a_comb [S,n,n], cos/sin → X1 [S,n,d] (after
 * the attention sublayer), f_mix (the FFN's hc mixes), xf [S,d] (FFN input), gate_logits [S,E] (fp32).
 */
export const ATTN_OUT = {
  inputs: { att: 'float32', X: 'float32', a_pre: 'float32', a_post: 'float32', a_comb: 'float32', cos: 'float32', sin: 'float32' },
  outputs: { X1: 'float32', xf: 'float32', gate_logits: 'float32' },
  /** f_mix, or with GraphContext.sinkhornInGraph its split f_pre, f_post, f_comb */
  optionalOutputs: { f_mix: 'float32', f_pre: 'float32', f_post: 'float32', f_comb: 'float32' },
} as const satisfies AnySignature;

/** The per-expert inputs of moe[l]: the rows routed to expert e and their weights. */
export type MoeExpertInputs = Readonly<Record<`rows_${number}`, 'int64'> & Record<`w_${number}`, 'float32'>>;

/** moe[l]: xf [S,d], X1 [S,n,d], f_post [S,n], f_comb [S,n,n], rows_e [n_e] int64, w_e [n_e,1] → X2 [S,n,d]. */
export function moeSignature(experts: number) {
  const perExpert: Record<string, 'int64' | 'float32'> = {};
  for (let e = 0; e < experts; e++) {
    perExpert[`rows_${e}`] = 'int64';
    perExpert[`w_${e}`] = 'float32';
  }
  return {
    inputs: { xf: 'float32', X1: 'float32', f_post: 'float32', f_comb: 'float32', ...(perExpert as MoeExpertInputs) },
    outputs: { X2: 'float32' },
  } as const;
}
export type MoeSignature = ReturnType<typeof moeSignature>;

/** head: X [S,n,d], pre [S,n] → logits [S,V] (fp32). */
export const HEAD = {
  inputs: { X: 'float32', pre: 'float32' },
  outputs: { logits: 'float32' },
} as const satisfies AnySignature;
