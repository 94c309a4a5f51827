/**
 * @module flops
 * Analytic FLOP counts of the DeepSeek-V4.1 (CSA2) forward pass, from the config and layer plan alone,
 * so that measured times become achieved GFLOP/s. One multiply-add is 2 FLOPs. Only matrix products are
 * counted (norms, RoPE, quantizers, softmax, Sinkhorn and other elementwise work are not): these are
 * "model FLOPs", the work a perfect kernel could not skip, not what the ONNX graphs happen to execute
 * (they also score masked-out indexer columns and pad attention to blocks of 64).
 *
 * Symbols: d = dim, n = hc_mult, H = n_heads, D = head_dim, qL = q_lora_rank, G = o_groups,
 * R = o_lora_rank, hI = index_n_heads, dI = index_head_dim, E = n_routed_experts, k = n_activated_experts,
 * I = moe_inter_dim, V = vocab_size, W = window_size, K = index_topk, m = the layer's compress ratio.
 *
 * Per token, every layer (`denseLayerFlopsPerToken`):
 *
 * | term                         | FLOPs                                  |
 * |------------------------------|----------------------------------------|
 * | hc mixes (attn + ffn)        | 2 · 2·(n·d)·((2+n)·n)                  |
 * | wq_a, wq_b                   | 2·d·qL + 2·qL·H·D                      |
 * | wkv (window KV)              | 2·d·D                                  |
 * | wo_a (grouped), wo_b         | 2·H·D·R + 2·G·R·d                      |
 * | MoE gate                     | 2·d·E                                  |
 * | experts: k routed + 1 shared | (k+1) · 3 · 2·d·I                      |
 * | KV source: compressor proj.  | 2·d·D (m = 1) or 2 · 2·d·D (m > 1: wkv, wgate) |
 * | index source: q proj, weights| 2·qL·hI·dI + 2·d·hI                    |
 *
 * Per token t (0-based position), depending on context (`rowFlops`):
 *
 * | term                          | FLOPs                                                     |
 * |-------------------------------|-----------------------------------------------------------|
 * | attention (QK and PV)         | 4·H·D · (min(W, t − w0 + 1) + [m > 0] · min(K, ⌊(t+1)/m⌋)) |
 * | indexer scores (index sources)| 2·hI·dI · ⌊(t+1)/m⌋  (every visible compressed entry)       |
 *
 * where w0 is the first position whose window row this forward call (re)built: 0 for exact prefill,
 * encode and decode steps after them, the replay start for a decoder replay.
 *
 * Per compressed entry a KV source completes: index-key projection wk, 2·D·dI (`compressorEntryFlops`).
 * Per logits row: the head, 2·d·V. Exact prefill and decode steps compute one logits row per call.
 */
import type { LayerPlan, LayerPlanEntry, ModelConfig } from '@csa2/core';

/** Compressor projections of a KV source, per token: wkv, plus wgate when it pools groups (m > 1). */
export function compressorProjectionFlopsPerToken(c: ModelConfig, e: LayerPlanEntry): number {
  if (!e.isKvSource) return 0;
  const projections = e.compressRatio > 1 ? 2 : 1;
  return projections * 2 * c.dim * c.headDim;
}

/** Index-key projection (wk) per compressed entry a KV source completes. */
export function compressorEntryFlops(c: ModelConfig, e: LayerPlanEntry): number {
  return e.isKvSource ? 2 * c.headDim * c.indexHeadDim : 0;
}

/** The position-independent FLOPs of one token through layer `e` (first table of the module header). */
export function denseLayerFlopsPerToken(c: ModelConfig, e: LayerPlanEntry): number {
  const { dim: d, hcMult: n, numHeads: H, headDim: D, qLoraRank: qL, oGroups: G, oLoraRank: R } = c;
  const hcMixes = 2 * (2 * (n * d) * ((2 + n) * n));
  const attention = 2 * d * qL + 2 * qL * H * D + 2 * d * D + 2 * H * D * R + 2 * G * R * d;
  const moe = 2 * d * c.numRoutedExperts + (c.numActivatedExperts + 1) * 3 * 2 * d * c.moeInterDim;
  const indexer = e.isIndexSource ? 2 * qL * c.indexNumHeads * c.indexHeadDim + 2 * d * c.indexNumHeads : 0;
  return hcMixes + attention + moe + compressorProjectionFlopsPerToken(c, e) + indexer;
}

/** Compressed entries visible to the query at position t in a layer of ratio m. */
export function visibleEntries(t: number, m: number): number {
  return m > 0 ? Math.floor((t + 1) / m) : 0;
}

