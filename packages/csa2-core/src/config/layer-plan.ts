/**
 * @module config/layer-plan
 * The per-layer CSA2 schedule derived from a {@link ModelConfig}: which layers only use the sliding
 * window, which own a compressor (Full), which own only an indexer (Reindex) and which reuse both
 * (Reuse), and which earlier layer each one reads from.
 *
 * Semantics follow the official `Attention.__init__` (csa2 reference §1.1): a layer is a KV source when it
 * is in `kv_source_layers`, an index source when it is in `index_source_layers`, and a consumer reads the
 * MOST RECENT source through the global `shared_attn` slots ("layers run in order and every source writes
 * before its consumers read"). The checks of trunk reference §1.2 make sure that slot holds the right data.
 *
 * | ratio | KV source | index source | mode    |
 * |-------|-----------|--------------|---------|
 * | 0     | -         | -            | swa     |
 * | > 0   | yes       | (always)     | full    |
 * | > 0   | no        | yes          | reindex |
 * | > 0   | no        | no           | reuse   |
 */
import { ConfigError } from '../errors.js';
import type { ModelConfig } from './model-config.js';

export type LayerMode = 'swa' | 'full' | 'reindex' | 'reuse';

export interface LayerPlanEntry {
  readonly layer: number;
  readonly mode: LayerMode;
  readonly compressRatio: number; // tokens pooled into one compressed entry; 0 = sliding window only
  readonly isKvSource: boolean; // owns a compressor and writes the compressed KV
  readonly isIndexSource: boolean; // owns an indexer (query side) and publishes a top-k list
  readonly ownsIndexK: boolean; // writes the index-key cache (KV sources do)
  readonly kvSource: number | null; // layer whose compressed KV + index K this layer reads (itself when Full)
  readonly indexSource: number | null; // layer whose top-k list this layer uses (itself for full/reindex)
  readonly isCandidateSource: boolean; // publishes the HSI candidate mask
  readonly usesCandidates: boolean; // scores only inside the candidate source's blocks
  readonly ropeTheta: number; // compressRopeTheta when ratio > 0, else ropeTheta
  readonly yarn: boolean; // YaRN on: ratio > 0 and originalSeqLen > 0
}

export interface LayerPlan {
  readonly entries: readonly LayerPlanEntry[];
  readonly kvSourceLayers: readonly number[]; // ascending
  readonly indexSourceLayers: readonly number[]; // ascending
  readonly candidateSourceLayer: number | null; // null = HSI off
  /** First layer of the causal encoder-decoder split (first ratio-1 layer, a KV source, all later ratio 1), else null. */
  readonly decoderStart: number | null;
  readonly counts: Readonly<Record<LayerMode, number>>;
}

function latestAtOrBefore(sorted: readonly number[], layer: number): number | null {
  let out: number | null = null;
  for (const s of sorted) {
    if (s > layer) break;
    out = s;
  }
  return out;
}

function ratioOf(config: ModelConfig, layer: number): number {
  const r = config.compressRatios[layer];
  if (r === undefined) throw new ConfigError('compress_ratios', `has no entry for layer ${layer}`);
  return r;
}

function validateSources(config: ModelConfig): void {
  const index = new Set(config.indexSourceLayers);
  for (const s of config.kvSourceLayers) {
    if (ratioOf(config, s) === 0) throw new ConfigError('kv_source_layers', `layer ${s} is a KV source but has compress ratio 0`);
    if (!index.has(s)) {
      throw new ConfigError('index_source_layers', `must include every KV source (KV sources own the index keys); layer ${s} is missing`);
    }
  }
  for (const s of config.indexSourceLayers) {
    if (ratioOf(config, s) === 0) throw new ConfigError('index_source_layers', `layer ${s} is an index source but has compress ratio 0`);
  }
}

function validateConsumer(config: ModelConfig, layer: number, ratio: number, kvSource: number | null, indexSource: number | null): void {
  if (kvSource === null) {
    throw new ConfigError('kv_source_layers', `layer ${layer} has compress ratio ${ratio} but no KV source at or before it`);
  }
  const kvRatio = ratioOf(config, kvSource);
  if (kvRatio !== ratio) {
    throw new ConfigError(
      'kv_source_layers',
      `layer ${layer} (compress ratio ${ratio}) would read the compressed KV of layer ${kvSource} (compress ratio ${kvRatio}); the latest KV source must have the same ratio`,
    );
  }
  if (indexSource === null) {
    throw new ConfigError('index_source_layers', `layer ${layer} has compress ratio ${ratio} but no index source at or before it`);
  }
  const idxRatio = ratioOf(config, indexSource);
  if (idxRatio !== ratio) {
    throw new ConfigError(
      'index_source_layers',
      `layer ${layer} (compress ratio ${ratio}) would use the top-k of layer ${indexSource} (compress ratio ${idxRatio}); the latest index source must have the same ratio`,
    );
  }
}

