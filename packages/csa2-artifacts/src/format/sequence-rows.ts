/**
 * @module format/sequence-rows
 * The one place in csa2-artifacts that touches a csa2-core Sequence: where a chunk's contents live in
 * it (the token ids in `seq.tokens`; for each KV-source layer of ratio m the rows of entries
 * [floor(start/m), floor(end/m)) in `seq.cache(layer).mainKv` / `.indexK`), and how packed rows go in
 * and come out. Everything else in this package (codec, writer, reader, chunk cache) works on packed
 * row bytes only (format/chunk-codec's byte table).
 *
 * ┌─ TEMPORARY ADAPTER ────────────────────────────────────────────────────────────────────────────┐
 * │ Today a Sequence holds its global cache DEQUANTIZED, as float32 rows (RowStore). So this module │
 * │ packs rows on the way out (format/row-packing: exact FP4 repacking with its scale search) and   │
 * │ unpacks them on the way in (csa2-core's dequantizers). When the Sequence holds PACKED rows      │
 * │ (`PackedRowStore { rowBytes; rows; append(bytesU8); view(count?); row(i); truncate(count) }` as  │
 * │ `seq.cache(layer).mainKv` / `.indexK`, issue 14 item 2), only the functions marked ADAPTER here  │
 * │ change, to plain byte views and copies:                                                         │
 * │   rowsOf:     `cache.mainKv.view(end).subarray(first * R)` (no packing, searchedBlocks 0);        │
 * │   appendRows: `cache.mainKv.append(mainKvU8)` (no unpacking);                                   │
 * │   rowWidthsOf: `cache.mainKv.rowBytes` / `cache.indexK.rowBytes` against layout's row bytes.     │
 * │ Then format/row-packing's search can be deleted (its tests with it).                            │
 * └─────────────────────────────────────────────────────────────────────────────────────────────────┘
 */
import { Csa2Error, Sequence } from '@csa2/core';
import { chunkEntryRange, type ArtifactLayout } from '../layout.js';
import type { ChunkContent, DecodedChunk } from './chunk-codec.js';
import { packIndexKRows, packMainKvRows, unpackIndexKRows, unpackMainKvRows } from './row-packing.js';

/** A Sequence does not fit the artifact: wrong KV sources or widths, missing rows, not empty. */
export class SequenceStateError extends Csa2Error {
  constructor(message: string) {
    super('input-invalid', message);
  }
}

/** Packed rows of one KV source, and how many FP4 blocks the temporary adapter had to pack by search. */
export interface PackedSourceRows {
  readonly mainKvU8: Uint8Array;
  readonly indexKU8: Uint8Array;
  /** FP4 blocks packed by search (format/row-packing); always 0 once the Sequence holds packed rows. */
  readonly searchedBlocks: number;
}

/** A chunk's contents read from a Sequence, with the adapter's packing count. */
export interface SequenceChunkContent extends ChunkContent {
  readonly searchedBlocks: number;
}

/** ADAPTER: the row widths a Sequence's caches have, in the units the layout states them (elements today, bytes once packed). */
function rowWidthsOf(seq: Sequence, layer: number): { main: number; index: number } {
  const cache = seq.cache(layer);
  return { main: cache.mainKv.width, index: cache.indexK.width };
}

/** ADAPTER: packed rows [firstEntry, firstEntry + count) of one KV source. */
function rowsOf(seq: Sequence, layout: ArtifactLayout, layer: number, firstEntry: number, count: number): PackedSourceRows {
  const cache = seq.cache(layer);
  const end = firstEntry + count;
  const main = packMainKvRows(cache.mainKv.view(end).subarray(firstEntry * layout.headDim), layout.headDim);
  const index = packIndexKRows(cache.indexK.view(end).subarray(firstEntry * layout.indexHeadDim), layout.indexHeadDim);
  return { mainKvU8: main.bytesU8, indexKU8: index.bytesU8, searchedBlocks: main.searchedBlocks + index.searchedBlocks };
}

