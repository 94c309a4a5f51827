/**
 * @module layout
 * The artifact layout: everything about a model that decides the bytes of a cache artifact, and
 * nothing else. Two encoders with equal layouts (and equal model ids) write byte-identical chunks.
 *
 * - `modelId`: chosen by the caller (e.g. a hex digest of the weights), printable ASCII, 1..64 chars.
 * - `layoutId`: 16 hex chars, the first 8 bytes of SHA-256 over a canonical text of headDim,
 *   indexHeadDim, the ordered KV-source (layer, ratio) list and the candidate block size in tokens.
 * - Per KV-source layer of ratio m, entry j pools tokens [j·m, (j+1)·m); a chunk covering tokens
 *   [start, end) holds the entries completed inside it, [floor(start/m), floor(end/m)).
 * - `chunkTokens` (C) must be a positive multiple of every ratio and of the candidate block size in
 *   tokens, so every full chunk holds whole entries and whole candidate blocks.
 */
import { createHash } from 'node:crypto';
import { ConfigError, INDEX_K_BLOCK_ELEMENTS, MAIN_KV_BLOCK_ELEMENTS, type LayerPlan, type ModelConfig } from '@csa2/core';

/** Default tokens per chunk object. */
export const DEFAULT_CHUNK_TOKENS = 4096;
/** Longest model id (bytes of ASCII). */
export const MAX_MODEL_ID_CHARS = 64;

const MODEL_ID_PATTERN = /^[\x21-\x7E]{1,64}$/;

/** One KV-source layer: its layer index and compress ratio (tokens per entry). */
export interface KvSourceSpec {
  readonly layer: number;
  readonly ratio: number;
}

/** What decides the bytes of an artifact. Build with {@link artifactLayout} or {@link createArtifactLayout}. */
export interface ArtifactLayout {
  readonly modelId: string;
  /**
   * The encoder implementation that writes chunks under this layout: '' for the reference encoder
   * (onnxruntime's CPU provider), else a short name ('cuda-g4096': @csa2/core encoderLayoutName). It enters every chunk key (format/chunk-key),
   * so encoders whose numerics differ never share chunks, while any reader of the model reads them all:
   * a manifest names the encoder of its chunks.
   */
  readonly encoder: string;
  readonly layoutId: string;
  /** Ascending by layer. */
  readonly kvSources: readonly KvSourceSpec[];
  readonly headDim: number;
  readonly indexHeadDim: number;
  /** Tokens per candidate block (candidate_block_size × the candidate source's ratio); 0 when HSI is off. */
  readonly candidateBlockTokens: number;
  /** Packed main-KV row: headDim/2 FP4 payload + headDim/16 E4M3 scales (288 at 512). */
  readonly mainKvRowBytes: number;
  /** Packed index-K row: indexHeadDim/2 FP4 payload + indexHeadDim/32 UE8M0 scales (68 at 128). */
  readonly indexKRowBytes: number;
}

/** The inputs of a layout when there is no ModelConfig at hand (tests, tools). */
export interface ArtifactLayoutSpec {
  readonly modelId: string;
  /** @defaultValue '' (the reference encoder) */
  readonly encoder?: string;
  readonly headDim: number;
  readonly indexHeadDim: number;
  readonly kvSources: readonly KvSourceSpec[];
  /** @defaultValue 0 (no candidate blocks) */
  readonly candidateBlockTokens?: number;
}

const ENCODER_PATTERN = /^([a-z0-9][a-z0-9-]{0,15})?$/;

/** Refuses an encoder name that is not '' or 1..16 of [a-z0-9-] (starting with a letter or digit). */
export function validateEncoderName(encoder: string): string {
  if (typeof encoder !== 'string' || !ENCODER_PATTERN.test(encoder)) {
    throw new ConfigError('encoder', `must be empty or 1..16 characters of a-z, 0-9 and '-', got ${JSON.stringify(encoder)}`);
  }
  return encoder;
}

/** Refuses a model id that is not 1..64 printable ASCII characters (no spaces). */
export function validateModelId(modelId: string): string {
  if (typeof modelId !== 'string' || !MODEL_ID_PATTERN.test(modelId)) {
    throw new ConfigError('modelId', `must be 1..${MAX_MODEL_ID_CHARS} printable ASCII characters without spaces, got ${JSON.stringify(modelId)}`);
  }
  return modelId;
}

function positiveInt(field: string, value: number, multipleOf = 1): number {
  if (!Number.isSafeInteger(value) || value <= 0 || value % multipleOf !== 0) {
    const what = multipleOf > 1 ? `a positive multiple of ${multipleOf}` : 'a positive integer';
    throw new ConfigError(field, `must be ${what}, got ${value}`);
  }
  return value;
}

function canonicalLayoutText(headDim: number, indexHeadDim: number, kvSources: readonly KvSourceSpec[], candidateBlockTokens: number): string {
  const sources = kvSources.map((s) => `${s.layer}:${s.ratio}`).join(',');
  return `csa2-layout/v1 headDim=${headDim} indexHeadDim=${indexHeadDim} kvSources=${sources} candidateBlockTokens=${candidateBlockTokens}`;
}

/**
 * A layout from explicit dims (validated: headDim a multiple of 16, indexHeadDim of 32, layers
 * ascending and distinct, ratios positive integers, at least one KV source).
 *
 * @example
 * const layout = createArtifactLayout({ modelId: 'test', headDim: 32, indexHeadDim: 32, kvSources: [{ layer: 1, ratio: 2 }] });
 */
