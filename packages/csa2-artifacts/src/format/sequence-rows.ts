/**
 * @module format/sequence-rows
 * Where a chunk's contents live in a csa2-core Sequence: the token ids in `seq.tokens`, and for each
 * KV-source layer of ratio m the rows of entries [floor(start/m), floor(end/m)) in
 * `seq.cache(layer).mainKv` / `.indexK` (dequantized float32, one row per compressed entry).
 */
import { Csa2Error, dequantizeIndexKRows, dequantizeMainKvRows, type Sequence } from '@csa2/core';
import { packIndexKRows, packMainKvRows } from './row-packing.js';
import { chunkEntryRange, type ArtifactLayout } from '../layout.js';
import type { ChunkContent, DecodedChunk } from './chunk-codec.js';

/** A Sequence does not fit the artifact: wrong KV sources or widths, missing rows, not empty. */
export class SequenceStateError extends Csa2Error {
  constructor(message: string) {
    super('input-invalid', message);
  }
}

/** Refuses a Sequence whose KV-source caches are not exactly the layout's (layers, ratios, row widths). */
export function checkSequenceLayout(seq: Sequence, layout: ArtifactLayout): void {
  const want = layout.kvSources.map((s) => `${s.layer}:${s.ratio}`).join(',');
  const have = [...seq.caches.values()]
    .sort((a, b) => a.layer - b.layer)
    .map((c) => `${c.layer}:${c.ratio}`)
    .join(',');
  if (want !== have) throw new SequenceStateError(`sequence KV sources (layer:ratio) ${have || '(none)'} differ from the artifact layout's ${want}`);
  for (const s of layout.kvSources) {
    const cache = seq.cache(s.layer);
    if (cache.mainKv.rowBytes !== layout.mainKvRowBytes || cache.indexK.rowBytes !== layout.indexKRowBytes) {
      throw new SequenceStateError(
        `layer ${s.layer}: sequence rows are ${cache.mainKv.rowBytes} / ${cache.indexK.rowBytes} bytes, the layout's ${layout.mainKvRowBytes} / ${layout.indexKRowBytes}`,
      );
    }
  }
}

/** True when the Sequence holds no tokens and no global-KV rows. */
export function isSequenceEmpty(seq: Sequence): boolean {
  if (seq.tokens.length > 0) return false;
  for (const cache of seq.caches.values()) if (cache.mainKv.rows > 0 || cache.indexK.rows > 0) return false;
  return true;
}

/**
 * The contents of the chunk [startToken, endToken) of a Sequence, as views into its row stores (valid
 * until the Sequence next grows: encode them at once). Throws SequenceStateError when rows are missing.
 */
export function chunkContentOf(seq: Sequence, layout: ArtifactLayout, startToken: number, endToken: number): ChunkContent {
  if (seq.tokens.length < endToken) throw new SequenceStateError(`sequence has ${seq.tokens.length} tokens, chunk [${startToken}, ${endToken}) needs ${endToken}`);
  const sources = layout.kvSources.map((s) => {
    const cache = seq.cache(s.layer);
    const { firstEntry, entryCount } = chunkEntryRange(s.ratio, startToken, endToken);
    const end = firstEntry + entryCount;
    if (cache.mainKv.rows < end || cache.indexK.rows < end) {
      throw new SequenceStateError(
        `layer ${s.layer} (ratio ${s.ratio}) has ${cache.mainKv.rows} main-KV / ${cache.indexK.rows} index-K rows; chunk [${startToken}, ${endToken}) needs ${end}`,
      );
    }
    // TEMPORARY adapter: the sequence holds packed rows, the codec still takes their values
    return {
      layer: s.layer,
      mainKvF32: dequantizeMainKvRows(cache.mainKv.range(firstEntry, entryCount), layout.headDim),
      indexKF32: dequantizeIndexKRows(cache.indexK.range(firstEntry, entryCount), layout.indexHeadDim),
    };
  });
  return { startToken, endToken, tokenIds: seq.tokens.slice(startToken, endToken), sources };
}

/**
 * Appends a decoded chunk's tokens [start, uptoToken) and the rows of the entries completed by
 * uptoToken to the Sequence, which must end exactly where the chunk starts.
 */
export function appendChunk(seq: Sequence, layout: ArtifactLayout, chunk: DecodedChunk, uptoToken = chunk.endToken): void {
  if (seq.tokens.length !== chunk.startToken) {
    throw new SequenceStateError(`sequence has ${seq.tokens.length} tokens, the chunk starts at token ${chunk.startToken}`);
  }
  const upto = Math.min(Math.max(uptoToken, chunk.startToken), chunk.endToken);
  for (const s of chunk.sources) {
    const cache = seq.cache(s.layer);
    if (cache.mainKv.rows !== s.firstEntry || cache.indexK.rows !== s.firstEntry) {
      throw new SequenceStateError(`layer ${s.layer} has ${cache.mainKv.rows} rows, the chunk's entries start at ${s.firstEntry}`);
    }
  }
  for (const s of chunk.sources) {
    const rows = chunkEntryRange(s.ratio, chunk.startToken, upto).entryCount;
    const cache = seq.cache(s.layer);
    // TEMPORARY adapter: back to packed rows (exact: the values came from packed rows)
    cache.mainKv.append(packMainKvRows(s.mainKvF32.subarray(0, rows * layout.headDim), layout.headDim).bytesU8);
    cache.indexK.append(packIndexKRows(s.indexKF32.subarray(0, rows * layout.indexHeadDim), layout.indexHeadDim).bytesU8);
  }
  seq.tokens.append(chunk.tokenIds.subarray(0, upto - chunk.startToken));
}
