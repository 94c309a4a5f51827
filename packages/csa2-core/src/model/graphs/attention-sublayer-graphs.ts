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

/** A sublayer's hc mixes (a_mix / f_mix), or with ctx.sinkhornInGraph their split (a_pre, a_post, a_comb / f_…). */
function outputMixes(o: GraphOps, ctx: GraphContext, prefix: string, which: 'attn' | 'ffn', X: string): void {
  const { config: c, weights: w } = ctx;
  const n = c.hcMult;
  const mixes = hcMixLogits(o, c, w, prefix, which, X);
  const k = which === 'attn' ? 'a' : 'f';
  if (ctx.sinkhornInGraph !== true) {
    o.g.output(mixes, `${k}_mix`, 'float32', ['S', (2 + n) * n]);
    return;
  }
  const split = o.hcSplitSinkhorn(
    mixes,
    { n, iters: c.hcSinkhornIters, eps: c.hcEps, scale: w.get(`${prefix}.hc_${which}_scale`), base: w.get(`${prefix}.hc_${which}_base`) },
    `hc_${which}`,
  );
  o.g.output(split.pre, `${k}_pre`, 'float32', ['S', n]);
  o.g.output(split.post, `${k}_post`, 'float32', ['S', n]);
  o.g.output(split.comb, `${k}_comb`, 'float32', ['S', n, n]);
}

/**
 * attnIn: the attention sublayer up to the sparse-attention call, and the attention mixes (a_mix, before
 * hc_split_sinkhorn, which model/hc/hc-sinkhorn runs). `compressOnly` builds just the compressor inputs
 * (ATTN_IN_COMPRESS: the first decoder KV source's cache extended from the encoder output in encode mode).
 */
export function buildAttnInGraph(ctx: GraphContext, e: LayerPlanEntry, opts: { compressOnly?: boolean } = {}): Uint8Array {
  const { config: c, weights: w } = ctx;
  const p = `layers.${e.layer}`;
  const g = new GraphBuilder(`attn_in_${e.layer}${opts.compressOnly ? '_compress' : ''}`);
  const o = new GraphOps(g, ctx.mode, ctx.bf16Gemm === true);
  const { hcMult: n, dim: d, headDim: D, ropeHeadDim: rd, numHeads: H } = c;
  const X = g.input('X', 'float32', ['S', n, d]);
  const preIn = g.input('pre', 'float32', ['S', n]);

  if (!opts.compressOnly) outputMixes(o, ctx, p, 'attn', X);
  const x = o.rmsNorm(o.hcPre(X, preIn), 'attn_norm', w.get(`${p}.attn_norm.weight`), c.normEps); // [S, d] bf16

  if (e.isKvSource) {
    const m = e.compressRatio;
    if (m === 1) {
      const lat = o.linear(x, 'c_wkv', w.get(`${p}.attn.compressor.wkv.weight`), D, d);
      g.output(o.rmsNorm(lat, 'c_norm', w.get(`${p}.attn.compressor.norm.weight`), c.normEps), 'latent', 'float32', ['S', D]);
    } else {
      // m > 1: fp32 projections of x.float() (the reference promotes these weights to fp32)
      g.output(o.linearF32(x, 'c_wkv', w.get(`${p}.attn.compressor.wkv.weight`), D, d), 'ckv', 'float32', ['S', D]);
      g.output(o.linearF32(x, 'c_wgate', w.get(`${p}.attn.compressor.wgate.weight`), D, d), 'cscore', 'float32', ['S', D]);
    }
  }
  if (opts.compressOnly) return g.toBytes();

  const cos = g.input('cos', 'float32', ['S', rd / 2]);
  const sin = g.input('sin', 'float32', ['S', rd / 2]);
  const qr = o.rmsNorm(o.linear(x, 'wq_a', w.get(`${p}.attn.wq_a.weight`), c.qLoraRank, d), 'q_norm', w.get(`${p}.attn.q_norm.weight`), c.normEps);
  const q = g.reshape(o.linear(qr, 'wq_b', w.get(`${p}.attn.wq_b.weight`), H * D, c.qLoraRank), [0, H, D]);
  g.output(o.rope(q, 3, D, rd, cos, sin), 'q', 'float32', ['S', H, D]);

  const kv = o.rmsNorm(o.linear(x, 'wkv', w.get(`${p}.attn.wkv.weight`), D, d), 'kv_norm', w.get(`${p}.attn.kv_norm.weight`), c.normEps);
  g.output(o.fakeQuantFp8Block32(o.rope(kv, 2, D, rd, cos, sin), D, [-1, D]), 'kvw', 'float32', ['S', D]);

  if (e.isIndexSource) {
    const hI = c.indexNumHeads;
    const dI = c.indexHeadDim;
    const iq = g.reshape(o.linear(qr, 'i_wq_b', w.get(`${p}.attn.indexer.wq_b.weight`), hI * dI, c.qLoraRank), [0, hI, dI]);
    const iqRot = o.rope(iq, 3, dI, rd, cos, sin);
    g.output(o.fakeQuantFp4Ue8m0Block32(iqRot, dI, [-1, hI, dI]), 'iq', 'float32', ['S', hI, dI]);
    const wp = o.linear(x, 'i_wproj', w.get(`${p}.attn.indexer.weights_proj.weight`), hI, d);
    // weights_proj(x) * (dI^-0.5 * hI^-0.5): a bf16 tensor times a Python float
    g.output(o.bf(g.mul(wp, g.scalar(Math.fround(dI ** -0.5 * hI ** -0.5)))), 'iw', 'float32', ['S', hI]);
  }
  return g.toBytes();
}

