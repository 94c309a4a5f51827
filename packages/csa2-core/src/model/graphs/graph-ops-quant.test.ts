/**
 * Unit tests of the GraphOps fake quantizers against the bit-exact codecs of numerics/formats.ts:
 *   fakeQuantFp8Block32      ↔ fakeQuantFp8Ue8m0Block32  (window KV, csa2 §2.3 C)
 *   fakeQuantFp4E4m3Block16  ↔ fakeQuantFp4E4m3Block16   (main compressed KV, §2.3 A)
 *   fakeQuantFp4Ue8m0Block32 ↔ fakeQuantFp4Ue8m0Block32  (index q/k, MXFP4, §2.3 B)
 * Tolerance: none. Every step is exact or a single correctly rounded fp32 operation on both sides
 * (amax, the fp32 amax·(1/max) or amax/6, a power of two or an E4M3 cast, x/s, a clamp, an RNE cast,
 * a product by a power of two or an E4M3 scale), so the outputs must match bit for bit, signed zeros
 * included. The quantizers do not depend on the numerics mode; both modes are run and must agree.
 *
 * Each input mixes random rows (block magnitudes spread over many binades) with the edge cases:
 * all-zero blocks, amax under the floor, amax exactly at a scale boundary and one fp32 ulp either side,
 * element values exactly on E4M3 / E2M1 rounding midpoints, a scale that rounds down (values clamp at
 * ±6), a scale that saturates at 448, and scales in the E4M3 subnormal range.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { f32 } from '../../runtime/ort-session.js';
import { SeededRandom } from '../../weights/init-model.js';
import {
  FP4_E2M1_MAX_INV_F32,
  FP8_E4M3_MAX_INV_F32,
  decodeE4m3,
  fakeQuantFp4E4m3Block16,
  fakeQuantFp4Ue8m0Block32,
  fakeQuantFp8Ue8m0Block32,
  fastRoundScale,
} from '../../numerics/formats.js';
import { bitMismatches, describe, outF32, runEmitter } from '../../testing/graph-harness.js';
import type { NumericsMode } from './graph-ops.js';

const MODES: readonly NumericsMode[] = ['bf16', 'fp32'];
const E2M1_TIES = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5];

/** Blocks of `size` random normals, each block scaled by 2^u, u uniform in [lo, hi). */
function randomBlocks(rng: SeededRandom, blocks: number, size: number, lo: number, hi: number): number[] {
  const out: number[] = [];
  for (let b = 0; b < blocks; b++) {
    const scale = 2 ** (lo + (hi - lo) * rng.nextUniform());
    for (let i = 0; i < size; i++) out.push(rng.nextNormal() * scale);
  }
  return out;
}

/** One block of `size`: `values` then zeros, with `amax` (signed as given) placed last. */
function block(size: number, values: readonly number[], amax: number): number[] {
  const out = new Array<number>(size).fill(0);
  values.slice(0, size - 1).forEach((v, i) => (out[i] = v));
  out[size - 1] = amax;
  return out;
}

/** The midpoints between consecutive positive finite E4M3 values (below 448), the RNE ties. */
function e4m3Midpoints(): number[] {
  const values: number[] = [];
  for (let byte = 0; byte <= 0x7e; byte++) values.push(decodeE4m3(byte));
  return values.slice(1).map((v, i) => (v + (values[i] as number)) / 2);
}

async function runQuant(
  name: string,
  mode: NumericsMode,
  x: Float32Array,
  inDims: readonly number[],
  emit: 'fp8' | 'fp4e4m3' | 'fp4ue8m0',
  lastDim: number,
): Promise<Float32Array> {
  const out = await runEmitter(name, mode, { x: f32(x, inDims) }, (c) => {
    const v = c.inputs['x']!;
    const outDims = [-1, ...inDims.slice(1)];
    const y =
      emit === 'fp8'
        ? c.ops.fakeQuantFp8Block32(v, lastDim, outDims)
        : emit === 'fp4e4m3'
          ? c.ops.fakeQuantFp4E4m3Block16(v, lastDim, outDims)
          : c.ops.fakeQuantFp4Ue8m0Block32(v, lastDim, outDims);
    c.output('y', y, inDims);
  });
  return outF32(out, 'y');
}

