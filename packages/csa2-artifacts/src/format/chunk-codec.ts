/**
 * @module format/chunk-codec
 * Chunk objects, format v1: the token ids and the packed global-KV rows of one span of a document.
 * A chunk covers tokens [start, end); for every KV-source layer of ratio m it holds the entries
 * completed inside it, [floor(start/m), floor(end/m)): all of [start/m, end/m) for a full chunk, and
 * for the trailing partial chunk only the completed ones (an open compressor group is not persisted;
 * bounded replay rebuilds it). Little-endian everywhere; no padding.
 *
 * | offset         | size       | field                                                              |
 * |----------------|------------|--------------------------------------------------------------------|
 * | 0              | 8          | magic, ASCII "CSA2CHNK"                                            |
 * | 8              | 2          | format version, u16 = 1                                            |
 * | 10             | 4          | H = header bytes, u32 = 30 + M + L + 12·S (offset of token id 0)   |
 * | 14             | 4          | start token, u32                                                   |
 * | 18             | 4          | end token (exclusive), u32, > start                                |
 * | 22             | 2          | D = head dim, u16, multiple of 16                                  |
 * | 24             | 2          | d = index head dim, u16, multiple of 32                            |
 * | 26             | 1          | M = model id length, 1..64                                         |
 * | 27             | M          | model id, printable ASCII                                          |
 * | 27+M           | 1          | L = layout id length, 1..64                                        |
 * | 28+M           | L          | layout id, printable ASCII                                         |
 * | 28+M+L         | 2          | S = KV-source layers, u16                                          |
 * | 30+M+L + 12·i  | 12         | source i, ascending layer: layer u16, ratio u16, first entry u32, entry count u32 |
 * | H              | 4·T        | token ids, u32 each, T = end - start                               |
 * | H + 4·T        | Σ n·(R+r)  | per source in header order: n main-KV rows (R = D/2 + D/16 bytes:  |
 * |                |            | E2M1 payload, even element in the low nibble, then E4M3 scales per |
 * |                |            | 16), then n index-K rows (r = d/2 + d/32: payload, UE8M0 per 32)   |
 * | N - 32         | 32         | SHA-256 over bytes [0, N - 32)                                     |
 *
 * The codec works on packed bytes end to end: a chunk's rows go in as the row bytes above
 * (`ChunkSourceRows.mainKvU8` / `indexKU8`, exactly what a Sequence's packed global cache holds) and
 * come out as views of the object's bytes. Encoding is the header, a copy of the token ids and the row
 * bytes into one buffer, and a SHA-256 over it: no quantization, no scale search. Row bytes are not
 * interpreted here (any byte values are stored and returned as given).
 *
 * Decoding checks, in order: magic, version (UnsupportedVersionError), the header's structure and the
 * object length (ArtifactCorruptError at the byte where data ran out or the field that is wrong), the
 * checksum (ArtifactCorruptError at N - 32), then model id and layout id against the reader's layout
 * (ModelMismatchError). Only then are the rows handed out, as views (no copy).
 */
import { createHash } from 'node:crypto';
import { ShapeError } from '@csa2/core';
import { ArtifactCorruptError, ModelMismatchError, UnsupportedVersionError } from '../errors.js';
import { chunkEntryRange, type ArtifactLayout } from '../layout.js';
import { readTokenIdsLe, writeTokenIdsLe } from './chunk-key.js';

/** First 8 bytes of every chunk object. */
export const CHUNK_MAGIC = 'CSA2CHNK';
/** The version this module writes. */
export const CHUNK_FORMAT_VERSION = 1;
/** Versions this module reads. */
export const SUPPORTED_CHUNK_VERSIONS: readonly number[] = [CHUNK_FORMAT_VERSION];
/** Bytes of the trailing SHA-256. */
export const CHUNK_CHECKSUM_BYTES = 32;

const MAGIC_BYTES = Buffer.from(CHUNK_MAGIC, 'ascii');
const OFFSET_VERSION = 8;
const OFFSET_HEADER_BYTES = 10;
const OFFSET_START = 14;
const OFFSET_END = 18;
const OFFSET_HEAD_DIM = 22;
const OFFSET_INDEX_HEAD_DIM = 24;
const OFFSET_MODEL_ID_LENGTH = 26;
const SOURCE_ENTRY_BYTES = 12;
const MAX_ID_CHARS = 64;

