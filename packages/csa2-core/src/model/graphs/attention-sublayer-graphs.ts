/**
 * @module model/graphs/attention-sublayer-graphs
 * The weight-bearing halves of a layer's attention sublayer, around the sparse attention:
 *
 *   attnIn[l]   hc mixes of the sublayer, q (RoPE'd), window KV (RoPE'd, FP8), the compressor inputs
 *               (KV sources) and the index queries and head weights (index sources);
 *   attnOut[l]  inverse RoPE of the attention output, the grouped low-rank output projection, hc_post,
 *               then the FFN's hc mixes, its input and the MoE gate logits.
 *
 * Row counts are symbolic, so one graph serves prefill chunks, decode steps and batches of both.
 * Signatures: graphs/signatures (ATTN_IN, ATTN_IN_COMPRESS, ATTN_OUT).
 */
import { GraphBuilder } from '../../onnx/graph-builder.js';
import type { ModelConfig } from '../../config/model-config.js';
import type { LayerPlanEntry } from '../../config/layer-plan.js';
import { GraphOps } from './graph-ops.js';
import type { GraphContext, WeightSource } from './context.js';

/** The mixes of one hc parameter set (`which`: 'attn' or 'ffn') of the block at `prefix`. */
function hcMixLogits(o: GraphOps, c: ModelConfig, w: WeightSource, prefix: string, which: 'attn' | 'ffn', X: string): string {
  return o.hcMixLogits(X, `hc_${which}_fn`, w.get(`${prefix}.hc_${which}_fn`), { n: c.hcMult, d: c.dim, normEps: c.normEps });
}

/** A sublayer's hc mixes: split in the graph (ctx.sinkhornInGraph) or the raw mixes for model/hc/hc-sinkhorn. */
export type SublayerMixes = { readonly mix: string } | { readonly pre: string; readonly post: string; readonly comb: string };

function sublayerMixes(o: GraphOps, ctx: GraphContext, prefix: string, which: 'attn' | 'ffn', X: string): SublayerMixes {
  const { config: c, weights: w } = ctx;
  const n = c.hcMult;
  const mixes = hcMixLogits(o, c, w, prefix, which, X);
  if (ctx.sinkhornInGraph !== true) return { mix: mixes };
  return o.hcSplitSinkhorn(
    mixes,
    { n, iters: c.hcSinkhornIters, eps: c.hcEps, scale: w.get(`${prefix}.hc_${which}_scale`), base: w.get(`${prefix}.hc_${which}_base`) },
    `hc_${which}`,
  );
}

/** Declares a sublayer's mixes as outputs (a_mix / f_mix, or a_pre, a_post, a_comb / f_…). */
function outputMixes(g: GraphBuilder, n: number, k: 'a' | 'f', mixes: SublayerMixes): void {
  if ('mix' in mixes) {
    g.output(mixes.mix, `${k}_mix`, 'float32', ['S', (2 + n) * n]);
    return;
  }
  g.output(mixes.pre, `${k}_pre`, 'float32', ['S', n]);
  g.output(mixes.post, `${k}_post`, 'float32', ['S', n]);
  g.output(mixes.comb, `${k}_comb`, 'float32', ['S', n, n]);
}

/** The values attnIn computes (graphs/signatures ATTN_IN); absent ones are not the layer's. */
export interface AttnInValues {
  readonly mixes: SublayerMixes | null;
  readonly q: string | null;
  readonly kvw: string | null;
  readonly latent?: string;
  readonly ckv?: string;
  readonly cscore?: string;
  readonly iq?: string;
  readonly iw?: string;
}

/**
 * attnIn's nodes into `o.g` (weights named by role: callers that emit several layers scope them): the
 * attention mixes, q, the window KV, the compressor inputs and the index queries and weights of the
 * stream X [S,n,d] with its collapse mix pre [S,n]; `compressOnly` stops after the compressor inputs.
 */
