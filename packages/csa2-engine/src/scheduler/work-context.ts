/**
 * @module scheduler/work-context
 * What work items need from their engine: the model, its tokenizer, the artifact layout, store and
 * chunk cache, and the memory a sequence of a given length holds.
 */
import type { ArtifactLayout, ChunkCache, ObjectStore } from '@csa2/artifacts';
import type { Csa2Model, Tokenizer } from '@csa2/core';
import type { DocumentCache } from './document-cache.js';

export interface WorkContext {
  readonly model: Csa2Model;
  readonly tokenizer: Tokenizer;
  readonly layout: ArtifactLayout;
  readonly cache: ChunkCache;
  /** Loaded documents shared by the questions on them (scheduler/document-cache). */
  readonly documents: DocumentCache;
  /** The artifact store; throws InputError when the engine has none. */
  requireStore(): ObjectStore;
  /** Tokens per artifact chunk for documents this engine writes. */
  readonly chunkTokens: number;
  /** Bytes of attention tables a decoder-replay chunk may take (SchedulerPolicy.replayChunkBytes). */
  readonly replayChunkBytes: number;
  /** A work finished or became runnable outside a step (its I/O completed): let the loop look again. */
  wake(): void;
}

/** Bytes of the packed global cache (every KV source's rows) of `tokens` tokens: what a loaded document shares. */
export function globalCacheBytes(model: Csa2Model, tokens: number): number {
  const c = model.config;
  let bytes = 0;
  for (const e of model.plan.entries) {
    if (!e.isKvSource) continue;
    bytes += Math.floor(tokens / e.compressRatio) * (c.headDim / 2 + c.headDim / 16 + c.indexHeadDim / 2 + c.indexHeadDim / 32);
  }
  return bytes;
}

/**
 * Bytes a sequence of `tokens` tokens holds: the packed global cache of every KV source (the artifact's
 * row bytes) except the rows of its first `sharedTokens` tokens when it reads them from a shared
 * document (document-cache), every layer's window ring (float32 rows and their positions), the
 * compressors' open groups, the u32 token ids.
 */
export function sequenceBytes(model: Csa2Model, tokens: number, sharedTokens = 0): number {
  const c = model.config;
  let bytes = tokens * 4 + globalCacheBytes(model, tokens) - globalCacheBytes(model, sharedTokens);
  for (const e of model.plan.entries) if (e.isKvSource) bytes += 2 * e.compressRatio * c.headDim * 4;
  return bytes + c.numLayers * c.windowSize * (c.headDim * 4 + 4);
}