/** One KV-source layer's rows of a chunk, packed (the byte table's row format). */
export interface ChunkSourceRows {
  readonly layer: number;
  /** entryCount main-KV rows of R = headDim/2 + headDim/16 bytes, entries [floor(start/m), floor(end/m)). */
  readonly mainKvU8: Uint8Array;
  /** entryCount index-K rows of r = indexHeadDim/2 + indexHeadDim/32 bytes, the same entries. */
  readonly indexKU8: Uint8Array;
}

/** What a chunk holds, before encoding. */
export interface ChunkContent {
  readonly startToken: number;
  readonly endToken: number;
  /** end - start token ids, integers in [0, 2^32). */
  readonly tokenIds: ArrayLike<number>;
  /** One per KV source of the layout, in layout order. */
  readonly sources: readonly ChunkSourceRows[];
}

export interface EncodedChunk {
  readonly bytesU8: Uint8Array;
  /** Hex of the trailing SHA-256 (what a manifest records as the chunk's sha256). */
  readonly checksumHex: string;
}

/** A decoded source: its rows are views of the decoded object's bytes (valid while those bytes are unchanged). */
export interface DecodedChunkSource extends ChunkSourceRows {
  readonly ratio: number;
  readonly firstEntry: number;
  readonly entryCount: number;
}

export interface DecodedChunk {
  readonly formatVersion: number;
  readonly modelId: string;
  readonly layoutId: string;
  readonly startToken: number;
  readonly endToken: number;
  readonly tokenIds: Uint32Array;
  readonly sources: readonly DecodedChunkSource[];
  readonly checksumHex: string;
}

/** Bytes of the header (everything before token id 0) for a layout. */
export function chunkHeaderBytes(layout: ArtifactLayout): number {
  return 30 + layout.modelId.length + layout.layoutId.length + SOURCE_ENTRY_BYTES * layout.kvSources.length;
}

/** Exact size of the chunk object covering [startToken, endToken). */
export function chunkObjectBytes(layout: ArtifactLayout, startToken: number, endToken: number): number {
  let rows = 0;
  for (const s of layout.kvSources) rows += chunkEntryRange(s.ratio, startToken, endToken).entryCount * (layout.mainKvRowBytes + layout.indexKRowBytes);
  return chunkHeaderBytes(layout) + 4 * (endToken - startToken) + rows + CHUNK_CHECKSUM_BYTES;
}

/** Hex of the trailing checksum of a chunk object's bytes (no verification). */
export function chunkTrailerHex(bytesU8: Uint8Array): string {
  return Buffer.from(bytesU8.buffer, bytesU8.byteOffset + bytesU8.length - CHUNK_CHECKSUM_BYTES, CHUNK_CHECKSUM_BYTES).toString('hex');
}

/** A new buffer whose bytes are not zeroed first (the caller writes every one). */
function allocateUninitialized(sizeBytes: number): Uint8Array {
  const buffer = Buffer.allocUnsafeSlow(sizeBytes);
  return new Uint8Array(buffer.buffer, buffer.byteOffset, sizeBytes);
}

function sha256(bytesU8: Uint8Array): Buffer {
  return createHash('sha256').update(bytesU8).digest();
}

function checkContent(layout: ArtifactLayout, chunk: ChunkContent): void {
  const { startToken: start, endToken: end } = chunk;
  if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || start < 0 || end <= start || end >= 2 ** 32) {
    throw new ShapeError('chunk.tokenRange', ['0 <= start < end < 2^32'], [start, end]);
  }
  if (chunk.tokenIds.length !== end - start) throw new ShapeError('chunk.tokenIds', [end - start], [chunk.tokenIds.length]);
  if (chunk.sources.length !== layout.kvSources.length) throw new ShapeError('chunk.sources', [layout.kvSources.length], [chunk.sources.length]);
  layout.kvSources.forEach((spec, i) => {
    const src = chunk.sources[i];
    if (src === undefined || src.layer !== spec.layer) throw new ShapeError(`chunk.sources[${i}].layer`, [spec.layer], [src?.layer ?? -1]);
    const { entryCount } = chunkEntryRange(spec.ratio, start, end);
    if (src.mainKvU8.length !== entryCount * layout.mainKvRowBytes) {
      throw new ShapeError(
        `chunk.sources[${i}].mainKvU8 (layer ${spec.layer})`,
        [entryCount, layout.mainKvRowBytes],
        [src.mainKvU8.length / layout.mainKvRowBytes, layout.mainKvRowBytes],
      );
    }
    if (src.indexKU8.length !== entryCount * layout.indexKRowBytes) {
      throw new ShapeError(
        `chunk.sources[${i}].indexKU8 (layer ${spec.layer})`,
        [entryCount, layout.indexKRowBytes],
        [src.indexKU8.length / layout.indexKRowBytes, layout.indexKRowBytes],
      );
    }
  });
}

