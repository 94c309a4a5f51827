/**
 * @module format/tail-codec
 * A document's stored encoder tail (format v1): what a CED question on the document computes first —
 * the encoder layers over the document's last R tokens — kept beside the artifact so that no question
 * computes it again (the engine's document cache keeps the same state in memory; see
 * @csa2/engine scheduler/document-cache PrimedTail). It is optional: a reader that finds it missing,
 * damaged or for another replay length computes the tail as before, with the same result.
 *
 * What it holds is the state by which that sequence differs from the document as the artifact loads
 * it (no windows, no open compressor groups, no index-K slot), plus the encoder's output rows and
 * the candidate source's picks of those rows:
 *
 * ```
 * "CSA2TAIL"  u32 version=1  u32 n + modelId (n ASCII bytes, padded to 4)  u32 n + layoutId (likewise)
 * u32 tokenCount P  u32 replayTokens R
 * u32 window  u32 headDim  u32 hcMult  u32 dim  i32 indexKSlot (-1: none)
 * u32 nWindows   × { u32 layer; i32 positions[window]; f32 rows[window·headDim] }
 * u32 nPending   × { u32 layer; u32 ratio; i32 group; u32 count; f32 kv[ratio·headDim]; f32 score[ratio·headDim] }
 * u32 streamStart  u32 streamRows  f32 X[rows·hcMult·dim]  f32 pre[rows·hcMult]
 * u32 hasSources  [ u32 start; u32 rows; u32 kk; u32 kb; i32 topk[rows·kk]; i32 candidates[rows·kb] ]
 * SHA-256 of every byte before it (32 bytes)
 * ```
 *
 * Each f32 array is written as a u32 tag and its values: tag 1 when every value is a bfloat16 value
 * (the bf16 numerics' stream and windows are: half the bytes), as the upper 16 bits of each, padded to
 * 4 bytes; tag 0 as float32. Lossless either way. Little-endian, every field 4 bytes. The object's key is the
 * SHA-256 of all its bytes (a content key in the tenant's `chunks/`, named by the manifest's `tail`,
 * so garbage collection keeps it exactly as long as a manifest names it); the reader checks size and
 * hash before decoding, and decoding checks every count against the expected shape, so a damaged or
 * foreign object is refused with the field that is wrong, never half-applied.
 */
import { createHash } from 'node:crypto';
import type { SourceSelections } from '@csa2/core';
import { ArtifactCorruptError } from '../errors.js';

export const TAIL_FORMAT_VERSION = 1;
const MAGIC = 'CSA2TAIL';
/** The trailing SHA-256. */
export const TAIL_CHECKSUM_BYTES = 32;

export interface TailWindow {
  readonly layer: number;
  /** [window]: slot s holds position positions[s] (-1 = empty). */
  readonly positions: Int32Array;
  /** [window, headDim]. */
  readonly rows: Float32Array;
}

export interface TailPending {
  readonly layer: number;
  readonly ratio: number;
  readonly group: number;
  readonly count: number;
  /** [ratio, headDim] each. */
  readonly kv: Float32Array;
  readonly score: Float32Array;
}

/** The candidate source's picks of rows [start, start + rows): [rows, kk] entries and [rows, kb] blocks (-1 = none). */
export type TailSources = SourceSelections;

/** What a stored tail is for: the model and layout, the document's length, the replay, the shape of its arrays. */
export interface TailHeader {
  readonly modelId: string;
  readonly layoutId: string;
  readonly tokenCount: number;
  readonly replayTokens: number;
  readonly window: number;
  readonly headDim: number;
  readonly hcMult: number;
  readonly dim: number;
}

/** The decoded contents of a stored encoder tail. */
export interface StoredTail extends TailHeader {
  readonly indexKSlot: number | null;
  readonly windows: readonly TailWindow[];
  readonly pending: readonly TailPending[];
  /** The encoder's output rows [streamStart, streamStart + streamRows): X [rows, hcMult·dim], pre [rows, hcMult]. */
  readonly streamStart: number;
  readonly streamRows: number;
  readonly X: Float32Array;
  readonly pre: Float32Array;
  readonly sources: TailSources | null;
}

/** The header a stored tail must have to be applied (from the model, its layout and the manifest), and the model's layers. */
export interface TailShape extends TailHeader {
  readonly numLayers: number;
  /** Compress ratio of each KV-source layer. */
  readonly ratios: ReadonlyMap<number, number>;
}