test('fakeQuantFp8Block32 (E4M3, UE8M0 scale per 32) is bit-exact with fakeQuantFp8Ue8m0Block32', async () => {
  const rng = new SeededRandom(1001);
  const D = 64;
  const v: number[] = [];
  v.push(...randomBlocks(rng, 16, 32, -12, 12)); // 8 rows of random blocks from 2^-12 to 2^12
  v.push(...block(32, [], 0), ...block(32, TINY, 5e-5)); // zero block; amax < 1e-4 floor
  // E4M3 ties under scale 2^k: every midpoint (subnormal 2^-10 → 0, 1.5·2^-9 → 2·2^-9, …, 432 → 448 …)
  const mids = e4m3Midpoints();
  for (const k of [0, -7, 5]) {
    for (let start = 0; start < mids.length; start += 31) {
      const vals = mids.slice(start, start + 31).map((m) => m * 2 ** k * (start % 2 === 0 ? 1 : -1));
      v.push(...block(32, vals, 400 * 2 ** k)); // amax 400·2^k → scale 2^k exactly; 400 is itself a tie (→ 384)
    }
  }
  // amax exactly 448·2^k and one fp32 ulp either side: the scale boundary, values at saturation
  for (const k of [0, -3, 4]) {
    for (const f of [1, 1 + 2 ** -23, 1 - 2 ** -24]) {
      const amax = Math.fround(448 * 2 ** k * f);
      v.push(...block(32, [amax * 0.999, -amax, amax / 3, amax * 2 ** -12, amax * 2 ** -10], -amax));
    }
  }
  v.push(...block(32, [-0, 0, -1e-30], 1)); // signed zeros and a value that flushes to -0
  while (v.length % D !== 0) v.push(rng.nextNormal());
  const x = Float32Array.from(v);
  const rows = x.length / D;
  const expected = fakeQuantFp8Ue8m0Block32(Float32Array.from(x), D);
  for (const mode of MODES) {
    const y = await runQuant(`fp8_${mode}`, mode, x, [rows, D], 'fp8', D);
    const bad = bitMismatches(y, expected);
    assert.deepEqual(bad, [], describe(`fp8 (${mode})`, bad));
  }
  // independent values: scale 1 (amax 400): 1.0625 → 1 (tie, even), 1.1875 → 1.25 (tie, even), 2^-10 → 0, 1.5·2^-9 → 2^-8
  const hand = Float32Array.from(block(32, [1.0625, 1.1875, 2 ** -10, 1.5 * 2 ** -9, 17, 19, 440], 400));
  const y = await runQuant('fp8_hand', 'bf16', hand, [1, 32], 'fp8', 32);
  assert.deepEqual(Array.from(y.subarray(0, 7)), [1, 1.25, 0, 2 ** -8, 16, 20, 448]);
  assert.equal(y[31], 384);
  assert.equal(fastRoundScale(400, FP8_E4M3_MAX_INV_F32), 1);
  // the test can fail: the unquantized input is not the output
  assert.ok(bitMismatches(y, hand).length > 0);
  // amax 5e-5 under the 1e-4 floor: the scale is 2^-22 (not 2^-23), so 2^-32 = 2^-10·s is an E4M3 subnormal tie → 0,
  // 3·2^-33 = 0.75·2^-9·s → 2^-9·s = 2^-31, -1e-9 ≈ -2.15·2^-9·s → -2·2^-9·s = -2^-30
  const tiny = await runQuant('fp8_tiny', 'fp32', Float32Array.from(block(32, TINY, 5e-5)), [1, 32], 'fp8', 32);
  assert.equal(fastRoundScale(1e-4, FP8_E4M3_MAX_INV_F32), 2 ** -22);
  assert.deepEqual(Array.from(tiny.subarray(3, 6)), [-(2 ** -30), 0, 2 ** -31]);
});

/** A block under the FP8 amax floor, with values on the E4M3 subnormal grid of its floored scale 2^-22. */
const TINY = [3e-5, -7e-6, 1e-7, -1e-9, 2 ** -32, 3 * 2 ** -33];