export function createArtifactLayout(spec: ArtifactLayoutSpec): ArtifactLayout {
  const modelId = validateModelId(spec.modelId);
  const encoder = validateEncoderName(spec.encoder ?? '');
  const headDim = positiveInt('headDim', spec.headDim, MAIN_KV_BLOCK_ELEMENTS);
  const indexHeadDim = positiveInt('indexHeadDim', spec.indexHeadDim, INDEX_K_BLOCK_ELEMENTS);
  if (headDim > 0xffff || indexHeadDim > 0xffff) throw new ConfigError('headDim', `head dims above 65535 do not fit the chunk header`);
  if (spec.kvSources.length === 0) throw new ConfigError('kvSources', 'an artifact needs at least one KV-source layer');
  let previous = -1;
  const kvSources = spec.kvSources.map((s, i) => {
    if (!Number.isSafeInteger(s.layer) || s.layer <= previous || s.layer > 0xffff) {
      throw new ConfigError(`kvSources[${i}].layer`, `layers must be distinct integers in ascending order (0..65535), got ${s.layer} after ${previous}`);
    }
    previous = s.layer;
    positiveInt(`kvSources[${i}].ratio`, s.ratio);
    if (s.ratio > 0xffff) throw new ConfigError(`kvSources[${i}].ratio`, `must be at most 65535, got ${s.ratio}`);
    return Object.freeze({ layer: s.layer, ratio: s.ratio });
  });
  const candidateBlockTokens = spec.candidateBlockTokens ?? 0;
  if (!Number.isSafeInteger(candidateBlockTokens) || candidateBlockTokens < 0) {
    throw new ConfigError('candidateBlockTokens', `must be a non-negative integer, got ${candidateBlockTokens}`);
  }
  const layoutId = createHash('sha256')
    .update(canonicalLayoutText(headDim, indexHeadDim, kvSources, candidateBlockTokens), 'ascii')
    .digest('hex')
    .slice(0, 16);
  return Object.freeze({
    modelId,
    encoder,
    layoutId,
    kvSources: Object.freeze(kvSources),
    headDim,
    indexHeadDim,
    candidateBlockTokens,
    mainKvRowBytes: headDim / 2 + headDim / MAIN_KV_BLOCK_ELEMENTS,
    indexKRowBytes: indexHeadDim / 2 + indexHeadDim / INDEX_K_BLOCK_ELEMENTS,
  });
}

/**
 * The layout of a parsed model config and its layer plan. The candidate block size enters in tokens:
 * `candidateBlockSize` counts compressed positions of the candidate source, so it is scaled by that
 * layer's ratio (1 in the released schedule, where both readings agree).
 *
 * @example
 * const layout = artifactLayout(config, buildLayerPlan(config), weightsDigestHex);
 * bytesPerToken(layout); // 890 for DeepSeek-V4.1-Flash
 */
export function artifactLayout(config: ModelConfig, plan: LayerPlan, modelId: string, encoder = ''): ArtifactLayout {
  const kvSources = plan.kvSourceLayers.map((layer) => ({ layer, ratio: plan.entries[layer]?.compressRatio ?? 0 }));
  const candLayer = plan.candidateSourceLayer;
  const candRatio = candLayer === null ? 0 : (plan.entries[candLayer]?.compressRatio ?? 0);
  const candidateBlockTokens = candLayer === null ? 0 : config.candidateBlockSize * candRatio;
  return createArtifactLayout({ modelId, encoder, headDim: config.headDim, indexHeadDim: config.indexHeadDim, kvSources, candidateBlockTokens });
}

/** Average artifact payload bytes per token: Σ over KV-source layers of (main row + index row) / ratio. */
export function bytesPerToken(layout: ArtifactLayout): number {
  let total = 0;
  for (const s of layout.kvSources) total += (layout.mainKvRowBytes + layout.indexKRowBytes) / s.ratio;
  return total;
}

/**
 * Refuses a chunk size that is not a positive multiple of every compress ratio and of the candidate
 * block size in tokens; returns it otherwise.
 */
export function validateChunkTokens(layout: ArtifactLayout, chunkTokens: number): number {
  if (!Number.isSafeInteger(chunkTokens) || chunkTokens <= 0) {
    throw new ConfigError('chunkTokens', `must be a positive integer, got ${chunkTokens}`);
  }
  for (const s of layout.kvSources) {
    if (chunkTokens % s.ratio !== 0) {
      throw new ConfigError(
        'chunkTokens',
        `must be a multiple of every compress ratio; ${chunkTokens} is not a multiple of ratio ${s.ratio} (layer ${s.layer})`,
      );
    }
  }
  if (layout.candidateBlockTokens > 0 && chunkTokens % layout.candidateBlockTokens !== 0) {
    throw new ConfigError(
      'chunkTokens',
      `must be a multiple of the candidate block size; ${chunkTokens} is not a multiple of ${layout.candidateBlockTokens} tokens`,
    );
  }
  if (chunkTokens >= 2 ** 32) throw new ConfigError('chunkTokens', `must be below 2^32, got ${chunkTokens}`);
  return chunkTokens;
}

/** Entries of a ratio-m source held by the chunk [startToken, endToken): those completed inside it. */
export function chunkEntryRange(ratio: number, startToken: number, endToken: number): { readonly firstEntry: number; readonly entryCount: number } {
  const firstEntry = Math.floor(startToken / ratio);
  return { firstEntry, entryCount: Math.floor(endToken / ratio) - firstEntry };
}