/** The bytes of a stored tail. */
export function encodeTail(t: StoredTail): Uint8Array {
  const W = t.window * t.headDim;
  const floats = (a: Float32Array) => 4 + a.length * 4;
  const ascii = (id: string) => Buffer.from(id, 'latin1');
  const ids = [ascii(t.modelId), ascii(t.layoutId)];
  let n = 8 + 4 + ids.reduce((a, b) => a + 4 + ((b.length + 3) & ~3), 0) + 4 * 7 + 4 + TAIL_CHECKSUM_BYTES; // magic, version, ids, 6 u32 + the slot, nWindows, checksum
  for (const w of t.windows) n += 4 + w.positions.length * 4 + floats(w.rows);
  n += 4;
  for (const p of t.pending) n += 16 + floats(p.kv) + floats(p.score);
  n += 8 + floats(t.X) + floats(t.pre) + 4;
  if (t.sources !== null) n += 16 + (t.sources.topk.length + t.sources.candidates.length) * 4;
  const out = new Uint8Array(n); // at most: bf16 arrays take less
  const dv = new DataView(out.buffer);
  out.set(Buffer.from(MAGIC, 'latin1'), 0);
  let o = 8;
  const u32 = (v: number) => {
    dv.setUint32(o, v, true);
    o += 4;
  };
  const i32 = (v: number) => {
    dv.setInt32(o, v, true);
    o += 4;
  };
  const ints = (a: Int32Array) => {
    out.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength), o);
    o += a.byteLength;
  };
  const f32s = (a: Float32Array) => {
    const bits = new Uint32Array(a.buffer, a.byteOffset, a.length);
    let bf16 = true;
    for (let i = 0; i < bits.length && bf16; i++) bf16 = ((bits[i] as number) & 0xffff) === 0;
    u32(bf16 ? 1 : 0);
    if (!bf16) {
      out.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength), o);
      o += a.byteLength;
      return;
    }
    for (let i = 0; i < bits.length; i++) dv.setUint16(o + 2 * i, (bits[i] as number) >>> 16, true);
    o += (2 * bits.length + 3) & ~3;
  };
  // every count the decoder derives from the shape must hold here: a bf16 array's padding would hide one short by a value
  const check = (what: string, got: number, want: number) => {
    if (got !== want) throw new RangeError(`tail ${what} has ${got} values, ${want} expected`);
  };
  check('stream X', t.X.length, t.streamRows * t.hcMult * t.dim);
  check('stream pre', t.pre.length, t.streamRows * t.hcMult);
  for (const p of t.pending) {
    check(`open group kv of layer ${p.layer}`, p.kv.length, p.ratio * t.headDim);
    check(`open group score of layer ${p.layer}`, p.score.length, p.ratio * t.headDim);
  }
  if (t.sources !== null) {
    check('picks', t.sources.topk.length, t.sources.rows * t.sources.kk);
    check('candidate blocks', t.sources.candidates.length, t.sources.rows * t.sources.kb);
  }
  u32(TAIL_FORMAT_VERSION);
  for (const id of ids) {
    u32(id.length);
    out.set(id, o);
    o += (id.length + 3) & ~3;
  }
  for (const v of [t.tokenCount, t.replayTokens, t.window, t.headDim, t.hcMult, t.dim]) u32(v);
  i32(t.indexKSlot ?? -1);
  u32(t.windows.length);
  for (const w of t.windows) {
    if (w.positions.length !== t.window || w.rows.length !== W)
      throw new RangeError(`tail window of layer ${w.layer} does not have ${t.window} rows of ${t.headDim}`);
    u32(w.layer);
    ints(w.positions);
    f32s(w.rows);
  }
  u32(t.pending.length);
  for (const p of t.pending) {
    u32(p.layer);
    u32(p.ratio);
    i32(p.group);
    u32(p.count);
    f32s(p.kv);
    f32s(p.score);
  }
  u32(t.streamStart);
  u32(t.streamRows);
  f32s(t.X);
  f32s(t.pre);
  u32(t.sources === null ? 0 : 1);
  if (t.sources !== null) {
    const s = t.sources;
    for (const v of [s.start, s.rows, s.kk, s.kb]) u32(v);
    ints(s.topk);
    ints(s.candidates);
  }
  out.set(createHash('sha256').update(out.subarray(0, o)).digest(), o);
  o += TAIL_CHECKSUM_BYTES;
  if (o > n) throw new RangeError(`tail encoding wrote ${o} bytes, ${n} allocated`);
  return out.slice(0, o);
}