/** ADAPTER: appends packed rows (whole rows of the layout's row bytes) to one KV source. */
function appendRows(seq: Sequence, layout: ArtifactLayout, layer: number, mainKvU8: Uint8Array, indexKU8: Uint8Array): void {
  const cache = seq.cache(layer);
  cache.mainKv.append(unpackMainKvRows(mainKvU8, layout.headDim));
  cache.indexK.append(unpackIndexKRows(indexKU8, layout.indexHeadDim));
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
    const widths = rowWidthsOf(seq, s.layer);
    if (widths.main !== layout.headDim || widths.index !== layout.indexHeadDim) {
      throw new SequenceStateError(`layer ${s.layer}: sequence rows are ${widths.main} / ${widths.index} wide, the layout's ${layout.headDim} / ${layout.indexHeadDim}`);
    }
  }
}

/** Tokens the Sequence holds. */
export function sequenceLength(seq: Sequence): number {
  return seq.tokens.length;
}

/** A copy of the Sequence's token ids [start, end) (default: all). */
export function sequenceTokenIds(seq: Sequence, start = 0, end = seq.tokens.length): number[] {
  return seq.tokens.slice(start, end);
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

/** Appends token ids (one at a time: no argument spreading, so any length works). */
export function appendTokenIds(seq: Sequence, tokenIds: ArrayLike<number>): void {
  const tokens = seq.tokens;
  for (let i = 0; i < tokenIds.length; i++) tokens.push(tokenIds[i] ?? 0);
}

/** Packed rows [firstEntry, firstEntry + count) of one KV source. Throws SequenceStateError when rows are missing. */
export function packedRowsOf(seq: Sequence, layout: ArtifactLayout, layer: number, firstEntry = 0, count = sequenceEntryCount(seq, layer) - firstEntry): PackedSourceRows {
  const have = sequenceEntryCount(seq, layer);
  if (firstEntry < 0 || count < 0 || firstEntry + count > have) {
    throw new SequenceStateError(`layer ${layer} has ${have} global-KV rows; rows [${firstEntry}, ${firstEntry + count}) were asked for`);
  }
  return rowsOf(seq, layout, layer, firstEntry, count);
}

/** Appends packed rows of one KV source (whole rows of the layout's row bytes; ShapeError-like SequenceStateError otherwise). */
export function appendPackedRows(seq: Sequence, layout: ArtifactLayout, layer: number, mainKvU8: Uint8Array, indexKU8: Uint8Array): void {
  const rows = mainKvU8.length / layout.mainKvRowBytes;
  if (!Number.isInteger(rows) || indexKU8.length !== rows * layout.indexKRowBytes) {
    throw new SequenceStateError(`layer ${layer}: ${mainKvU8.length} main-KV bytes and ${indexKU8.length} index-K bytes are not equal numbers of whole rows (${layout.mainKvRowBytes} / ${layout.indexKRowBytes} B)`);
  }
  appendRows(seq, layout, layer, mainKvU8, indexKU8);
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
export function chunkContentOf(seq: Sequence, layout: ArtifactLayout, startToken: number, endToken: number): SequenceChunkContent {
  if (seq.tokens.length < endToken) throw new SequenceStateError(`sequence has ${seq.tokens.length} tokens, chunk [${startToken}, ${endToken}) needs ${endToken}`);
  let searchedBlocks = 0;
  const sources = layout.kvSources.map((s) => {
    const { firstEntry, entryCount } = chunkEntryRange(s.ratio, startToken, endToken);
    const cache = seq.cache(s.layer);
    const end = firstEntry + entryCount;
    if (cache.mainKv.rows < end || cache.indexK.rows < end) {
      throw new SequenceStateError(
        `layer ${s.layer} (ratio ${s.ratio}) has ${cache.mainKv.rows} main-KV / ${cache.indexK.rows} index-K rows; chunk [${startToken}, ${endToken}) needs ${end}`,
      );
    }
    const rows = rowsOf(seq, layout, s.layer, firstEntry, entryCount);
    searchedBlocks += rows.searchedBlocks;
    return { layer: s.layer, mainKvU8: rows.mainKvU8, indexKU8: rows.indexKU8 };
  });
  return { startToken, endToken, tokenIds: seq.tokens.slice(startToken, endToken), sources, searchedBlocks };
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
    appendRows(seq, layout, s.layer, s.mainKvU8.subarray(0, rows * layout.mainKvRowBytes), s.indexKU8.subarray(0, rows * layout.indexKRowBytes));
  }
  appendTokenIds(seq, chunk.tokenIds.subarray(0, upto - chunk.startToken));
}