/** Keys one query at position t attends to: its window (rebuilt from w0) plus its top-k compressed entries. */
export function attendedKeys(c: ModelConfig, m: number, t: number, windowStart: number): number {
  const windowKeys = Math.min(c.windowSize, t - windowStart + 1);
  return windowKeys + (m > 0 ? Math.min(c.indexTopK, visibleEntries(t, m)) : 0);
}

/** The position-dependent FLOPs of the token at position t in layer `e` (second table of the module header). */
export function rowFlops(c: ModelConfig, e: LayerPlanEntry, t: number, windowStart: number): number {
  const m = e.compressRatio;
  const attention = 4 * c.numHeads * c.headDim * attendedKeys(c, m, t, windowStart);
  const scores = e.isIndexSource ? 2 * c.indexNumHeads * c.indexHeadDim * visibleEntries(t, m) : 0;
  return attention + scores;
}

/** The head: one logits row. */
export function headFlops(c: ModelConfig): number {
  return 2 * c.dim * c.vocabSize;
}

export interface SpanSpec {
  /** Token positions [start, end) run through the layers. */
  readonly start: number;
  readonly end: number;
  /** Layers [l0, l1). */
  readonly layers: readonly [number, number];
  /** First position whose window row this call rebuilt (0 unless replaying). */
  readonly windowStart: number;
  /** Whether KV sources complete (and so project) new compressed entries in this span. @defaultValue true */
  readonly newEntries?: boolean;
}

/** FLOPs of running positions [start, end) through layers [l0, l1), without the head. */
export function spanFlops(c: ModelConfig, plan: LayerPlan, span: SpanSpec): number {
  const { start, end, windowStart } = span;
  const [l0, l1] = span.layers;
  const tokens = end - start;
  let total = 0;
  for (let l = l0; l < l1; l++) {
    const e = plan.entries[l];
    if (e === undefined) throw new RangeError(`layer ${l} is not in the plan (${plan.entries.length} layers)`);
    total += tokens * denseLayerFlopsPerToken(c, e);
    for (let t = start; t < end; t++) total += rowFlops(c, e, t, windowStart);
    if (e.isKvSource && span.newEntries !== false) {
      const m = e.compressRatio;
      total += (Math.floor(end / m) - Math.floor(start / m)) * compressorEntryFlops(c, e);
    }
  }
  return total;
}

/** Exact prefill of `tokens` positions (all layers, one segment) plus the head's one logits row. */
export function exactPrefillFlops(c: ModelConfig, plan: LayerPlan, tokens: number): number {
  return spanFlops(c, plan, { start: 0, end: tokens, layers: [0, c.numLayers], windowStart: 0 }) + headFlops(c);
}

/** First decoder layer, or an error for schedules without an encoder–decoder split. */
function decoderStartOf(plan: LayerPlan): number {
  if (plan.decoderStart === null) throw new RangeError('this layer schedule has no encoder–decoder split');
  return plan.decoderStart;
}

/**
 * Encoder-only prefill of `tokens` positions from an empty sequence: the encoder layers [0, dec), then
 * layer dec's compressor projection on every token and its index-key projection per completed entry
 * (what `Csa2Model.encode` runs). No head.
 */
export function encodeFlops(c: ModelConfig, plan: LayerPlan, tokens: number): number {
  const dec = decoderStartOf(plan);
  const e = plan.entries[dec] as LayerPlanEntry;
  const encoder = spanFlops(c, plan, { start: 0, end: tokens, layers: [0, dec], windowStart: 0 });
  const entries = Math.floor(tokens / e.compressRatio);
  return encoder + tokens * compressorProjectionFlopsPerToken(c, e) + entries * compressorEntryFlops(c, e);
}

/**
 * Decoder replay over the last `replayTokens` of `tokens` encoded positions (their compressed entries
 * already exist), plus the head's one logits row.
 */
export function decoderReplayFlops(c: ModelConfig, plan: LayerPlan, tokens: number, replayTokens: number): number {
  const dec = decoderStartOf(plan);
  const start = tokens - Math.min(replayTokens, tokens);
  return spanFlops(c, plan, { start, end: tokens, layers: [dec, c.numLayers], windowStart: start, newEntries: false }) + headFlops(c);
}

/** One decode step at position `position` (the sequence holds `position` tokens before it), head included. */
export function decodeStepFlops(c: ModelConfig, plan: LayerPlan, position: number): number {
  return spanFlops(c, plan, { start: position, end: position + 1, layers: [0, c.numLayers], windowStart: 0 }) + headFlops(c);
}
