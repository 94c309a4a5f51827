/**
 * @module format/sequence-rows
 * The one place in csa2-artifacts that touches a csa2-core Sequence: where a chunk's contents live in
 * it (the token ids in `seq.tokens`; for each KV-source layer of ratio m the rows of entries
 * [floor(start/m), floor(end/m)) in `seq.cache(layer).mainKv` / `.indexK`), and how packed rows go in
 * and come out. Everything else in this package (codec, writer, reader, chunk cache) works on packed
 * row bytes only (format/chunk-codec's byte table).
 *
 *
 * A Sequence holds its global cache packed (csa2-core PackedRowStore: the same row bytes as a chunk),
 * so rows go out as views (encode them at once: they are valid until the Sequence next grows) and come
 * in as copies (the reader may reuse a chunk's buffer after it is appended).
 */
import { Csa2Error, Sequence } from '@csa2/core';
import { chunkEntryRange, type ArtifactLayout } from '../layout.js';
import type { ChunkContent, DecodedChunk } from './chunk-codec.js';

/** A Sequence does not fit the artifact: wrong KV sources or widths, missing rows, not empty. */
export class SequenceStateError extends Csa2Error {
  constructor(message: string) {
    super('input-invalid', message);
  }
}

/** Packed rows of one KV source (views into the Sequence). */
export interface PackedSourceRows {
  readonly mainKvU8: Uint8Array;
  readonly indexKU8: Uint8Array;
}

/** Packed rows [firstEntry, firstEntry + count) of one KV source, as views. */
function rowsOf(seq: Sequence, layer: number, firstEntry: number, count: number): PackedSourceRows {
  const cache = seq.cache(layer);
  return { mainKvU8: cache.mainKv.range(firstEntry, count), indexKU8: cache.indexK.range(firstEntry, count) };
}

/** Appends packed rows (whole rows of the layout's row bytes) to one KV source (copied). */
function appendRows(seq: Sequence, layer: number, mainKvU8: Uint8Array, indexKU8: Uint8Array): void {
  const cache = seq.cache(layer);
  cache.mainKv.append(mainKvU8);
  cache.indexK.append(indexKU8);
}

/** An empty Sequence with exactly the layout's KV sources (tests and tools; engines use their model's createSequence). */
export function emptySequenceFor(layout: ArtifactLayout, window: number): Sequence {
  const numLayers = layout.kvSources.reduce((most, s) => Math.max(most, s.layer), 0) + 1;
  return new Sequence({ numLayers, window, headDim: layout.headDim, indexHeadDim: layout.indexHeadDim, kvSources: layout.kvSources });
}

/** Refuses a Sequence whose KV-source caches are not exactly the layout's (layers, ratios, row widths). */
export function checkSequenceLayout(seq: Sequence, layout: ArtifactLayout): void {
  const want = layout.kvSources.map((s) => `${s.layer}:${s.ratio}`).join(',');
  const have = Array.from(seq.caches.values())
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

/** Tokens the Sequence holds. */
export function sequenceLength(seq: Sequence): number {
  return seq.tokens.length;
}

/** The Sequence's token ids [start, end) (default: all), as a view (valid until it next grows). */
export function sequenceTokenIds(seq: Sequence, start = 0, end = seq.tokens.length): Uint32Array {
  return seq.tokens.view(start, end);
}

/** Completed entries (global-KV rows) of one KV source: the fewer of its main-KV and index-K rows. */
export function sequenceEntryCount(seq: Sequence, layer: number): number {
  const cache = seq.cache(layer);
  return Math.min(cache.mainKv.rows, cache.indexK.rows);
}

/** True when the Sequence holds no tokens and no global-KV rows. */
export function isSequenceEmpty(seq: Sequence): boolean {
  if (seq.tokens.length > 0) return false;
  for (const cache of seq.caches.values()) if (cache.mainKv.rows > 0 || cache.indexK.rows > 0) return false;
  return true;
}

/** Appends token ids (copied, no argument spreading, so any length works). */
export function appendTokenIds(seq: Sequence, tokenIds: ArrayLike<number>): void {
  seq.tokens.append(tokenIds);
}

/** Packed rows [firstEntry, firstEntry + count) of one KV source. Throws SequenceStateError when rows are missing. */
export function packedRowsOf(
  seq: Sequence,
  _layout: ArtifactLayout,
  layer: number,
  firstEntry = 0,
  count = sequenceEntryCount(seq, layer) - firstEntry,
): PackedSourceRows {
  const have = sequenceEntryCount(seq, layer);
  if (firstEntry < 0 || count < 0 || firstEntry + count > have) {
    throw new SequenceStateError(`layer ${layer} has ${have} global-KV rows; rows [${firstEntry}, ${firstEntry + count}) were asked for`);
  }
  return rowsOf(seq, layer, firstEntry, count);
}

/** Appends packed rows of one KV source (whole rows of the layout's row bytes; ShapeError-like SequenceStateError otherwise). */
export function appendPackedRows(seq: Sequence, layout: ArtifactLayout, layer: number, mainKvU8: Uint8Array, indexKU8: Uint8Array): void {
  const rows = mainKvU8.length / layout.mainKvRowBytes;
  if (!Number.isInteger(rows) || indexKU8.length !== rows * layout.indexKRowBytes) {
    throw new SequenceStateError(
      `layer ${layer}: ${mainKvU8.length} main-KV bytes and ${indexKU8.length} index-K bytes are not equal numbers of whole rows (${layout.mainKvRowBytes} / ${layout.indexKRowBytes} B)`,
    );
  }
  appendRows(seq, layer, mainKvU8, indexKU8);
}

/** Drops global-KV rows of one KV source from `count` on (tests: a Sequence with rows missing). */
export function truncateEntries(seq: Sequence, layer: number, count: number): void {
  const cache = seq.cache(layer);
  cache.mainKv.truncate(count);
  cache.indexK.truncate(count);
}

/**
 * The contents of the chunk [startToken, endToken) of a Sequence, packed (encode them at once: with a
 * packed Sequence the rows are views valid until it next grows). Throws SequenceStateError when rows
 * are missing.
 */
export function chunkContentOf(seq: Sequence, layout: ArtifactLayout, startToken: number, endToken: number): ChunkContent {
  if (seq.tokens.length < endToken)
    throw new SequenceStateError(`sequence has ${seq.tokens.length} tokens, chunk [${startToken}, ${endToken}) needs ${endToken}`);
  const sources = layout.kvSources.map((s) => {
    const { firstEntry, entryCount } = chunkEntryRange(s.ratio, startToken, endToken);
    const cache = seq.cache(s.layer);
    const end = firstEntry + entryCount;
    if (cache.mainKv.rows < end || cache.indexK.rows < end) {
      throw new SequenceStateError(
        `layer ${s.layer} (ratio ${s.ratio}) has ${cache.mainKv.rows} main-KV / ${cache.indexK.rows} index-K rows; chunk [${startToken}, ${endToken}) needs ${end}`,
      );
    }
    const rows = rowsOf(seq, s.layer, firstEntry, entryCount);
    return { layer: s.layer, mainKvU8: rows.mainKvU8, indexKU8: rows.indexKU8 };
  });
  return { startToken, endToken, tokenIds: seq.tokens.view(startToken, endToken), sources };
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
    appendRows(seq, s.layer, s.mainKvU8.subarray(0, rows * layout.mainKvRowBytes), s.indexKU8.subarray(0, rows * layout.indexKRowBytes));
  }
  appendTokenIds(seq, chunk.tokenIds.subarray(0, upto - chunk.startToken));
}
