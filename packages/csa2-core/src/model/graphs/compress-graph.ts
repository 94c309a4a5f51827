/**
 * @module model/graphs/compress-graph
 * compress[l] (KV sources): completed compressor groups → the global cache's packed rows (signature
 * COMPRESS): main KV = fp4_act_quant(rope(latent), 16, e4m3) and index K = MXFP4(rope(k_norm(wk(latent))))
 * (csa2 §3.1, §3.2.1), as the packed bytes the cache and the artifacts keep (graphs/packed-ops).
 *
 * m > 1: gkv, gscore [G, m, D] fp32 → per-channel softmax pooling over the group, bf16, then the
 * compressor norm; m = 1: latent [G, D] as the attnIn graph normed it. RoPE at the group's first
 * position: cos/sin [G, rd/2] at positions j·m.
 */
import { GraphBuilder } from '../../onnx/graph-builder.js';
import type { LayerPlanEntry } from '../../config/layer-plan.js';
import { GraphOps } from './graph-ops.js';
import type { GraphContext } from './context.js';
import { packIndexK, packMainKv } from './packed-ops.js';

/**
 * The compress graph's nodes into `o.g`: completed groups (latent [G, D] for m = 1; gkv, gscore
 * [G, m, D] for m > 1) with the compress RoPE at the groups' first positions → packed main-KV rows ckv
 * [G, D/2 + D/16] and index-K rows ik [G, dI/2 + dI/32].
 */
export function emitCompress(
  o: GraphOps,
  ctx: GraphContext,
  e: LayerPlanEntry,
  v: { readonly latent: string } | { readonly gkv: string; readonly gscore: string },
  cos: string,
  sin: string,
): { ckv: string; ik: string } {
  const { config: c, weights: w } = ctx;
  const g = o.g;
  const p = `layers.${e.layer}`;
  const { headDim: D, ropeHeadDim: rd, indexHeadDim: dI } = c;
  let latent: string;
  if ('latent' in v) latent = v.latent;
  else {
    const ex = g.exp(g.sub(v.gscore, g.reduceMax(v.gscore, [1], true)));
    const weights = g.div(ex, g.reduceSum(ex, [1], true));
    const pooled = g.reduceSum(g.mul(v.gkv, weights), [1], false);
    latent = o.rmsNorm(o.bf(pooled), 'c_norm', w.get(`${p}.attn.compressor.norm.weight`), c.normEps);
  }
  // index keys come from the latent before RoPE (csa2 §3.2.1)
  const k = o.rmsNorm(o.linear(latent, 'i_wk', w.get(`${p}.attn.indexer.wk.weight`), dI, D), 'i_knorm', w.get(`${p}.attn.indexer.k_norm.weight`), c.normEps);
  return { ik: packIndexK(o, o.rope(k, 2, dI, rd, cos, sin), dI), ckv: packMainKv(o, o.rope(latent, 2, D, rd, cos, sin), D) };
}

export function buildCompressGraph(ctx: GraphContext, e: LayerPlanEntry): Uint8Array {
  const { config: c } = ctx;
  const g = new GraphBuilder(`compress_${e.layer}`);
  const o = new GraphOps(g, ctx.mode, ctx.bf16Gemm === true);
  const { headDim: D, ropeHeadDim: rd, indexHeadDim: dI } = c;
  const m = e.compressRatio;
  const v =
    m === 1
      ? { latent: g.input('latent', 'float32', ['G', D]) }
      : { gkv: g.input('gkv', 'float32', ['G', m, D]), gscore: g.input('gscore', 'float32', ['G', m, D]) };
  const cos = g.input('cos', 'float32', ['G', rd / 2]);
  const sin = g.input('sin', 'float32', ['G', rd / 2]);
  const out = emitCompress(o, ctx, e, v, cos, sin);
  g.output(out.ik, 'ik', 'uint8', ['G', dI / 2 + dI / 32]);
  g.output(out.ckv, 'ckv', 'uint8', ['G', D / 2 + D / 16]);
  return g.toBytes();
}
