/**
 * @module model/graphs/ffn-graphs
 * The MoE feed-forward of a layer and the output head. Signatures: graphs/signatures (moeSignature, HEAD).
 *
 *   moe[l]  routed experts (each on the rows routed to it, weighted before w2) accumulated in fp32 in
 *           ascending expert order, plus the shared expert, then hc_post → the next stream;
 *   head    final hc collapse, norm, fp32 logits.
 */
import { GraphBuilder } from '../../onnx/graph-builder.js';
import type { LayerPlanEntry } from '../../config/layer-plan.js';
import { GraphOps } from './graph-ops.js';
import type { GraphContext } from './context.js';

/**
 * One expert's nodes into `o.g`: w2(bf16(weight · silu(w1 x) · w3 x)) with the SwiGLU limit, for the rows x
 * [rows, d] (bf16 values); `weight` [rows, 1] the rows' routing weights (null: the shared expert).
 */
export function emitExpert(o: GraphOps, ctx: GraphContext, x: string, name: string, weight: string | null): string {
  const { config: c, weights: w } = ctx;
  const g = o.g;
  const { dim: d, moeInterDim: I } = c;
  const L = c.swigluLimit;
  let gate = o.linear(x, `${name}_w1`, w.get(`${name}.w1.weight`), I, d);
  let up = o.linear(x, `${name}_w3`, w.get(`${name}.w3.weight`), I, d);
  if (L > 0) {
    up = g.clip(up, -L, L);
    gate = g.min(gate, g.scalar(L));
  }
  let h = g.mul(o.silu(gate), up);
  if (weight !== null) h = g.mul(weight, h);
  return o.linear(o.bf(h), `${name}_w2`, w.get(`${name}.w2.weight`), d, I);
}

/** moe: Inputs xf [S,d], X1 [S,n,d], f_post [S,n], f_comb [S,n,n], and per expert e: rows_e [n_e] int64, w_e [n_e,1]. */
export function buildMoeGraph(ctx: GraphContext, e: LayerPlanEntry): Uint8Array {
  const { config: c } = ctx;
  const p = `layers.${e.layer}.ffn`;
  const g = new GraphBuilder(`moe_${e.layer}`);
  const o = new GraphOps(g, ctx.mode, ctx.bf16Gemm === true);
  const { hcMult: n, dim: d } = c;
  const xf = g.input('xf', 'float32', ['S', d]);
  const X1 = g.input('X1', 'float32', ['S', n, d]);
  const post = g.input('f_post', 'float32', ['S', n]);
  const comb = g.input('f_comb', 'float32', ['S', n, n]);

  let y = g.op('ConstantOfShape', [g.op('Shape', [xf])], {});
  for (let ex = 0; ex < c.numRoutedExperts; ex++) {
    const rows = g.input(`rows_${ex}`, 'int64', [`n${ex}`]);
    const rw = g.input(`w_${ex}`, 'float32', [`n${ex}`, 1]);
    const out = emitExpert(o, ctx, g.gather(xf, rows), `${p}.experts.${ex}`, rw);
    y = g.op('ScatterND', [y, g.unsqueeze(rows, [-1]), out], { reduction: 'add' });
  }
  y = o.bf(g.add(y, emitExpert(o, ctx, xf, `${p}.shared_experts`, null)));
  g.output(o.hcPost(y, X1, post, comb), 'X2', 'float32', ['S', n, d]);
  return g.toBytes();
}

/** head: collapse the last block's stream with its ffn pre, final norm, fp32 logits. X [S,n,d], pre [S,n] → [S,V]. */
export function buildHeadGraph(ctx: GraphContext): Uint8Array {
  const { config: c, weights: w } = ctx;
  const g = new GraphBuilder('head');
  const o = new GraphOps(g, ctx.mode, ctx.bf16Gemm === true);
  const X = g.input('X', 'float32', ['S', c.hcMult, c.dim]);
  const pre = g.input('pre', 'float32', ['S', c.hcMult]);
  const h = o.rmsNorm(o.hcPre(X, pre), 'norm', w.get('norm.weight'), c.normEps);
  g.output(o.linearF32(h, 'head', w.get('head.weight'), c.vocabSize, c.dim), 'logits', 'float32', ['S', c.vocabSize]);
  return g.toBytes();
}
