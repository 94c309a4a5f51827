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

export function buildCompressGraph(ctx: GraphContext, e: LayerPlanEntry): Uint8Array {
  const { config: c, weights: w } = ctx;
  const p = `layers.${e.layer}`;
  const g = new GraphBuilder(`compress_${e.layer}`);
  const o = new GraphOps(g, ctx.mode, ctx.bf16Gemm === true);
  const { headDim: D, ropeHeadDim: rd, indexHeadDim: dI } = c;
  const m = e.compressRatio;
  let latent: string;
  if (m === 1) {
    latent = g.input('latent', 'float32', ['G', D]);
  } else {
    const kv = g.input('gkv', 'float32', ['G', m, D]);
    const score = g.input('gscore', 'float32', ['G', m, D]);
    const ex = g.exp(g.sub(score, g.reduceMax(score, [1], true)));
    const weights = g.div(ex, g.reduceSum(ex, [1], true));
    const pooled = g.reduceSum(g.mul(kv, weights), [1], false);
    latent = o.rmsNorm(o.bf(pooled), 'c_norm', w.get(`${p}.attn.compressor.norm.weight`), c.normEps);
  }
  const cos = g.input('cos', 'float32', ['G', rd / 2]);
  const sin = g.input('sin', 'float32', ['G', rd / 2]);
  // index keys come from the latent before RoPE (csa2 §3.2.1)
  const k = o.rmsNorm(o.linear(latent, 'i_wk', w.get(`${p}.attn.indexer.wk.weight`), dI, D), 'i_knorm', w.get(`${p}.attn.indexer.k_norm.weight`), c.normEps);
  g.output(packIndexK(o, o.rope(k, 2, dI, rd, cos, sin), dI), 'ik', 'uint8', ['G', dI / 2 + dI / 32]);
  g.output(packMainKv(o, o.rope(latent, 2, D, rd, cos, sin), D), 'ckv', 'uint8', ['G', D / 2 + D / 16]);
  return g.toBytes();
}
