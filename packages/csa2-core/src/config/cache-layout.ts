/**
 * @module config/cache-layout
 * Byte sizes of the packed cache rows (csa2 reference §1.2, §2.3):
 *
 * | row               | payload                         | scales                              | bytes at V4.1-Flash |
 * |-------------------|---------------------------------|-------------------------------------|---------------------|
 * | main compressed KV| headDim FP4 E2M1 (headDim/2 B)  | one E4M3 byte per 16 (headDim/16 B) | 256 + 32 = 288      |
 * | index K           | indexHeadDim FP4 (indexHeadDim/2)| one UE8M0 byte per 32               | 64 + 4 = 68         |
 * | sliding-window KV | headDim FP8 E4M3 (headDim B)    | one UE8M0 byte per 32               | 512 + 16 = 528      |
 *
 * The global (compressed) cache holds one main-KV row and one index-K row per `ratio` tokens for every
 * KV-source layer; consumers read the source's rows, so they add nothing. The sliding window is a fixed
 * ring per layer and is not part of the per-token global cache.
 */
import type { LayerPlan } from './layer-plan.js';
import type { ModelConfig } from './model-config.js';

/** Elements sharing one E4M3 scale in a main compressed-KV row. */
export const MAIN_KV_SCALE_BLOCK = 16;
/** Elements sharing one UE8M0 scale in an index-K row and in a window-KV row. */
export const INDEX_K_SCALE_BLOCK = 32;
export const WINDOW_KV_SCALE_BLOCK = 32;

/** Bytes of one packed main compressed-KV row: FP4 payload + one E4M3 scale per 16 values. */
export function mainKvRowBytes(config: ModelConfig): number {
  return config.headDim / 2 + config.headDim / MAIN_KV_SCALE_BLOCK;
}

/** Bytes of one packed index-K row: FP4 payload + one UE8M0 scale per 32 values. */
export function indexKRowBytes(config: ModelConfig): number {
  return config.indexHeadDim / 2 + config.indexHeadDim / INDEX_K_SCALE_BLOCK;
}

/** Bytes of one packed sliding-window KV row: FP8 payload + one UE8M0 scale per 32 values. */
export function windowKvRowBytes(config: ModelConfig): number {
  return config.headDim + config.headDim / WINDOW_KV_SCALE_BLOCK;
}

/**
 * Average global-cache bytes per token: sum over KV-source layers of (main + index row) / ratio.
 * Fractional when a ratio does not divide the row size evenly.
 *
 * @example
 * globalCacheBytesPerToken(released, buildLayerPlan(released)); // 890
 */
export function globalCacheBytesPerToken(config: ModelConfig, plan: LayerPlan): number {
  const rowBytes = mainKvRowBytes(config) + indexKRowBytes(config);
  let total = 0;
  for (const layer of plan.kvSourceLayers) {
    const ratio = plan.entries[layer]?.compressRatio ?? 0;
    if (ratio > 0) total += rowBytes / ratio;
  }
  return total;
}

/** Exact global-cache bytes after `seqLenTokens` tokens: floor(seqLen / ratio) complete rows per KV source. */
export function globalCacheBytes(config: ModelConfig, plan: LayerPlan, seqLenTokens: number): number {
  const rowBytes = mainKvRowBytes(config) + indexKRowBytes(config);
  let total = 0;
  for (const layer of plan.kvSourceLayers) {
    const ratio = plan.entries[layer]?.compressRatio ?? 0;
    if (ratio > 0) total += Math.floor(seqLenTokens / ratio) * rowBytes;
  }
  return total;
}

/** Bytes of every layer's sliding-window ring (windowSize rows per layer), independent of the sequence length. */
export function windowCacheBytes(config: ModelConfig): number {
  return config.numLayers * config.windowSize * windowKvRowBytes(config);
}