export function emitAttnIn(
  o: GraphOps,
  ctx: GraphContext,
  e: LayerPlanEntry,
  v: { readonly X: string; readonly pre: string; readonly rope: () => { cos: string; sin: string } },
  opts: { compressOnly?: boolean } = {},
): AttnInValues {
  const { config: c, weights: w } = ctx;
  const g = o.g;
  const p = `layers.${e.layer}`;
  const { dim: d, headDim: D, ropeHeadDim: rd, numHeads: H } = c;
  const mixes = opts.compressOnly ? null : sublayerMixes(o, ctx, p, 'attn', v.X);
  const x = o.rmsNorm(o.hcPre(v.X, v.pre), 'attn_norm', w.get(`${p}.attn_norm.weight`), c.normEps); // [S, d] bf16

  const out: { -readonly [K in keyof AttnInValues]: AttnInValues[K] } = { mixes, q: null, kvw: null };
  if (e.isKvSource) {
    if (e.compressRatio === 1) {
      const lat = o.linear(x, 'c_wkv', w.get(`${p}.attn.compressor.wkv.weight`), D, d);
      out.latent = o.rmsNorm(lat, 'c_norm', w.get(`${p}.attn.compressor.norm.weight`), c.normEps);
    } else {
      // m > 1: fp32 projections of x.float() (the reference promotes these weights to fp32)
      out.ckv = o.linearF32(x, 'c_wkv', w.get(`${p}.attn.compressor.wkv.weight`), D, d);
      out.cscore = o.linearF32(x, 'c_wgate', w.get(`${p}.attn.compressor.wgate.weight`), D, d);
    }
  }
  if (opts.compressOnly) return out;

  const { cos, sin } = v.rope();
  const qr = o.rmsNorm(o.linear(x, 'wq_a', w.get(`${p}.attn.wq_a.weight`), c.qLoraRank, d), 'q_norm', w.get(`${p}.attn.q_norm.weight`), c.normEps);
  const q = g.reshape(o.linear(qr, 'wq_b', w.get(`${p}.attn.wq_b.weight`), H * D, c.qLoraRank), [0, H, D]);
  out.q = o.rope(q, 3, D, rd, cos, sin);

  const kv = o.rmsNorm(o.linear(x, 'wkv', w.get(`${p}.attn.wkv.weight`), D, d), 'kv_norm', w.get(`${p}.attn.kv_norm.weight`), c.normEps);
  out.kvw = o.fakeQuantFp8Block32(o.rope(kv, 2, D, rd, cos, sin), D, [-1, D]);

  if (e.isIndexSource) {
    const hI = c.indexNumHeads;
    const dI = c.indexHeadDim;
    const iq = g.reshape(o.linear(qr, 'i_wq_b', w.get(`${p}.attn.indexer.wq_b.weight`), hI * dI, c.qLoraRank), [0, hI, dI]);
    const iqRot = o.rope(iq, 3, dI, rd, cos, sin);
    out.iq = o.fakeQuantFp4Ue8m0Block32(iqRot, dI, [-1, hI, dI]);
    const wp = o.linear(x, 'i_wproj', w.get(`${p}.attn.indexer.weights_proj.weight`), hI, d);
    // weights_proj(x) * (dI^-0.5 * hI^-0.5): a bf16 tensor times a Python float
    out.iw = o.bf(g.mul(wp, g.scalar(Math.fround(dI ** -0.5 * hI ** -0.5))));
  }
  return out;
}

/**
 * attnIn: the attention sublayer up to the sparse-attention call, and the attention mixes (a_mix, before
 * hc_split_sinkhorn, which model/hc/hc-sinkhorn runs). `compressOnly` builds just the compressor inputs
 * (ATTN_IN_COMPRESS: the first decoder KV source's cache extended from the encoder output in encode mode).
 */
export function buildAttnInGraph(ctx: GraphContext, e: LayerPlanEntry, opts: { compressOnly?: boolean } = {}): Uint8Array {
  const c = ctx.config;
  const g = new GraphBuilder(`attn_in_${e.layer}${opts.compressOnly ? '_compress' : ''}`);
  const o = new GraphOps(g, ctx.mode, ctx.bf16Gemm === true);
  const { hcMult: n, dim: d, headDim: D, ropeHeadDim: rd, numHeads: H } = c;
  const X = g.input('X', 'float32', ['S', n, d]);
  const pre = g.input('pre', 'float32', ['S', n]);
  const rope = () => ({ cos: g.input('cos', 'float32', ['S', rd / 2]), sin: g.input('sin', 'float32', ['S', rd / 2]) });
  const v = emitAttnIn(o, ctx, e, { X, pre, rope }, opts);
  if (v.mixes !== null) outputMixes(g, n, 'a', v.mixes);
  if (v.latent !== undefined) g.output(v.latent, 'latent', 'float32', ['S', D]);
  if (v.ckv !== undefined) g.output(v.ckv, 'ckv', 'float32', ['S', D]);
  if (v.cscore !== undefined) g.output(v.cscore, 'cscore', 'float32', ['S', D]);
  if (v.q !== null) g.output(v.q, 'q', 'float32', ['S', H, D]);
  if (v.kvw !== null) g.output(v.kvw, 'kvw', 'float32', ['S', D]);
  if (v.iq !== undefined) g.output(v.iq, 'iq', 'float32', ['S', c.indexNumHeads, c.indexHeadDim]);
  if (v.iw !== undefined) g.output(v.iw, 'iw', 'float32', ['S', c.indexNumHeads]);
  return g.toBytes();
}