/** The content key of a stored tail: its trailing checksum (64 hex), the SHA-256 of the bytes before it. */
export function tailKey(bytesU8: Uint8Array): string {
  return Buffer.from(bytesU8.subarray(bytesU8.length - TAIL_CHECKSUM_BYTES)).toString('hex');
}

/** Whether a stored tail's trailing checksum is the SHA-256 of its other bytes. */
export function tailChecksumValid(bytesU8: Uint8Array): boolean {
  if (bytesU8.length < TAIL_CHECKSUM_BYTES) return false;
  const body = bytesU8.subarray(0, bytesU8.length - TAIL_CHECKSUM_BYTES);
  return createHash('sha256').update(body).digest().equals(bytesU8.subarray(body.length));
}

/**
 * Decodes and checks a stored tail against the shape it must have. Throws ArtifactCorruptError naming
 * the offset and what is wrong. Checks what applying it relies on: counts, layers, positions in the
 * window's slots and before the document's end, open groups where the document leaves them, and picks
 * inside each row's visible entries (`sourceRatio`: the candidate source's compress ratio, `blockSize`
 * its candidate block size).
 */
export function decodeTail(
  key: string,
  bytesU8: Uint8Array,
  shape: TailShape,
  candidates: { readonly sourceRatio: number; readonly blockSize: number } | null,
): StoredTail {
  // a copy at offset 0: the typed arrays below view it aligned
  const buf = new Uint8Array(bytesU8.byteLength);
  buf.set(bytesU8);
  const dv = new DataView(buf.buffer);
  let o = 0;
  const fail = (reason: string): never => {
    throw new ArtifactCorruptError(key, o, `encoder tail: ${reason}`);
  };
  const need = (bytes: number) => {
    if (o + bytes > buf.length) fail(`ends after ${buf.length} bytes, ${o + bytes} needed`);
  };
  const u32 = (): number => {
    need(4);
    const v = dv.getUint32(o, true);
    o += 4;
    return v;
  };
  const i32 = (): number => {
    need(4);
    const v = dv.getInt32(o, true);
    o += 4;
    return v;
  };
  const f32s = (count: number): Float32Array => {
    const tag = u32();
    if (tag > 1) fail(`float array tag ${tag} (0: float32, 1: bfloat16)`);
    let a: Float32Array;
    if (tag === 0) {
      need(count * 4);
      a = new Float32Array(buf.buffer, o, count);
      o += count * 4;
    } else {
      const bytes = (2 * count + 3) & ~3;
      need(bytes);
      a = new Float32Array(count);
      const bits = new Uint32Array(a.buffer);
      for (let i = 0; i < count; i++) bits[i] = dv.getUint16(o + 2 * i, true) << 16;
      o += bytes;
    }
    for (let i = 0; i < count; i++) if (!Number.isFinite(a[i] as number)) fail(`value ${i} of a float array is not finite`);
    return a;
  };
  const i32s = (count: number): Int32Array => {
    need(count * 4);
    const a = new Int32Array(buf.buffer, o, count);
    o += count * 4;
    return a;
  };
  const expect = (name: string, got: number, want: number) => {
    if (got !== want) fail(`${name} is ${got}, expected ${want}`);
  };
  need(8);
  if (Buffer.from(buf.subarray(0, 8)).toString('latin1') !== MAGIC) fail('not an encoder tail (bad magic)');
  o = 8;
  const version = u32();
  if (version !== TAIL_FORMAT_VERSION) fail(`format version ${version} is not supported (this reader knows ${TAIL_FORMAT_VERSION})`);
  const id = (what: string, want: string): string => {
    const len = u32();
    if (len > 64) fail(`${what} of ${len} bytes`);
    need(len);
    const got = Buffer.from(buf.subarray(o, o + len)).toString('latin1');
    if (got !== want) fail(`${what} is ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`);
    o += (len + 3) & ~3;
    return got;
  };
  const modelId = id('modelId', shape.modelId);
  const layoutId = id('layoutId', shape.layoutId);
  // the body ends where the checksum starts (checked by the reader before decoding)
  const bodyEnd = buf.length - TAIL_CHECKSUM_BYTES;
  const header = (name: 'tokenCount' | 'replayTokens' | 'window' | 'headDim' | 'hcMult' | 'dim'): number => {
    const v = u32();
    expect(name, v, shape[name]);
    return v;
  };
  const [tokenCount, replayTokens, window, headDim, hcMult, dim] = [
    header('tokenCount'),
    header('replayTokens'),
    header('window'),
    header('headDim'),
    header('hcMult'),
    header('dim'),
  ];
  const slot = i32();
  if (slot !== -1 && !shape.ratios.has(slot)) fail(`index-K slot ${slot} is not a KV-source layer`);
  const nWindows = u32();
  if (nWindows > shape.numLayers) fail(`${nWindows} windows for ${shape.numLayers} layers`);
  const windows: TailWindow[] = [];
  const seen = new Set<number>();
  for (let i = 0; i < nWindows; i++) {
    const layer = u32();
    if (layer >= shape.numLayers || seen.has(layer)) fail(`window ${i}: layer ${layer} is out of range or repeated`);
    seen.add(layer);
    const positions = i32s(window);
    for (let s = 0; s < window; s++) {
      const p = positions[s] as number;
      if (p !== -1 && !(p >= 0 && p < tokenCount && p >= tokenCount - window && p % window === s))
        fail(`window of layer ${layer}: slot ${s} holds position ${p}`);
    }
    windows.push({ layer, positions, rows: f32s(window * headDim) });
  }
  const nPending = u32();
  if (nPending > shape.ratios.size) fail(`${nPending} open groups for ${shape.ratios.size} KV sources`);
  const pending: TailPending[] = [];
  const seenP = new Set<number>();
  for (let i = 0; i < nPending; i++) {
    const layer = u32();
    const ratio = u32();
    if (shape.ratios.get(layer) !== ratio || seenP.has(layer))
      fail(`open group ${i}: layer ${layer} with ratio ${ratio} is not a KV source of this model, or repeated`);
    seenP.add(layer);
    const group = i32();
    const count = u32();
    // the open group is the one the document's end leaves open
    if (!(ratio > 1 && tokenCount % ratio !== 0 && group === Math.floor(tokenCount / ratio) && count === tokenCount % ratio)) {
      fail(
        `open group of layer ${layer} is group ${group} with ${count} rows; the document's ${tokenCount} tokens leave ${tokenCount % ratio} rows of group ${Math.floor(tokenCount / ratio)}`,
      );
    }
    pending.push({ layer, ratio, group, count, kv: f32s(ratio * headDim), score: f32s(ratio * headDim) });
  }
  const streamStart = u32();
  const streamRows = u32();
  expect('stream rows', streamRows, replayTokens);
  expect('stream start', streamStart, tokenCount - replayTokens);
  const X = f32s(streamRows * hcMult * dim);
  const pre = f32s(streamRows * hcMult);
  const hasSources = u32();
  if (hasSources > 1) fail(`hasSources is ${hasSources}`);
  let sources: TailSources | null = null;
  if (hasSources === 1) {
    if (candidates === null) fail('it holds candidate-source picks; this model has no candidate source');
    const { sourceRatio: m, blockSize: bs } = candidates as { sourceRatio: number; blockSize: number };
    const start = u32();
    const rows = u32();
    const kk = u32();
    const kb = u32();
    if (!(start >= streamStart && start + rows <= tokenCount && rows >= 1)) fail(`picks of rows [${start}, ${start + rows}) are not document rows of the tail`);
    if (kk < 1 || kb < 1 || kk > 65536 || kb > 65536) fail(`picks of ${kk} entries and ${kb} blocks a row`);
    const topk = i32s(rows * kk);
    const cand = i32s(rows * kb);
    for (let r = 0; r < rows; r++) {
      const visible = Math.floor((start + r + 1) / m);
      const blocks = Math.ceil(visible / bs);
      for (let j = 0; j < kk; j++) {
        const v = topk[r * kk + j] as number;
        if (v < -1 || v >= visible) fail(`row ${start + r}: pick ${v} outside its ${visible} visible entries`);
      }
      for (let j = 0; j < kb; j++) {
        const v = cand[r * kb + j] as number;
        if (v < -1 || v >= blocks) fail(`row ${start + r}: candidate block ${v} outside its ${blocks} blocks`);
      }
    }
    sources = { start, rows, kk, kb, topk, candidates: cand };
  }
  if (o !== bodyEnd) fail(o > bodyEnd ? `the body runs into the checksum (${o - bodyEnd} bytes)` : `${bodyEnd - o} bytes after the end`);
  return {
    modelId,
    layoutId,
    tokenCount,
    replayTokens,
    window,
    headDim,
    hcMult,
    dim,
    indexKSlot: slot === -1 ? null : slot,
    windows,
    pending,
    streamStart,
    streamRows,
    X,
    pre,
    sources,
  };
}