test('fakeQuantFp4E4m3Block16 (E2M1, E4M3 scale per 16) is bit-exact with fakeQuantFp4E4m3Block16', async () => {
  const rng = new SeededRandom(1002);
  const D = 64;
  const v: number[] = [];
  v.push(...randomBlocks(rng, 32, 16, -8, 6)); // 8 rows
  v.push(...block(16, [], 0)); // zero block: floor 6·2^-9 → scale 2^-9 (smallest E4M3 subnormal), all 0
  v.push(...block(16, [1e-3, -2e-3, 3e-4, -5e-3, 9e-4], 4e-3)); // amax under the floor: x/s = x·512, E2M1 of that
  // E2M1 ties at scale 1 (amax 6) and 0.5 (amax 3), both signs, plus the grid values
  for (const s of [1, 0.5]) {
    v.push(
      ...block(
        16,
        [...E2M1_TIES, ...E2M1_TIES.map((t) => -t)].map((t) => t * s),
        6 * s,
      ),
    );
    v.push(
      ...block(
        16,
        [0.5, 1, 1.5, 2, 3, 4, -0.5, -1, -1.5, -2, -3, -4, -0, 0, -6].map((t) => t * s),
        6 * s,
      ),
    );
  }
  // the E4M3 scale rounds down (amax/6 = 1.06 → 1): |x|/s up to 6.36 clamps to 6; and rounds up (1.07 → 1.125)
  v.push(...block(16, [6.36, -6.3, 6.0, 5.5, 5.0, 4.9], -6.36));
  v.push(...block(16, [6.42, -6.3, 5.0, 3.1], 6.42));
  // scale saturates: amax/6 > 448 → s = 448, values beyond 6·448 = 2688 clamp
  v.push(...block(16, [3000, -2700, 2688, 1000, 100], -3100));
  // scales in the E4M3 subnormal range, including an RNE tie of the scale itself (amax/6 = 4.5·2^-9 → 4·2^-9)
  v.push(...block(16, [0.01, -0.02, 0.004, 0.033], 27 * 2 ** -9));
  v.push(...block(16, [0.01, -0.02, 0.004, 0.033], 0.05));
  while (v.length % D !== 0) v.push(rng.nextNormal());
  const x = Float32Array.from(v);
  const rows = x.length / D;
  const expected = fakeQuantFp4E4m3Block16(Float32Array.from(x), D);
  for (const mode of MODES) {
    const y = await runQuant(`fp4e4m3_${mode}`, mode, x, [rows, D], 'fp4e4m3', D);
    const bad = bitMismatches(y, expected);
    assert.deepEqual(bad, [], describe(`fp4/e4m3 (${mode})`, bad));
  }
  // independent values: scale 1, the spec's tie list (csa2 §2.3): 0.25→0, 0.75→1, 1.25→1, 1.75→2, 2.5→2, 3.5→4, 5→4
  const hand = Float32Array.from(block(16, E2M1_TIES, 6));
  const y = await runQuant('fp4e4m3_hand', 'bf16', hand, [1, 16], 'fp4e4m3', 16);
  assert.deepEqual(Array.from(y.subarray(0, 7)), [0, 1, 1, 2, 2, 4, 4]);
  // scale rounded down to 1: 6.36 clamps to 6
  const down = await runQuant('fp4e4m3_down', 'bf16', Float32Array.from(block(16, [6.36], -6.36)), [1, 16], 'fp4e4m3', 16);
  assert.deepEqual([down[0], down[15]], [6, -6]);
  assert.ok(bitMismatches(y, hand).length > 0, 'the test can fail: the output is not the input');
});

test('fakeQuantFp4Ue8m0Block32 (MXFP4: E2M1, UE8M0 scale per 32) is bit-exact with fakeQuantFp4Ue8m0Block32, rank 3', async () => {
  const rng = new SeededRandom(1003);
  const heads = 2;
  const dI = 64;
  const v: number[] = [];
  v.push(...randomBlocks(rng, 16, 32, -20, 20)); // 4 tokens × 2 heads
  v.push(...block(32, [], 0)); // zero block: scale 2^-126
  // amax exactly 6·2^k → scale 2^k, with the E2M1 ties; and one ulp above → scale 2^(k+1)
  for (const k of [0, -5, 7]) {
    const ties = [...E2M1_TIES, ...E2M1_TIES.map((t) => -t), 0.5, 1.5, 3, -0];
    v.push(
      ...block(
        32,
        ties.map((t) => t * 2 ** k),
        6 * 2 ** k,
      ),
    );
    v.push(
      ...block(
        32,
        ties.map((t) => t * 2 ** k),
        Math.fround(6 * 2 ** k * (1 + 2 ** -23)),
      ),
    );
  }
  // amax near the floor 6·2^-126: the scale stays 2^-126 and the results are fp32 subnormals
  v.push(...block(32, [5e-38, -3e-38, 2e-38, 6e-39, -6e-39, 1e-39], 7e-38)); // ±6e-39 → ±0.5·2^-126 = ±2^-127
  while (v.length % (heads * dI) !== 0) v.push(rng.nextNormal());
  const x = Float32Array.from(v);
  const S = x.length / (heads * dI);
  const expected = fakeQuantFp4Ue8m0Block32(Float32Array.from(x), dI);
  for (const mode of MODES) {
    const y = await runQuant(`mxfp4_${mode}`, mode, x, [S, heads, dI], 'fp4ue8m0', dI);
    const bad = bitMismatches(y, expected);
    assert.deepEqual(bad, [], describe(`mxfp4 (${mode})`, bad));
  }
  // independent values: amax 6 → s = 1 (fp32(6·fp32(1/6)) = 1): the tie list; amax 6·(1+2^-23) → s = 2
  assert.equal(fastRoundScale(6, FP4_E2M1_MAX_INV_F32), 1);
  const hand = Float32Array.from([...block(32, E2M1_TIES, 6), ...block(32, [2.5, 5, 7, 11], Math.fround(6 * (1 + 2 ** -23)))]);
  const y = await runQuant('mxfp4_hand', 'bf16', hand, [1, 64], 'fp4ue8m0', 64);
  assert.deepEqual(Array.from(y.subarray(0, 7)), [0, 1, 1, 2, 2, 4, 4]);
  assert.deepEqual(Array.from(y.subarray(32, 36)), [2, 4, 8, 12]); // s = 2: 1.25→1, 2.5→2, 3.5→4, 5.5→6
  assert.ok(bitMismatches(y, hand).length > 0, 'the test can fail: the output is not the input');
});
