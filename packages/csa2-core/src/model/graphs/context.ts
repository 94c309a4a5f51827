/**
 * @module model/graphs/context
 * What every graph builder takes: the config, the weights (by official state_dict name) and the
 * numerics mode; plus the attention column count shared by builders and the model code.
 */
import type { ModelConfig } from '../../config/model-config.js';
import { ATTENTION_BLOCK, type NumericsMode } from './graph-ops.js';

/** Weights by official state_dict name, as float32 (bf16 values widened exactly). */
export interface WeightSource {
  get(name: string): Float32Array;
}

export interface GraphContext {
  readonly config: ModelConfig;
  readonly weights: WeightSource;
  readonly mode: NumericsMode;
  /**
   * Run the bf16 linears as bf16 GEMMs (bf16 inputs and weights, fp32 accumulation, one rounding to
   * bf16 of the result: the reference's F.linear on bf16 tensors, on tensor cores) instead of fp32
   * MatMuls of bf16 values rounded after. For the CUDA provider; the CPU keeps fp32 MatMuls (its
   * accumulation order is the exact reference path's). @defaultValue false
   */
  readonly bf16Gemm?: boolean;
  /**
   * attnIn and attnOut split their hc mixes in the graph (GraphOps.hcSplitSinkhorn: a_pre/a_post/a_comb
   * and f_pre/f_post/f_comb outputs) instead of returning the mixes for model/hc/hc-sinkhorn. For the CUDA
   * provider's large prefill spans. @defaultValue false
   */
  readonly sinkhornInGraph?: boolean;
}

/** Number of 64-entry attention blocks a layer's index list is padded to, in columns. */
export function attentionColumns(config: ModelConfig, ratio: number): number {
  const raw = config.windowSize + (ratio > 0 ? config.indexTopK : 0);
  return Math.ceil(raw / ATTENTION_BLOCK) * ATTENTION_BLOCK;
}