/** The chunk object with every byte but the checksum written; `checksumAt` is where the checksum goes. */
function buildChunk(layout: ArtifactLayout, chunk: ChunkContent, into: Uint8Array | undefined): { readonly out: Uint8Array; readonly checksumAt: number } {
  checkContent(layout, chunk);
  const { startToken: start, endToken: end } = chunk;
  const headerBytes = chunkHeaderBytes(layout);
  const total = chunkObjectBytes(layout, start, end);
  if (into !== undefined && into.byteLength < total)
    throw new RangeError(`encodeChunk: the buffer given is ${into.byteLength} bytes, the chunk takes ${total}`);
  // Every byte is written below, so the buffer need not be zeroed first.
  const out = into !== undefined ? into.subarray(0, total) : allocateUninitialized(total);
  const view = new DataView(out.buffer, out.byteOffset, total);
  out.set(MAGIC_BYTES, 0);
  view.setUint16(OFFSET_VERSION, CHUNK_FORMAT_VERSION, true);
  view.setUint32(OFFSET_HEADER_BYTES, headerBytes, true);
  view.setUint32(OFFSET_START, start, true);
  view.setUint32(OFFSET_END, end, true);
  view.setUint16(OFFSET_HEAD_DIM, layout.headDim, true);
  view.setUint16(OFFSET_INDEX_HEAD_DIM, layout.indexHeadDim, true);
  let at = OFFSET_MODEL_ID_LENGTH;
  for (const id of [layout.modelId, layout.layoutId]) {
    out[at] = id.length;
    out.set(Buffer.from(id, 'ascii'), at + 1);
    at += 1 + id.length;
  }
  view.setUint16(at, layout.kvSources.length, true);
  at += 2;
  for (const spec of layout.kvSources) {
    const { firstEntry, entryCount } = chunkEntryRange(spec.ratio, start, end);
    view.setUint16(at, spec.layer, true);
    view.setUint16(at + 2, spec.ratio, true);
    view.setUint32(at + 4, firstEntry, true);
    view.setUint32(at + 8, entryCount, true);
    at += SOURCE_ENTRY_BYTES;
  }
  writeTokenIdsLe(chunk.tokenIds, out, at, `chunk [${start}, ${end})`);
  at += 4 * (end - start);
  for (const src of chunk.sources) {
    out.set(src.mainKvU8, at);
    at += src.mainKvU8.length;
    out.set(src.indexKU8, at);
    at += src.indexKU8.length;
  }
  return { out, checksumAt: at };
}

/** Where encodeChunk writes. */
export interface EncodeOptions {
  /**
   * A buffer of at least chunkObjectBytes to encode into (e.g. from a BufferPool); the result is a view
   * of its start. @defaultValue a new buffer
   */
  readonly into?: Uint8Array;
}

/**
 * Encodes a chunk (format v1, byte table above): header, token ids and row bytes copied into one
 * buffer, then its SHA-256. Token ids outside [0, 2^32) are refused with InputError, wrong row counts
 * or byte lengths with ShapeError, a too small `into` with RangeError.
 *
 * @example
 * const { bytesU8, checksumHex } = encodeChunk(layout, { startToken: 0, endToken: C, tokenIds, sources });
 */
export function encodeChunk(layout: ArtifactLayout, chunk: ChunkContent, options: EncodeOptions = {}): EncodedChunk {
  const { out, checksumAt } = buildChunk(layout, chunk, options.into);
  const checksum = sha256(out.subarray(0, checksumAt));
  out.set(checksum, checksumAt);
  return { bytesU8: out, checksumHex: checksum.toString('hex') };
}

/**
 * Bytes hashed between two yields to the event loop in the async codec functions. Hashing a 3.6 MB
 * chunk in one call holds the thread for ~2 ms; a put or get is ~10 system calls in a row, each of
 * which needs the thread to start the next, so with one call the I/O of other chunks stalls until the
 * hash is done and encoding and I/O run one after the other (measured: 640–680 MB/s written). In
 * 128 KiB slices they overlap (790–1050 MB/s, the same CPU time).
 */
export const CHUNK_HASH_SLICE_BYTES = 128 * 1024;

