/**
 * @module format/chunk-codec.test
 * format/chunk-codec: round trips of packed rows (bytes in, the same bytes out, as views), the byte table, and refusal of every flipped byte, every truncation, other models, versions and self-contradicting headers.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { InputError, ShapeError, dequantizeMainKvRows } from '@csa2/core';
import { ArtifactCorruptError, ModelMismatchError, UnsupportedVersionError } from '../errors.js';
import { chunkEntryRange, createArtifactLayout, type ArtifactLayout } from '../layout.js';
import {
  CHUNK_FORMAT_VERSION,
  CHUNK_HASH_SLICE_BYTES,
  chunkHeaderBytes,
  chunkObjectBytes,
  chunkTrailerHex,
  decodeChunk,
  decodeChunkAsync,
  encodeChunk,
  encodeChunkAsync,
} from './chunk-codec.js';
import { chunkContentOf, packedRowsOf } from './sequence-rows.js';
import { assertSameBytes, syntheticSequence, tokensOf } from '../testing/artifact-test-support.js';

const LAYOUT = createArtifactLayout({
  modelId: 'model-a',
  headDim: 32,
  indexHeadDim: 32,
  kvSources: [
    { layer: 1, ratio: 2 },
    { layer: 3, ratio: 1 },
  ],
});
const KEY = 'tenants/t/chunks/ab/abc';

function assertCorrupt(fn: () => unknown, check: (e: ArtifactCorruptError) => boolean, label: string): void {
  assert.throws(fn, (e: unknown) => e instanceof ArtifactCorruptError && e.key === KEY && e.message.includes(KEY) && check(e), label);
}

function resealed(bytes: Uint8Array): Uint8Array {
  const out = bytes.slice();
  out.set(
    createHash('sha256')
      .update(out.subarray(0, out.length - 32))
      .digest(),
    out.length - 32,
  );
  return out;
}

function encodeRange(layout: ArtifactLayout, start: number, end: number, seed = 7): { bytes: Uint8Array; seq: ReturnType<typeof syntheticSequence> } {
  const seq = syntheticSequence(layout, end, seed);
  return { bytes: encodeChunk(layout, chunkContentOf(seq, layout, start, end)).bytesU8, seq };
}

test('round trip: a full chunk and a trailing partial chunk (ratio-2 group left open) decode to the same tokens and rows', () => {
  const seq = syntheticSequence(LAYOUT, 85, 11);
  for (const [start, end] of [
    [16, 32],
    [64, 85],
  ] as const) {
    const encoded = encodeChunk(LAYOUT, chunkContentOf(seq, LAYOUT, start, end));
    assert.equal(encoded.bytesU8.length, chunkObjectBytes(LAYOUT, start, end));
    const chunk = decodeChunk(LAYOUT, KEY, encoded.bytesU8);
    assert.equal(chunk.formatVersion, CHUNK_FORMAT_VERSION);
    assert.equal(chunk.modelId, 'model-a');
    assert.equal(chunk.layoutId, LAYOUT.layoutId);
    assert.deepEqual([chunk.startToken, chunk.endToken], [start, end]);
    assert.deepEqual(Array.from(chunk.tokenIds), tokensOf(seq).slice(start, end));
    assert.equal(chunk.checksumHex, encoded.checksumHex);
    for (const [i, s] of LAYOUT.kvSources.entries()) {
      const src = chunk.sources[i];
      assert.ok(src !== undefined);
      const { firstEntry, entryCount } = chunkEntryRange(s.ratio, start, end);
      assert.deepEqual([src.layer, src.ratio, src.firstEntry, src.entryCount], [s.layer, s.ratio, firstEntry, entryCount]);
      const want = packedRowsOf(seq, LAYOUT, s.layer, firstEntry, entryCount);
      assertSameBytes(src.mainKvU8, want.mainKvU8, `layer ${s.layer} main KV`);
      assertSameBytes(src.indexKU8, want.indexKU8, `layer ${s.layer} index K`);
      assert.equal(src.mainKvU8.buffer, encoded.bytesU8.buffer, 'decoded rows are views of the object bytes, not copies');
    }
    if (end === 85) assert.equal(chunk.sources[0]?.entryCount, 10, 'tokens [64, 85) complete ratio-2 entries 32..41; token 84 opens entry 42');
  }
});

test('the byte table: magic, version, header length, token range, dims, ids, source table, token ids, rows, SHA-256 trailer', () => {
  const { bytes, seq } = encodeRange(LAYOUT, 16, 35);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  const M = 'model-a'.length;
  const L = LAYOUT.layoutId.length;
  const H = 30 + M + L + 12 * 2;
  assert.equal(Buffer.from(bytes.subarray(0, 8)).toString('ascii'), 'CSA2CHNK');
  assert.equal(view.getUint16(8, true), 1);
  assert.equal(view.getUint32(10, true), H);
  assert.equal(chunkHeaderBytes(LAYOUT), H);
  assert.deepEqual([view.getUint32(14, true), view.getUint32(18, true)], [16, 35]);
  assert.deepEqual([view.getUint16(22, true), view.getUint16(24, true)], [32, 32]);
  assert.equal(view.getUint8(26), M);
  assert.equal(Buffer.from(bytes.subarray(27, 27 + M)).toString('ascii'), 'model-a');
  assert.equal(view.getUint8(27 + M), L);
  assert.equal(Buffer.from(bytes.subarray(28 + M, 28 + M + L)).toString('ascii'), LAYOUT.layoutId);
  assert.equal(view.getUint16(28 + M + L, true), 2);
  const table = 30 + M + L;
  assert.deepEqual(
    [view.getUint16(table, true), view.getUint16(table + 2, true), view.getUint32(table + 4, true), view.getUint32(table + 8, true)],
    [1, 2, 8, 9],
  );
  assert.deepEqual(
    [view.getUint16(table + 12, true), view.getUint16(table + 14, true), view.getUint32(table + 16, true), view.getUint32(table + 20, true)],
    [3, 1, 16, 19],
  );
  const ids = tokensOf(seq);
  for (let i = 0; i < 19; i++) assert.equal(view.getUint32(H + 4 * i, true), ids[16 + i]);
  // rows: layer 1 main (9 × 18 B), layer 1 index (9 × 17 B), layer 3 main (19 × 18 B), layer 3 index (19 × 17 B)
  assert.equal(bytes.length, H + 4 * 19 + 9 * (18 + 17) + 19 * (18 + 17) + 32);
  // The rows are the sources' packed bytes, in header order, copied as they are.
  const rowsAt = H + 4 * 19;
  const layer1 = packedRowsOf(seq, LAYOUT, 1, 8, 9);
  const layer3 = packedRowsOf(seq, LAYOUT, 3, 16, 19);
  assertSameBytes(bytes.subarray(rowsAt, bytes.length - 32), Buffer.concat([layer1.mainKvU8, layer1.indexKU8, layer3.mainKvU8, layer3.indexKU8]), 'rows');
  // The first main-KV row of layer 1 (entry 8), as csa2-core's dequantizer reads it: 16 payload bytes,
  // even element in the low nibble, then 2 E4M3 scales.
  const firstRow = dequantizeMainKvRows(bytes.subarray(rowsAt, rowsAt + 18), 32);
  const payload = bytes[rowsAt] ?? 0;
  const scale0 = bytes[rowsAt + 16] ?? 0;
  const e4m3 = (b: number): number => (((b >> 3) & 15) === 0 ? (b & 7) * 2 ** -9 : (8 + (b & 7)) * 2 ** (((b >> 3) & 15) - 10));
  const e2m1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6];
  const decode = (code: number): number => ((code & 8) !== 0 ? -1 : 1) * (e2m1[code & 7] ?? 0) * e4m3(scale0);
  assert.equal(decode(payload & 15), firstRow[0]);
  assert.equal(decode(payload >> 4), firstRow[1]);
  assert.equal(
    chunkTrailerHex(bytes),
    createHash('sha256')
      .update(bytes.subarray(0, bytes.length - 32))
      .digest('hex'),
  );
});

test('every flipped byte is refused: ArtifactCorruptError naming the key and an offset (UnsupportedVersionError in the version field)', () => {
  const { bytes } = encodeRange(LAYOUT, 8, 16);
  for (let i = 0; i < bytes.length; i++) {
    const bad = bytes.slice();
    bad[i] = (bad[i] ?? 0) ^ 0xff;
    if (i === 8 || i === 9) {
      assert.throws(
        () => decodeChunk(LAYOUT, KEY, bad),
        (e: unknown) => e instanceof UnsupportedVersionError && e.key === KEY,
        `byte ${i}`,
      );
    } else {
      assertCorrupt(
        () => decodeChunk(LAYOUT, KEY, bad),
        (e) => e.offset >= 0 && e.offset <= bytes.length,
        `byte ${i}`,
      );
    }
  }
  // Payload and checksum flips are found by the checksum, at its offset.
  for (const i of [bytes.length - 100, bytes.length - 33, bytes.length - 1]) {
    const bad = bytes.slice();
    bad[i] = (bad[i] ?? 0) ^ 0x01;
    assertCorrupt(
      () => decodeChunk(LAYOUT, KEY, bad),
      (e) => e.offset === bytes.length - 32 && /checksum/.test(e.message),
      `byte ${i}`,
    );
  }
});

test('a truncated object is refused at every length, at the offset where the data ran out', () => {
  const { bytes } = encodeRange(LAYOUT, 8, 16);
  for (let n = 0; n < bytes.length; n++) {
    assertCorrupt(
      () => decodeChunk(LAYOUT, KEY, bytes.subarray(0, n)),
      (e) => e.offset === n && /ends at byte/.test(e.message),
      `length ${n}`,
    );
  }
  const longer = new Uint8Array(bytes.length + 3);
  longer.set(bytes);
  assertCorrupt(
    () => decodeChunk(LAYOUT, KEY, longer),
    (e) => e.offset === bytes.length && /unexpected bytes/.test(e.message),
    'trailing bytes',
  );
});

test('another model, another layout and an unknown version are refused with their own errors', () => {
  const { bytes } = encodeRange(LAYOUT, 0, 16);
  const otherModel = createArtifactLayout({ ...LAYOUT, modelId: 'model-b' });
  assert.throws(
    () => decodeChunk(otherModel, KEY, bytes),
    (e: unknown) => e instanceof ModelMismatchError && e.key === KEY && /model-a/.test(e.message) && /model-b/.test(e.message),
  );
  const otherLayout = createArtifactLayout({
    ...LAYOUT,
    kvSources: [
      { layer: 1, ratio: 2 },
      { layer: 4, ratio: 1 },
    ],
  });
  assert.throws(
    () => decodeChunk(otherLayout, KEY, bytes),
    (e: unknown) => e instanceof ModelMismatchError && e.message.includes(LAYOUT.layoutId),
  );
  for (const version of [0, 2, 0xffff]) {
    const bad = bytes.slice();
    new DataView(bad.buffer).setUint16(8, version, true);
    assert.throws(
      () => decodeChunk(LAYOUT, KEY, resealed(bad)),
      (e: unknown) => e instanceof UnsupportedVersionError && e.version === version && e.key === KEY,
    );
  }
  const notAChunk = resealed(Uint8Array.from(Buffer.from(`CSA2MNFT${'\u0000'.repeat(200)}`)));
  assertCorrupt(
    () => decodeChunk(LAYOUT, KEY, notAChunk),
    (e) => e.offset === 4 && /magic/.test(e.message),
    'magic',
  );
});

test('a resealed header that contradicts itself is still refused (structure is checked, not only the checksum)', () => {
  const { bytes } = encodeRange(LAYOUT, 16, 32);
  const M = 'model-a'.length;
  const table = 30 + M + LAYOUT.layoutId.length;
  const cases: Array<[number, (v: DataView) => void, RegExp]> = [
    [table + 4, (v) => v.setUint32(table + 4, 9, true), /first entry/],
    [table + 20, (v) => v.setUint32(table + 20, 15, true), /entries/],
    [18, (v) => v.setUint32(18, 16, true), /end token/],
    [22, (v) => v.setUint16(22, 24, true), /multiple of 16/],
    [10, (v) => v.setUint32(10, 999, true), /header length/],
  ];
  for (const [offset, mutate, reason] of cases) {
    const bad = bytes.slice();
    mutate(new DataView(bad.buffer));
    assertCorrupt(
      () => decodeChunk(LAYOUT, KEY, resealed(bad)),
      (e) => e.offset === offset && reason.test(e.message),
      `field at ${offset}`,
    );
  }
});

test('encode refuses token ids outside [0, 2^32) and rows of the wrong byte length; it copies any row bytes as given', () => {
  const seq = syntheticSequence(LAYOUT, 16, 3);
  const content = chunkContentOf(seq, LAYOUT, 0, 16);
  for (const bad of [2 ** 32, -1, 1.5, Number.NaN]) {
    const ids = Array.from(content.tokenIds);
    ids[5] = bad;
    assert.throws(
      () => encodeChunk(LAYOUT, { ...content, tokenIds: ids }),
      (e: unknown) => e instanceof InputError && /index 5/.test(e.message) && /2\^32/.test(e.message),
    );
  }
  const maxId = encodeChunk(LAYOUT, { ...content, tokenIds: new Array<number>(16).fill(2 ** 32 - 1) });
  assert.equal(decodeChunk(LAYOUT, KEY, maxId.bytesU8).tokenIds[0], 2 ** 32 - 1);
  const typed = encodeChunk(LAYOUT, { ...content, tokenIds: Uint32Array.from(content.tokenIds) });
  assert.deepEqual(typed.bytesU8, encodeChunk(LAYOUT, content).bytesU8, 'a Uint32Array of ids encodes like a number[]');
  const src0 = content.sources[0];
  assert.ok(src0 !== undefined);
  const rest = content.sources.slice(1);
  assert.throws(
    () => encodeChunk(LAYOUT, { ...content, sources: [{ ...src0, mainKvU8: src0.mainKvU8.subarray(LAYOUT.mainKvRowBytes) }, ...rest] }),
    (e: unknown) => e instanceof ShapeError && /mainKvU8/.test(e.message),
  );
  assert.throws(
    () => encodeChunk(LAYOUT, { ...content, sources: [{ ...src0, indexKU8: src0.indexKU8.subarray(1) }, ...rest] }),
    (e: unknown) => e instanceof ShapeError && /indexKU8/.test(e.message),
  );
  assert.throws(() => encodeChunk(LAYOUT, { ...content, endToken: 17 }), ShapeError);
  const anyBytes = { ...src0, mainKvU8: src0.mainKvU8.map((_, i) => (i * 37) & 0xff), indexKU8: new Uint8Array(src0.indexKU8.length).fill(0xff) };
  const chunk = decodeChunk(LAYOUT, KEY, encodeChunk(LAYOUT, { ...content, sources: [anyBytes, ...rest] }).bytesU8);
  assertSameBytes(chunk.sources[0]?.mainKvU8 ?? new Uint8Array(), anyBytes.mainKvU8, 'arbitrary main-KV bytes');
  assertSameBytes(chunk.sources[0]?.indexKU8 ?? new Uint8Array(), anyBytes.indexKU8, 'arbitrary index-K bytes');
});

test('encoding is deterministic: equal contents give equal bytes', () => {
  const a = encodeRange(LAYOUT, 16, 32, 21).bytes;
  const b = encodeRange(LAYOUT, 16, 32, 21).bytes;
  assert.deepEqual(a, b);
  assert.notDeepEqual(encodeRange(LAYOUT, 16, 32, 22).bytes, a);
});

test('encodeChunkAsync and decodeChunkAsync (hashing in slices) give the same bytes, checksums and refusals as the synchronous ones', async () => {
  const big = createArtifactLayout({
    modelId: 'model-a',
    headDim: 512,
    indexHeadDim: 128,
    kvSources: [
      { layer: 2, ratio: 2 },
      { layer: 20, ratio: 1 },
    ],
  });
  const seq = syntheticSequence(big, 768, 17);
  const content = chunkContentOf(seq, big, 256, 768);
  const sync = encodeChunk(big, content);
  assert.ok(sync.bytesU8.length > 2 * CHUNK_HASH_SLICE_BYTES, `${sync.bytesU8.length} bytes: several hash slices`);
  const into = new Uint8Array(sync.bytesU8.length + 5);
  const viaAsync = await encodeChunkAsync(big, content, { into });
  assert.deepEqual(viaAsync.bytesU8, sync.bytesU8);
  assert.equal(viaAsync.checksumHex, sync.checksumHex);
  assert.equal(viaAsync.bytesU8.buffer, into.buffer, 'encoded into the given buffer');
  const decoded = await decodeChunkAsync(big, KEY, sync.bytesU8);
  assert.equal(decoded.checksumHex, sync.checksumHex);
  assert.deepEqual(Array.from(decoded.tokenIds), Array.from(decodeChunk(big, KEY, sync.bytesU8).tokenIds));
  for (const at of [100, sync.bytesU8.length - 200, sync.bytesU8.length - 1]) {
    const bad = sync.bytesU8.slice();
    bad[at] = (bad[at] ?? 0) ^ 0x01;
    await assert.rejects(
      decodeChunkAsync(big, KEY, bad),
      (e: unknown) => e instanceof ArtifactCorruptError && e.offset === bad.length - 32 && /checksum/.test(e.message),
      `byte ${at}`,
    );
  }
  await assert.rejects(decodeChunkAsync(big, KEY, sync.bytesU8.subarray(0, 50)), (e: unknown) => e instanceof ArtifactCorruptError && e.offset === 50);
  await assert.rejects(encodeChunkAsync(big, { ...content, endToken: 769 }), ShapeError);
  await assert.rejects(encodeChunkAsync(big, content, { into: new Uint8Array(10) }), RangeError);
});