/** The values attnOut computes (graphs/signatures ATTN_OUT). */
export interface AttnOutValues {
  readonly X1: string;
  readonly mixes: SublayerMixes;
  readonly xf: string;
  readonly gateLogits: string;
}

/**
 * attnOut's nodes into `o.g`: the attention output att [S,H,D] through inverse RoPE, the grouped output
 * projection and hc_post (with the stream X and the attention mixes), then the FFN's mixes, its input
 * and the MoE gate logits.
 */
export function emitAttnOut(
  o: GraphOps,
  ctx: GraphContext,
  e: LayerPlanEntry,
  v: {
    readonly att: string;
    readonly X: string;
    readonly aPre: string;
    readonly aPost: string;
    readonly aComb: string;
    readonly cos: string;
    readonly sin: string;
  },
): AttnOutValues {
  const { config: c, weights: w } = ctx;
  const g = o.g;
  const p = `layers.${e.layer}`;
  const { dim: d, headDim: D, ropeHeadDim: rd, numHeads: H, oGroups: G, oLoraRank: R } = c;
  const att = o.rope(v.att, 3, D, rd, v.cos, v.sin, true);
  // grouped low-rank output projection: einsum("sgd,grd->sgr") then wo_b
  const perGroup = g.transpose(g.reshape(att, [0, G, (H / G) * D]), [1, 0, 2]); // [G, S, HD/G]
  const woA = w.get(`${p}.attn.wo_a.weight`); // [G*R, HD/G] viewed [G, R, HD/G]
  const inG = (H / G) * D;
  const woAT = new Float32Array(woA.length);
  for (let grp = 0; grp < G; grp++) {
    for (let r = 0; r < R; r++) {
      for (let k = 0; k < inG; k++) woAT[grp * inG * R + k * R + r] = woA[(grp * R + r) * inG + k] as number;
    }
  }
  const proj = o.matmulBf(perGroup, g.weight('wo_a', woAT, [G, inG, R])); // [G, S, R]
  const flat = g.reshape(g.transpose(proj, [1, 0, 2]), [0, G * R]);
  const y = o.linear(flat, 'wo_b', w.get(`${p}.attn.wo_b.weight`), d, G * R);
  const X1 = o.hcPost(y, v.X, v.aPost, v.aComb);
  const mixes = sublayerMixes(o, ctx, p, 'ffn', X1);
  const xf = o.rmsNorm(o.hcPre(X1, v.aPre), 'ffn_norm', w.get(`${p}.ffn_norm.weight`), c.normEps);
  // MoE gate logits (trunk §3.1): x·W^T in fp32; scoring and routing run in model/ffn/moe-gate
  const gateLogits = o.linearF32(xf, 'gate_w', w.get(`${p}.ffn.gate.weight`), c.numRoutedExperts, d);
  return { X1, mixes, xf, gateLogits };
}

/**
 * attnOut: inverse RoPE of the attention output, output projection + hc_post, then the FFN sublayer's
 * mixes (f_mix, before hc_split_sinkhorn, which model/hc/hc-sinkhorn runs), its input and the MoE gate
 * logits (routing: model/ffn/moe-gate).
 */
export function buildAttnOutGraph(ctx: GraphContext, e: LayerPlanEntry): Uint8Array {
  const c = ctx.config;
  const g = new GraphBuilder(`attn_out_${e.layer}`);
  const o = new GraphOps(g, ctx.mode, ctx.bf16Gemm === true);
  const { hcMult: n, dim: d, headDim: D, ropeHeadDim: rd, numHeads: H } = c;
  const att = g.input('att', 'float32', ['S', H, D]);
  const X = g.input('X', 'float32', ['S', n, d]);
  const aPre = g.input('a_pre', 'float32', ['S', n]);
  const aPost = g.input('a_post', 'float32', ['S', n]);
  const aComb = g.input('a_comb', 'float32', ['S', n, n]);
  const cos = g.input('cos', 'float32', ['S', rd / 2]);
  const sin = g.input('sin', 'float32', ['S', rd / 2]);
  const v = emitAttnOut(o, ctx, e, { att, X, aPre, aPost, aComb, cos, sin });
  g.output(v.X1, 'X1', 'float32', ['S', n, d]);
  outputMixes(g, n, 'f', v.mixes);
  g.output(v.xf, 'xf', 'float32', ['S', d]);
  g.output(v.gateLogits, 'gate_logits', 'float32', ['S', c.numRoutedExperts]);
  return g.toBytes();
}