const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** SHA-256 of `bytesU8` in slices, yielding to the event loop between them. */
async function sha256Sliced(bytesU8: Uint8Array): Promise<Buffer> {
  const hash = createHash('sha256');
  for (let at = 0; at < bytesU8.length; at += CHUNK_HASH_SLICE_BYTES) {
    if (at > 0) await nextTurn();
    hash.update(bytesU8.subarray(at, Math.min(bytesU8.length, at + CHUNK_HASH_SLICE_BYTES)));
  }
  return hash.digest();
}

/**
 * encodeChunk, hashing in slices that yield to the event loop (CHUNK_HASH_SLICE_BYTES), so that the
 * I/O of other chunks goes on meanwhile. The contents are copied before the promise is returned (the
 * caller may change them at once); `into` must not be touched until it settles.
 *
 * @example
 * const encoding = encodeChunkAsync(layout, content, { into: pool.acquire(size) }); // rows copied here
 * const { bytesU8, checksumHex } = await encoding;
 */
export async function encodeChunkAsync(layout: ArtifactLayout, chunk: ChunkContent, options: EncodeOptions = {}): Promise<EncodedChunk> {
  const { out, checksumAt } = buildChunk(layout, chunk, options.into); // synchronous: before the first await
  const checksum = await sha256Sliced(out.subarray(0, checksumAt));
  out.set(checksum, checksumAt);
  return { bytesU8: out, checksumHex: checksum.toString('hex') };
}

/** Reads the header fields with bounds checks; every failure is an ArtifactCorruptError naming key and offset. */
class HeaderReader {
  private readonly view: DataView;
  constructor(
    private readonly key: string,
    private readonly bytesU8: Uint8Array,
  ) {
    this.view = new DataView(bytesU8.buffer, bytesU8.byteOffset, bytesU8.length);
  }

  need(end: number, what: string): void {
    if (this.bytesU8.length < end) {
      throw new ArtifactCorruptError(
        this.key,
        this.bytesU8.length,
        `object ends at byte ${this.bytesU8.length} inside the ${what} (needs at least ${end} bytes)`,
      );
    }
  }

  fail(offset: number, reason: string): never {
    throw new ArtifactCorruptError(this.key, offset, reason);
  }

  u8(offset: number): number {
    return this.view.getUint8(offset);
  }
  u16(offset: number): number {
    return this.view.getUint16(offset, true);
  }
  u32(offset: number): number {
    return this.view.getUint32(offset, true);
  }

  /** A length byte then that many printable ASCII chars; returns the text. */
  shortAscii(offset: number, what: string): string {
    this.need(offset + 1, `${what} length`);
    const length = this.u8(offset);
    if (length < 1 || length > MAX_ID_CHARS) this.fail(offset, `${what} length ${length} is outside 1..${MAX_ID_CHARS}`);
    this.need(offset + 1 + length, what);
    for (let i = 0; i < length; i++) {
      const c = this.u8(offset + 1 + i);
      if (c < 0x21 || c > 0x7e) this.fail(offset + 1 + i, `${what} byte 0x${c.toString(16)} is not printable ASCII`);
    }
    return Buffer.from(this.bytesU8.buffer, this.bytesU8.byteOffset + offset + 1, length).toString('latin1');
  }
}

interface ParsedHeader {
  readonly modelId: string;
  readonly layoutId: string;
  readonly startToken: number;
  readonly endToken: number;
  readonly headDim: number;
  readonly indexHeadDim: number;
  readonly headerBytes: number;
  readonly sources: readonly { layer: number; ratio: number; firstEntry: number; entryCount: number; offset: number }[];
  readonly totalBytes: number;
}

