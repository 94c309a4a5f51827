/**
 * The graph packers against the TypeScript codecs of numerics/formats (csa2 §2.3): packMainKv /
 * packIndexK of raw rows must give exactly the bytes quantizeMainKvRows / quantizeIndexKRows give (the
 * quantizer from scratch: scale from amax, E2M1 codes, -0 kept as code 8), and unpackMainKv /
 * unpackIndexK of those bytes exactly the fake quantizer's values, bit for bit. Tolerance: none — every
 * step is exact or one correctly rounded float32 operation on both sides.
 *
 * Inputs: random blocks spread over many binades, plus all-zero blocks, amax under the floors, E2M1
 * rounding ties, a scale that rounds down (clamping at ±6), a saturating E4M3 scale, E4M3 subnormal
 * scales, fp32-subnormal MXFP4 results and signed zeros (including values that round to -0).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { f32, u8 } from '../../runtime/ort-session.js';
import { SeededRandom } from '../../weights/init-model.js';
import {
  dequantizeIndexKRows,
  dequantizeMainKvRows,
  fakeQuantFp4E4m3Block16,
  fakeQuantFp4Ue8m0Block32,
  quantizeIndexKRows,
  quantizeMainKvRows,
} from '../../numerics/formats.js';
import { bitMismatches, describe, outF32, runEmitter } from '../../testing/graph-harness.js';
import { packIndexK, packMainKv, unpackIndexK, unpackMainKv } from './packed-ops.js';

const TIES = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5];

function block(size: number, values: readonly number[], amax: number): number[] {
  const out = new Array<number>(size).fill(0);
  values.slice(0, size - 1).forEach((v, i) => (out[i] = v));
  out[size - 1] = amax;
  return out;
}

function rows(rng: SeededRandom, width: number, blockSize: number, lo: number, hi: number, special: readonly number[][]): Float32Array {
  const v: number[] = [];
  for (let b = 0; b < 48; b++) {
    const scale = 2 ** (lo + (hi - lo) * rng.nextUniform());
    for (let i = 0; i < blockSize; i++) v.push(rng.nextNormal() * scale);
  }
  for (const s of special) v.push(...s);
  while (v.length % width !== 0) v.push(rng.nextNormal());
  return Float32Array.from(v);
}

function sameBytes(actual: Uint8Array, expected: Uint8Array, label: string): void {
  assert.equal(actual.length, expected.length, `${label}: length`);
  const bad: number[] = [];
  for (let i = 0; i < actual.length && bad.length < 5; i++) if (actual[i] !== expected[i]) bad.push(i);
  assert.deepEqual(bad, [], `${label}: bytes differ at ${bad.map((i) => `${i} (${actual[i]} vs ${expected[i]})`).join(', ')}`);
}

async function packInGraph(kind: 'main' | 'index', x: Float32Array, width: number): Promise<Uint8Array> {
  const out = await runEmitter(`pack_${kind}`, 'bf16', { x: f32(x, [x.length / width, width]) }, (c) => {
    const packed = kind === 'main' ? packMainKv(c.ops, c.inputs['x']!, width) : packIndexK(c.ops, c.inputs['x']!, width);
    c.output('y', packed, ['rows', kind === 'main' ? width / 2 + width / 16 : width / 2 + width / 32], 'uint8');
  });
  const y = out['y'];
  assert.ok(y !== undefined && y.type === 'uint8');
  return y.data;
}

async function unpackInGraph(kind: 'main' | 'index', bytes: Uint8Array, width: number): Promise<Float32Array> {
  const rowBytes = kind === 'main' ? width / 2 + width / 16 : width / 2 + width / 32;
  const out = await runEmitter(`unpack_${kind}`, 'bf16', { b: u8(bytes, [bytes.length / rowBytes, rowBytes]) }, (c) => {
    c.output('y', kind === 'main' ? unpackMainKv(c.g, c.inputs['b']!, width) : unpackIndexK(c.g, c.inputs['b']!, width), ['rows', width]);
  });
  return outF32(out, 'y');
}

test('packMainKv gives the E2M1 + E4M3/16 quantizer bytes; unpackMainKv gives the fake-quantized values, bit for bit', async () => {
  const D = 64;
  const special = [
    block(16, [], 0), // zero block: scale 2^-9, all +0
    block(16, [-0, -1e-6, 1e-6, -0], 2e-3), // under the floor; values rounding to -0 keep the sign
    block(16, [...TIES, ...TIES.map((t) => -t)], 6), // E2M1 ties at scale 1
    block(16, [6.36, -6.3, 6.0, 5.5, 5.0], -6.36), // the scale rounds down: clamps at ±6
    block(16, [3000, -2700, 2688, 1000], -3100), // the scale saturates at 448
    block(16, [0.01, -0.02, 0.004, 0.033], 27 * 2 ** -9), // E4M3 subnormal scale (an RNE tie of the scale)
    block(16, [0.01, -0.02, 0.004, 0.033], 0.05),
  ];
  const x = rows(new SeededRandom(2001), D, 16, -10, 8, special);
  const bytes = await packInGraph('main', x, D);
  sameBytes(bytes, quantizeMainKvRows(x, D), 'main-KV bytes');
  const values = await unpackInGraph('main', bytes, D);
  const expected = fakeQuantFp4E4m3Block16(Float32Array.from(x), D);
  const bad = bitMismatches(values, expected);
  assert.deepEqual(bad, [], describe('unpacked main KV', bad));
  assert.deepEqual(bitMismatches(dequantizeMainKvRows(bytes, D), expected), []);
  assert.ok(bitMismatches(values, x).length > 0, 'the test can fail: quantizing changes the values');
});

test('packIndexK gives the MXFP4 (E2M1 + UE8M0/32) quantizer bytes; unpackIndexK gives the fake-quantized values, bit for bit', async () => {
  const dI = 64;
  const special = [
    block(32, [], 0), // zero block: scale 2^-126
    block(32, [...TIES, ...TIES.map((t) => -t), -0, 0.5, -3], 6), // ties at scale 1
    block(32, [...TIES.map((t) => t * 2 ** 20)], Math.fround(6 * 2 ** 20 * (1 + 2 ** -23))), // one ulp above: scale 2^21
    block(32, [5e-38, -3e-38, 2e-38, 6e-39, -6e-39, -1e-45], 7e-38), // results in fp32 subnormals, a -0
  ];
  const x = rows(new SeededRandom(2002), dI, 32, -30, 30, special);
  const bytes = await packInGraph('index', x, dI);
  sameBytes(bytes, quantizeIndexKRows(x, dI), 'index-K bytes');
  const values = await unpackInGraph('index', bytes, dI);
  const expected = fakeQuantFp4Ue8m0Block32(Float32Array.from(x), dI);
  const bad = bitMismatches(values, expected);
  assert.deepEqual(bad, [], describe('unpacked index K', bad));
  assert.deepEqual(bitMismatches(dequantizeIndexKRows(bytes, dI), expected), []);
  assert.ok(bitMismatches(values, x).length > 0, 'the test can fail: quantizing changes the values');
});
