/**
 * @module model/ffn/moe-gate
 * The MoE gate after its matrix product (trunk §3.1), in TypeScript with float32 arithmetic (every
 * operation rounded with Math.fround, as the reference's fp32 tensors are): score function, selection by
 * score + bias (the bias picks experts and is not part of their weights; ties: the lower expert id wins),
 * weights from the unbiased scores, normalized when norm_topk_prob, times route_scale. The logits
 * x·W^T (fp32) come from the attnOut graph. E numbers per token: cheaper here than as ONNX nodes, and
 * the routing is needed in TypeScript anyway, to group rows by expert.
 */
import type { ScoreFunc } from '../../config/model-config.js';
import { sigmoidF32, softplusF32 } from '../../numerics/f32.js';

const f = Math.fround;

export interface MoeGateParams {
  readonly scoreFunc: ScoreFunc;
  readonly gateTemp: number;
  readonly normTopKProb: boolean;
  readonly routeScale: number;
  /** Experts per token. */
  readonly k: number;
  /** [E] selection bias (fp32). */
  readonly bias: Float32Array;
}

export interface MoeRouting {
  /** [rows, k] expert ids, by descending biased score. */
  readonly experts: Int32Array;
  /** [rows, k] routing weights (fp32). */
  readonly weights: Float32Array;
}

/** Routes rows of gate logits [rows, E] (fp32 x·W^T) to k experts each. */
export function moeGate(logits: Float32Array, p: MoeGateParams): MoeRouting {
  const E = p.bias.length;
  if (logits.length % E !== 0) throw new Error(`moeGate: ${logits.length} logits is not a multiple of ${E} experts`);
  if (!(p.k >= 1 && p.k <= E)) throw new Error(`moeGate: cannot pick ${p.k} of ${E} experts`);
  const rows = logits.length / E;
  const { k } = p;
  const experts = new Int32Array(rows * k);
  const weights = new Float32Array(rows * k);
  const temp = f(p.gateTemp);
  const scores = new Float64Array(E); // float32 values
  const biased = new Float64Array(E);
  const order = Array.from({ length: E }, (_, i) => i);
  const routeScale = f(p.routeScale);
  for (let r = 0; r < rows; r++) {
    for (let e = 0; e < E; e++) scores[e] = temp === 1 ? (logits[r * E + e] as number) : f((logits[r * E + e] as number) / temp);
    if (p.scoreFunc === 'sqrtsoftplus') {
      for (let e = 0; e < E; e++) scores[e] = f(Math.sqrt(softplusF32(scores[e] as number)));
    } else if (p.scoreFunc === 'sigmoid') {
      for (let e = 0; e < E; e++) scores[e] = sigmoidF32(scores[e] as number);
    } else {
      let max = -Infinity;
      for (let e = 0; e < E; e++) max = Math.max(max, scores[e] as number);
      let sum = 0;
      for (let e = 0; e < E; e++) {
        scores[e] = f(Math.exp(f((scores[e] as number) - max)));
        sum = f(sum + (scores[e] as number));
      }
      for (let e = 0; e < E; e++) scores[e] = f((scores[e] as number) / sum);
    }
    for (let e = 0; e < E; e++) biased[e] = f((scores[e] as number) + (p.bias[e] as number));
    // the k best by biased score; equal scores: lower id first (a stable sort of ascending ids)
    order.sort((a, b) => (biased[b] as number) - (biased[a] as number) || a - b);
    let sum = 0;
    for (let j = 0; j < k; j++) {
      const e = order[j] as number;
      experts[r * k + j] = e;
      weights[r * k + j] = scores[e] as number;
      sum = f(sum + (scores[e] as number));
    }
    if (p.normTopKProb && k > 1) {
      const den = f(sum + f(1e-20));
      for (let j = 0; j < k; j++) weights[r * k + j] = f((weights[r * k + j] as number) / den);
    }
    for (let j = 0; j < k; j++) weights[r * k + j] = f((weights[r * k + j] as number) * routeScale);
  }
  return { experts, weights };
}
