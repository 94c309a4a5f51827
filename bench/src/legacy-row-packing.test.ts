/**
 * @module format/row-packing.test
 * format/row-packing: property tests that packed FP4 rows unpack to the same bits, including the blocks re-quantization alone gets wrong, and refusals.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  SeededRandom,
  dequantizeIndexKRows,
  dequantizeMainKvRows,
  fakeQuantFp4E4m3Block16,
  fakeQuantFp4Ue8m0Block32,
  quantizeIndexKRows,
  quantizeMainKvRows,
} from '@csa2/core';
import { RowNotRepresentableError, packIndexKRows, packMainKvRows, unpackIndexKRows, unpackMainKvRows } from './legacy-row-packing.js';
import { assertSameBits, randomFakeQuantRows } from '@csa2/artifacts/testing';

function sameBits(a: Float32Array, b: Float32Array): boolean {
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  return x.length === y.length && x.every((v, i) => v === y[i]);
}

test('property: 40 000 random main-KV blocks (zero, E4M3-subnormal and normal scales) pack and unpack bit-exactly', () => {
  const rng = new SeededRandom(1);
  const values = randomFakeQuantRows(rng, 5000, 128, 'main-kv');
  const { bytesU8, searchedBlocks } = packMainKvRows(values, 128);
  assert.equal(bytesU8.length, 5000 * (64 + 8));
  assertSameBits(unpackMainKvRows(bytesU8, 128), values, 'main KV');
  // The search path is exercised: re-quantizing alone loses values in some subnormal-scale blocks.
  assert.ok(searchedBlocks > 0, 'expected some blocks that re-quantization alone does not reproduce');
  assert.equal(sameBits(dequantizeMainKvRows(quantizeMainKvRows(values, 128), 128), values), false);
});

test('property: 20 000 random index-K blocks pack and unpack bit-exactly, and re-quantization alone already does', () => {
  const rng = new SeededRandom(2);
  const values = randomFakeQuantRows(rng, 5000, 128, 'index-k');
  const { bytesU8, searchedBlocks } = packIndexKRows(values, 128);
  assert.equal(bytesU8.length, 5000 * (64 + 4));
  assertSameBits(unpackIndexKRows(bytesU8, 128), values, 'index K');
  assert.equal(searchedBlocks, 0);
});

test('property: every E4M3 scale byte with random codes (any max code) round-trips through pack', () => {
  const rng = new SeededRandom(3);
  for (let scaleByte = 0; scaleByte < 0x7f; scaleByte++) {
    for (let trial = 0; trial < 40; trial++) {
      const packed = new Uint8Array(8 + 1);
      const maxCode = 1 + (rng.nextU32() % 7); // block max among codes 1..7 (0.5 .. 6)
      for (let i = 0; i < 8; i++) {
        const lo = (rng.nextU32() % (maxCode + 1)) | (rng.nextU32() & 8);
        const hi = (rng.nextU32() % (maxCode + 1)) | (rng.nextU32() & 8);
        packed[i] = lo | (hi << 4);
      }
      packed[8] = scaleByte;
      const values = dequantizeMainKvRows(packed, 16);
      assertSameBits(unpackMainKvRows(packMainKvRows(values, 16).bytesU8, 16), values, `scale byte 0x${scaleByte.toString(16)}`);
    }
  }
});

test('property: every UE8M0 scale byte with finite values and random codes round-trips through pack', () => {
  const rng = new SeededRandom(4);
  for (let scaleByte = 0; scaleByte <= 252; scaleByte++) {
    for (let trial = 0; trial < 20; trial++) {
      const packed = new Uint8Array(16 + 1);
      const maxCode = 1 + (rng.nextU32() % 7);
      for (let i = 0; i < 16; i++)
        packed[i] = (rng.nextU32() % (maxCode + 1)) | (rng.nextU32() & 8) | (((rng.nextU32() % (maxCode + 1)) | (rng.nextU32() & 8)) << 4);
      packed[16] = scaleByte;
      const values = dequantizeIndexKRows(packed, 32);
      assertSameBits(unpackIndexKRows(packIndexKRows(values, 32).bytesU8, 32), values, `scale byte ${scaleByte}`);
    }
  }
});

test('a subnormal-scale main-KV block whose max is 4·s: the quantizer loses it, the packer keeps it', () => {
  // amax/6 = 1.6·2^-9 rounds up to the E4M3 subnormal 2·2^-9, so the block max becomes code 4 (4.0).
  const raw = new Float32Array(16).fill(0.25 * 2 ** -9);
  raw[0] = 6 * 1.6 * 2 ** -9;
  const values = fakeQuantFp4E4m3Block16(raw.slice());
  assert.equal(values[0], 4 * 2 * 2 ** -9);
  const requantized = dequantizeMainKvRows(quantizeMainKvRows(values, 16), 16);
  assert.equal(requantized[0], 6 * 2 ** -9, 're-quantization picks scale 2^-9 and clamps');
  const { bytesU8, searchedBlocks } = packMainKvRows(values, 16);
  assert.equal(searchedBlocks, 1);
  assertSameBits(unpackMainKvRows(bytesU8, 16), values, 'packed');
});

test('an MXFP4 block with max code 3 gets half the scale and doubled codes: other bytes, same values', () => {
  // amax 3.4 → scale ceil_pow2(3.4/6) = 1, 3.4 rounds to code 3 (3.0): the block max is 3·s.
  const raw = new Float32Array(32);
  for (let i = 0; i < 32; i++) raw[i] = [0, 0.5, -1, 1.5, 2, -3][i % 6] ?? 0;
  raw[0] = 3.4;
  const original = quantizeIndexKRows(raw, 32);
  assert.equal(original[16], 127, 'original scale 2^0');
  const values = dequantizeIndexKRows(original, 32);
  assert.equal(values[0], 3);
  const repacked = packIndexKRows(values, 32).bytesU8;
  assert.equal(repacked[16], 126, 'repacked scale 2^-1 (3 = 6·2^-1)');
  assert.notDeepEqual(repacked, original);
  assertSameBits(unpackIndexKRows(repacked, 32), values, 'repacked');
});

test('packing is a pure function of the values: packing unpacked rows reproduces the bytes', () => {
  const rng = new SeededRandom(5);
  const main = randomFakeQuantRows(rng, 300, 64, 'main-kv');
  const bytes = packMainKvRows(main, 64).bytesU8;
  assert.deepEqual(packMainKvRows(unpackMainKvRows(bytes, 64), 64).bytesU8, bytes);
  const index = randomFakeQuantRows(rng, 300, 64, 'index-k');
  const ibytes = packIndexKRows(index, 64).bytesU8;
  assert.deepEqual(packIndexKRows(unpackIndexKRows(ibytes, 64), 64).bytesU8, ibytes);
});

test('rows that are not fake-quantized values are refused, naming the row and block', () => {
  const rng = new SeededRandom(6);
  const main = randomFakeQuantRows(rng, 4, 32, 'main-kv');
  main[2 * 32 + 17] = 0.3; // row 2, block 1: 0.3 is no E2M1 value times an E4M3 scale
  main[2 * 32 + 16] = 6; // …with a block max of 6 (scale 1) next to it
  assert.throws(
    () => packMainKvRows(main, 32),
    (e: unknown) => e instanceof RowNotRepresentableError && e.code === 'cache-format' && e.row === 2 && e.block === 1 && /main-KV/.test(e.message),
  );
  for (const bad of [Number.NaN, Number.POSITIVE_INFINITY]) {
    const index = randomFakeQuantRows(rng, 2, 32, 'index-k');
    index[40] = bad;
    assert.throws(
      () => packIndexKRows(index, 32),
      (e: unknown) => e instanceof RowNotRepresentableError && e.row === 1 && e.block === 0,
    );
  }
  const index = fakeQuantFp4Ue8m0Block32(new Float32Array(32).fill(1));
  index[4] = 1.25; // the block max 1.25 is no E2M1 magnitude times a power of two
  assert.throws(() => packIndexKRows(index, 32), RowNotRepresentableError);
});