function parseHeader(r: HeaderReader, bytesU8: Uint8Array, key: string): ParsedHeader {
  r.need(MAGIC_BYTES.length, 'magic');
  for (let i = 0; i < MAGIC_BYTES.length; i++) {
    if (bytesU8[i] !== MAGIC_BYTES[i]) r.fail(i, `not a chunk object: bad magic (expected ASCII "${CHUNK_MAGIC}")`);
  }
  r.need(OFFSET_VERSION + 2, 'format version');
  const version = r.u16(OFFSET_VERSION);
  if (!SUPPORTED_CHUNK_VERSIONS.includes(version)) throw new UnsupportedVersionError(key, version, SUPPORTED_CHUNK_VERSIONS);
  r.need(OFFSET_MODEL_ID_LENGTH, 'fixed header');
  const headerBytes = r.u32(OFFSET_HEADER_BYTES);
  const startToken = r.u32(OFFSET_START);
  const endToken = r.u32(OFFSET_END);
  const headDim = r.u16(OFFSET_HEAD_DIM);
  const indexHeadDim = r.u16(OFFSET_INDEX_HEAD_DIM);
  if (endToken <= startToken) r.fail(OFFSET_END, `end token ${endToken} is not after start token ${startToken}`);
  if (headDim === 0 || headDim % 16 !== 0) r.fail(OFFSET_HEAD_DIM, `head dim ${headDim} is not a positive multiple of 16`);
  if (indexHeadDim === 0 || indexHeadDim % 32 !== 0) r.fail(OFFSET_INDEX_HEAD_DIM, `index head dim ${indexHeadDim} is not a positive multiple of 32`);
  const modelId = r.shortAscii(OFFSET_MODEL_ID_LENGTH, 'model id');
  const layoutAt = OFFSET_MODEL_ID_LENGTH + 1 + modelId.length;
  const layoutId = r.shortAscii(layoutAt, 'layout id');
  const countAt = layoutAt + 1 + layoutId.length;
  r.need(countAt + 2, 'KV-source count');
  const sourceCount = r.u16(countAt);
  const expectedHeaderBytes = countAt + 2 + SOURCE_ENTRY_BYTES * sourceCount;
  if (headerBytes !== expectedHeaderBytes) {
    r.fail(OFFSET_HEADER_BYTES, `header length field says ${headerBytes} bytes, the header's own fields make ${expectedHeaderBytes}`);
  }
  r.need(headerBytes, 'KV-source table');
  const mainRowBytes = headDim / 2 + headDim / 16;
  const indexRowBytes = indexHeadDim / 2 + indexHeadDim / 32;
  let rowBytes = 0;
  let previousLayer = -1;
  const sources: ParsedHeader['sources'][number][] = [];
  for (let i = 0; i < sourceCount; i++) {
    const at = countAt + 2 + SOURCE_ENTRY_BYTES * i;
    const layer = r.u16(at);
    const ratio = r.u16(at + 2);
    const firstEntry = r.u32(at + 4);
    const entryCount = r.u32(at + 8);
    if (layer <= previousLayer) r.fail(at, `KV-source layers are not ascending (${layer} after ${previousLayer})`);
    if (ratio === 0) r.fail(at + 2, `layer ${layer} has compress ratio 0`);
    const want = chunkEntryRange(ratio, startToken, endToken);
    if (firstEntry !== want.firstEntry)
      r.fail(at + 4, `layer ${layer}: first entry ${firstEntry}, tokens [${startToken}, ${endToken}) at ratio ${ratio} start at ${want.firstEntry}`);
    if (entryCount !== want.entryCount)
      r.fail(at + 8, `layer ${layer}: ${entryCount} entries, tokens [${startToken}, ${endToken}) at ratio ${ratio} complete ${want.entryCount}`);
    previousLayer = layer;
    rowBytes += entryCount * (mainRowBytes + indexRowBytes);
    sources.push({ layer, ratio, firstEntry, entryCount, offset: at });
  }
  const totalBytes = headerBytes + 4 * (endToken - startToken) + rowBytes + CHUNK_CHECKSUM_BYTES;
  r.need(totalBytes, 'token ids, rows and checksum the header describes');
  if (bytesU8.length > totalBytes)
    r.fail(totalBytes, `${bytesU8.length - totalBytes} unexpected bytes after the checksum (the header describes ${totalBytes} bytes)`);
  return { modelId, layoutId, startToken, endToken, headDim, indexHeadDim, headerBytes, sources, totalBytes };
}

function checkAgainstLayout(r: HeaderReader, h: ParsedHeader, layout: ArtifactLayout, key: string): void {
  if (h.modelId !== layout.modelId) throw new ModelMismatchError(key, layout.modelId, h.modelId);
  if (h.layoutId !== layout.layoutId) {
    throw new ModelMismatchError(key, `${layout.modelId} (layout ${layout.layoutId})`, `${h.modelId} (layout ${h.layoutId})`);
  }
  const mismatch = `disagrees with its layout id ${h.layoutId}`;
  if (h.headDim !== layout.headDim) r.fail(OFFSET_HEAD_DIM, `head dim ${h.headDim} ${mismatch} (${layout.headDim})`);
  if (h.indexHeadDim !== layout.indexHeadDim) r.fail(OFFSET_INDEX_HEAD_DIM, `index head dim ${h.indexHeadDim} ${mismatch} (${layout.indexHeadDim})`);
  if (h.sources.length !== layout.kvSources.length)
    r.fail(h.headerBytes - SOURCE_ENTRY_BYTES * h.sources.length - 2, `${h.sources.length} KV sources ${mismatch}`);
  h.sources.forEach((s, i) => {
    const spec = layout.kvSources[i];
    if (spec === undefined || s.layer !== spec.layer || s.ratio !== spec.ratio) r.fail(s.offset, `KV source (layer ${s.layer}, ratio ${s.ratio}) ${mismatch}`);
  });
}