/**
 * attnOut: inverse RoPE of the attention output, output projection + hc_post, then the FFN sublayer's
 * mixes (f_mix, before hc_split_sinkhorn, which model/hc/hc-sinkhorn runs), its input and the MoE gate
 * logits (routing: model/ffn/moe-gate).
 */
export function buildAttnOutGraph(ctx: GraphContext, e: LayerPlanEntry): Uint8Array {
  const { config: c, weights: w } = ctx;
  const p = `layers.${e.layer}`;
  const g = new GraphBuilder(`attn_out_${e.layer}`);
  const o = new GraphOps(g, ctx.mode, ctx.bf16Gemm === true);
  const { hcMult: n, dim: d, headDim: D, ropeHeadDim: rd, numHeads: H, oGroups: G, oLoraRank: R } = c;
  const attIn = g.input('att', 'float32', ['S', H, D]);
  const X = g.input('X', 'float32', ['S', n, d]);
  const aPre = g.input('a_pre', 'float32', ['S', n]);
  const aPost = g.input('a_post', 'float32', ['S', n]);
  const aComb = g.input('a_comb', 'float32', ['S', n, n]);
  const cos = g.input('cos', 'float32', ['S', rd / 2]);
  const sin = g.input('sin', 'float32', ['S', rd / 2]);

  const att = o.rope(attIn, 3, D, rd, cos, sin, true);
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
  const X1 = o.hcPost(y, X, aPost, aComb);
  g.output(X1, 'X1', 'float32', ['S', n, d]);

  outputMixes(o, ctx, p, 'ffn', X1);
  const xf = o.rmsNorm(o.hcPre(X1, aPre), 'ffn_norm', w.get(`${p}.ffn_norm.weight`), c.normEps);
  g.output(xf, 'xf', 'float32', ['S', d]);

  // MoE gate logits (trunk §3.1): x·W^T in fp32; scoring and routing run in model/ffn/moe-gate
  g.output(o.linearF32(xf, 'gate_w', w.get(`${p}.ffn.gate.weight`), c.numRoutedExperts, d), 'gate_logits', 'float32', ['S', c.numRoutedExperts]);
  return g.toBytes();
}