function findDecoderStart(config: ModelConfig): number | null {
  const first = config.compressRatios.indexOf(1);
  if (first < 0 || !config.kvSourceLayers.includes(first)) return null;
  return config.compressRatios.slice(first).every((r) => r === 1) ? first : null;
}

/**
 * Derives the per-layer schedule and validates it. Throws {@link ConfigError} naming `kv_source_layers`,
 * `index_source_layers` or `candidate_source_layer` and the offending layer when a layer would read a
 * shared slot that is empty or holds data of another compress ratio.
 *
 * @example
 * const plan = buildLayerPlan(config);
 * plan.entries[25]; // { mode: 'reuse', kvSource: 20, indexSource: 24, ... } for the released schedule
 */
export function buildLayerPlan(config: ModelConfig): LayerPlan {
  validateSources(config);
  const kvSet = new Set(config.kvSourceLayers);
  const indexSet = new Set(config.indexSourceLayers);
  const cand = config.candidateSourceLayer;
  if (cand >= 0) {
    if (!indexSet.has(cand)) throw new ConfigError('candidate_source_layer', `layer ${cand} must be an index source`);
  }
  const candRatio = cand >= 0 ? ratioOf(config, cand) : 0;

  const entries: LayerPlanEntry[] = [];
  const counts: Record<LayerMode, number> = { swa: 0, full: 0, reindex: 0, reuse: 0 };
  for (let layer = 0; layer < config.numLayers; layer++) {
    const ratio = ratioOf(config, layer);
    const isKvSource = kvSet.has(layer);
    const isIndexSource = indexSet.has(layer);
    let mode: LayerMode;
    let kvSource: number | null = null;
    let indexSource: number | null = null;
    if (ratio === 0) {
      mode = 'swa';
    } else {
      mode = isKvSource ? 'full' : isIndexSource ? 'reindex' : 'reuse';
      kvSource = latestAtOrBefore(config.kvSourceLayers, layer);
      indexSource = latestAtOrBefore(config.indexSourceLayers, layer);
      validateConsumer(config, layer, ratio, kvSource, indexSource);
    }
    const usesCandidates = isIndexSource && cand >= 0 && cand < layer;
    if (usesCandidates && ratio !== candRatio) {
      throw new ConfigError(
        'candidate_source_layer',
        `layer ${layer} (compress ratio ${ratio}) would use the candidates of layer ${cand} (compress ratio ${candRatio}); consumers must share its ratio`,
      );
    }
    counts[mode]++;
    entries.push(
      Object.freeze({
        layer,
        mode,
        compressRatio: ratio,
        isKvSource,
        isIndexSource,
        ownsIndexK: isKvSource,
        kvSource,
        indexSource,
        isCandidateSource: layer === cand,
        usesCandidates,
        ropeTheta: ratio > 0 ? config.compressRopeTheta : config.ropeTheta,
        yarn: ratio > 0 && config.originalSeqLen > 0,
      }),
    );
  }
  return Object.freeze({
    entries: Object.freeze(entries),
    kvSourceLayers: config.kvSourceLayers,
    indexSourceLayers: config.indexSourceLayers,
    candidateSourceLayer: cand >= 0 ? cand : null,
    decoderStart: findDecoderStart(config),
    counts: Object.freeze(counts),
  });
}

/**
 * Tokens an encoder that continues after a stored prefix at position p re-runs before p, [p − n, p),
 * so that every encoder layer's sliding window over [p − W + 1, p) holds exactly what a straight
 * encode from position 0 holds there.
 *
 * Layer l's window rows at positions t are computed from layer l's input at t, and that input depends
 * on layer l − 1's window, i.e. on layer l − 1's input over [t − W + 1, t]. Replaying from s with
 * empty windows, layer l's input is exact at t iff t − s ≥ l · (W − 1) (layer 0's input, the token
 * embedding, is exact everywhere). The rows the continuation reads, [p − W + 1, p) in the last encoder
 * layer E − 1, are therefore exact iff s ≤ p − E · (W − 1). Nothing else an encoder row depends on is
 * carried between rows: the compressed global KV before p is loaded as stored, groups never span a
 * chunk boundary (chunks hold whole groups), and the hyper-connection streams are per row.
 *
 * 2,540 tokens at the released configuration (20 encoder layers, window 128); 0 for a schedule without
 * an encoder–decoder split.
 */
export function encoderContinuationTokens(plan: LayerPlan, windowSize: number): number {
  const E = plan.decoderStart ?? 0;
  return E * Math.max(0, windowSize - 1);
}