/** How decodeChunk treats the trailing checksum. */
export interface DecodeOptions {
  /**
   * 'verify' recomputes the SHA-256 and refuses a mismatch. 'trust' takes the stored trailer as the
   * checksum without hashing: only for bytes this process has verified before and kept unchanged
   * (the reader's chunk cache holds only verified objects). @defaultValue 'verify'
   */
  readonly checksum?: 'verify' | 'trust';
}

/**
 * Decodes and verifies a chunk object (checks in the module header's order). `key` names the object
 * in errors. The token ids are copied (16 KB per 4096 tokens); the rows are views of `bytesU8`.
 *
 * @example
 * const chunk = decodeChunk(layout, objectKey, await store.get(objectKey));
 */
export function decodeChunk(layout: ArtifactLayout, key: string, bytesU8: Uint8Array, options: DecodeOptions = {}): DecodedChunk {
  const r = new HeaderReader(key, bytesU8);
  const h = parseHeader(r, bytesU8, key);
  const checksumAt = h.totalBytes - CHUNK_CHECKSUM_BYTES;
  const computed = options.checksum === 'trust' ? bytesU8.subarray(checksumAt, h.totalBytes) : sha256(bytesU8.subarray(0, checksumAt));
  return finishDecode(layout, key, bytesU8, r, h, computed);
}

/**
 * decodeChunk (checksum verified), hashing in slices that yield to the event loop
 * (CHUNK_HASH_SLICE_BYTES), so that other chunks' reads go on meanwhile. `bytesU8` must not change
 * until the promise settles.
 */
export async function decodeChunkAsync(layout: ArtifactLayout, key: string, bytesU8: Uint8Array): Promise<DecodedChunk> {
  const r = new HeaderReader(key, bytesU8);
  const h = parseHeader(r, bytesU8, key);
  const computed = await sha256Sliced(bytesU8.subarray(0, h.totalBytes - CHUNK_CHECKSUM_BYTES));
  return finishDecode(layout, key, bytesU8, r, h, computed);
}

/** The checks after the structure (checksum, then model and layout), then the decoded chunk with its rows as views. */
function finishDecode(layout: ArtifactLayout, key: string, bytesU8: Uint8Array, r: HeaderReader, h: ParsedHeader, computedU8: Uint8Array): DecodedChunk {
  const checksumAt = h.totalBytes - CHUNK_CHECKSUM_BYTES;
  const stored = bytesU8.subarray(checksumAt, h.totalBytes);
  const computedHex = Buffer.from(computedU8.buffer, computedU8.byteOffset, computedU8.length).toString('hex');
  if (!Buffer.from(stored.buffer, stored.byteOffset, stored.length).equals(computedU8)) {
    r.fail(checksumAt, `checksum mismatch (stored ${Buffer.from(stored).toString('hex')}, computed ${computedHex})`);
  }
  checkAgainstLayout(r, h, layout, key);
  const tokenCount = h.endToken - h.startToken;
  const tokenIds = readTokenIdsLe(bytesU8, h.headerBytes, tokenCount);
  let at = h.headerBytes + 4 * tokenCount;
  const sources = h.sources.map((s) => {
    const mainBytes = s.entryCount * layout.mainKvRowBytes;
    const indexBytes = s.entryCount * layout.indexKRowBytes;
    const mainKvU8 = bytesU8.subarray(at, at + mainBytes);
    const indexKU8 = bytesU8.subarray(at + mainBytes, at + mainBytes + indexBytes);
    at += mainBytes + indexBytes;
    return { layer: s.layer, ratio: s.ratio, firstEntry: s.firstEntry, entryCount: s.entryCount, mainKvU8, indexKU8 };
  });
  return {
    formatVersion: CHUNK_FORMAT_VERSION,
    modelId: h.modelId,
    layoutId: h.layoutId,
    startToken: h.startToken,
    endToken: h.endToken,
    tokenIds,
    sources,
    checksumHex: computedHex,
  };
}
