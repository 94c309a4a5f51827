/**
 * @module model/ffn/ffn
 * A layer's MoE feed-forward over a batch of rows (trunk §3): the gate routes each row to k experts
 * (model/ffn/moe-gate, TypeScript), rows are grouped by expert (ascending expert id, rows ascending within
 * one), and the moe graph runs every expert on its rows plus the shared expert, then hc_post. Rows of
 * different sequences share the experts' matrix products; each row's result does not depend on the
 * others (per-row products, a fixed accumulation order).
 */
import type { ModelConfig } from '../../config/model-config.js';
import { f32, i64, type TensorOf } from '../../runtime/ort-session.js';
import { splitMixes, type HcSplitParams } from '../hc/hc-sinkhorn.js';
import { moeGate, type MoeGateParams, type MoeRouting } from './moe-gate.js';
import type { LayerPlanEntry } from '../../config/layer-plan.js';
import type { ATTN_OUT, MoeSignature } from '../graphs/signatures.js';
import type { OutputsOf, TypedGraph } from '../graphs/graph-io.js';

/** A layer's graphs and parameters the feed-forward reads (LayerGraphs has them). */
export interface FfnGraphs {
  readonly entry: LayerPlanEntry;
  readonly moe: TypedGraph<MoeSignature>;
  /** hc_split_sinkhorn parameters of the FFN mix. */
  readonly hcFfn: HcSplitParams;
  readonly gate: MoeGateParams;
}

export interface FfnOutput {
  /** The stream after the layer [R, n, d]. */
  readonly X: Float32Array;
  /** The collapse mix for the next layer's input [R, n]. */
  readonly pre: Float32Array;
  readonly routing: MoeRouting;
}

export async function runFfn(config: ModelConfig, lg: FfnGraphs, rows: number, attn: OutputsOf<typeof ATTN_OUT>): Promise<FfnOutput> {
  const { hcMult: n } = config;
  const routing = moeGate(attn.gate_logits.data, lg.gate);
  const { experts, weights } = routing;
  const k = config.numActivatedExperts;
  const E = config.numRoutedExperts;
  const counts = new Int32Array(E);
  for (let i = 0; i < rows * k; i++) counts[experts[i] as number] = (counts[experts[i] as number] as number) + 1;
  // rows ascending within an expert: a row appears at most once per expert, so one pass in row order
  const rowsOf = Array.from({ length: E }, (_, ex) => new BigInt64Array(counts[ex] as number));
  const wOf = Array.from({ length: E }, (_, ex) => new Float32Array(counts[ex] as number));
  const fill = new Int32Array(E);
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < k; j++) {
      const ex = experts[r * k + j] as number;
      const at = fill[ex] as number;
      fill[ex] = at + 1;
      (rowsOf[ex] as BigInt64Array)[at] = BigInt(r);
      (wOf[ex] as Float32Array)[at] = weights[r * k + j] as number;
    }
  }
  const fMix = splitMixes(attn.f_pre, attn.f_post, attn.f_comb, attn.f_mix, lg.hcFfn, `attn_out_${lg.entry.layer}`);
  const perExpert: Record<string, TensorOf<'int64'> | TensorOf<'float32'>> = {};
  for (let ex = 0; ex < E; ex++) {
    const count = counts[ex] as number;
    perExpert[`rows_${ex}`] = i64(rowsOf[ex] as BigInt64Array, [count]);
    perExpert[`w_${ex}`] = f32(wOf[ex] as Float32Array, [count, 1]);
  }
  const out = await lg.moe.run({
    xf: attn.xf,
    X1: attn.X1,
    f_post: f32(fMix.post, [rows, n]),
    f_comb: f32(fMix.comb, [rows, n, n]),
    ...(perExpert as Record<`rows_${number}`, TensorOf<'int64'>> & Record<`w_${number}`, TensorOf<'float32'>>),
  });
  return { X: out.X2.data, pre: fMix.pre, routing };
}
