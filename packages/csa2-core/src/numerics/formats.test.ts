import { test } from 'node:test';
import assert from 'node:assert/strict';
import { roundBf16 } from './bf16.js';
import {
  E2M1_VALUES,
  FP4_E2M1_MAX_INV_F32,
  FP4_E4M3_AMAX_FLOOR,
  FP4_UE8M0_AMAX_FLOOR,
  FP8_E4M3_MAX_INV_F32,
  FP8_UE8M0_AMAX_FLOOR_F32,
  decodeE2m1,
  decodeE4m3,
  decodeUe8m0,
  dequantizeIndexKRows,
  dequantizeMainKvRows,
  dequantizeWindowKvRows,
  encodeE2m1,
  encodeE4m3,
  encodeUe8m0,
  fakeQuantFp4E4m3Block16,
  fakeQuantFp4Ue8m0Block32,
  fakeQuantFp8Ue8m0Block32,
  fastRoundScale,
  indexKRowBytes,
  mainKvRowBytes,
  packNibbles,
  quantizeIndexKRows,
  quantizeMainKvRows,
  quantizeWindowKvRows,
  unpackNibbles,
  windowKvRowBytes,
} from './formats.js';
import { ShapeError } from '../errors.js';
import { seededUniform } from '../weights/init-model.js';

// ---------------------------------------------------------------------------------------------
// helpers: deterministic random bf16 rows and an independent float64 brute-force oracle

function gaussian(rand: () => number): number {
  const u = Math.max(rand(), 1e-12);
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * rand());
}

/** Rows of bf16 values mixing magnitudes, all-zero blocks, tiny values, outliers and negative zeros. */
function randomBf16Rows(seed: number, rows: number, rowLength: number, blockElements: number): Float32Array {
  const rand = seededUniform(seed);
  const magnitudes = [1e-38, 1e-30, 1e-7, 1e-3, 0.05, 1, 3, 10, 300, 1e5, 1e30];
  const out = new Float32Array(rows * rowLength);
  for (let start = 0; start < out.length; start += blockElements) {
    const kind = Math.floor(rand() * 8);
    const magnitude = magnitudes[Math.floor(rand() * magnitudes.length)] ?? 1;
    for (let i = start; i < start + blockElements; i++) {
      let v: number;
      if (kind === 0)
        v = 0; // all-zero block
      else if (kind === 1)
        v = rand() < 0.5 ? -0 : 0; // signed zeros only
      else if (kind === 2)
        v = rand() < 0.3 ? -0 : gaussian(rand) * magnitude; // sparse with -0
      else if (kind === 3)
        v = (rand() < 0.5 ? -1 : 1) * magnitude * (1 + Math.floor(rand() * 16) / 8); // grid-ish ties
      else if (kind === 4)
        v = (rand() < 0.5 ? -1 : 1) * 2 ** (Math.floor(rand() * 40) - 20); // exact powers of two
      else v = gaussian(rand) * magnitude * (rand() < 0.05 ? 50 : 1); // with outliers
      out[i] = roundBf16(v);
    }
  }
  return out;
}

function sameBits(a: Float32Array, b: Float32Array, label: string): void {
  assert.equal(a.length, b.length, `${label}: length`);
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < ua.length; i++) {
    if (ua[i] !== ub[i]) assert.fail(`${label}: element ${i}: ${a[i]} vs ${b[i]}`);
  }
}

const E4M3_FINITE: { byte: number; value: number }[] = [];
for (let byte = 0; byte < 256; byte++) {
  if ((byte & 0x7f) === 0x7f) continue;
  E4M3_FINITE.push({ byte, value: decodeE4m3(byte) });
}

/** Nearest e2m1 code of |v| ≤ 6 by float64 search over all codes, ties to the even code. */
function bruteForceE2m1(v: number): number {
  const a = Math.abs(v);
  let best = 0;
  for (let code = 1; code < 8; code++) {
    const d = Math.abs((E2M1_VALUES[code] ?? 0) - a);
    const dBest = Math.abs((E2M1_VALUES[best] ?? 0) - a);
    if (d < dBest || (d === dBest && code % 2 === 0)) best = code;
  }
  return (v < 0 || Object.is(v, -0) ? 8 : 0) | best;
}

/** Nearest e4m3 byte of fp32 x after clamping to ±448, by float64 search, ties to the even byte. */
function bruteForceE4m3(x: number): number {
  const negative = x < 0 || Object.is(x, -0);
  const a = Math.min(Math.abs(Math.fround(x)), 448);
  let best = 0;
  for (let byte = 1; byte < 0x7f; byte++) {
    const d = Math.abs(decodeE4m3(byte) - a);
    const dBest = Math.abs(decodeE4m3(best) - a);
    if (d < dBest || (d === dBest && byte % 2 === 0)) best = byte;
  }
  return (negative ? 0x80 : 0) | best;
}

/** 2^ceil(log2(x)) for fp32 x > 0 by repeated doubling (independent of the bit trick). */
function ceilPow2(x: number): number {
  let s = 2 ** -149;
  while (s < x) s *= 2;
  return s;
}

type Kind = 'fp8-ue8m0-32' | 'fp4-e4m3-16' | 'fp4-ue8m0-32';

/** Independent oracle: per block scale and codes from the §2.3 equations, with float64 searches. */
function oracleFakeQuant(values: Float32Array, kind: Kind): Float32Array {
  const block = kind === 'fp4-e4m3-16' ? 16 : 32;
  const out = new Float32Array(values.length);
  for (let start = 0; start < values.length; start += block) {
    let amax = 0;
    for (let i = start; i < start + block; i++) amax = Math.max(amax, Math.abs(values[i] ?? 0));
    let scale: number;
    if (kind === 'fp8-ue8m0-32') scale = ceilPow2(Math.fround(Math.max(amax, Math.fround(1e-4)) * Math.fround(1 / 448)));
    else if (kind === 'fp4-ue8m0-32') scale = ceilPow2(Math.fround(Math.max(amax, 6 * 2 ** -126) * Math.fround(1 / 6)));
    else scale = decodeE4m3(bruteForceE4m3(Math.fround(Math.max(amax, 6 * 2 ** -9) / 6)));
    for (let i = start; i < start + block; i++) {
      const v = Math.fround((values[i] ?? 0) / scale);
      if (kind === 'fp8-ue8m0-32') out[i] = decodeE4m3(bruteForceE4m3(v)) * scale;
      else out[i] = (E2M1_VALUES[bruteForceE2m1(Math.min(Math.max(v, -6), 6))] ?? 0) * scale;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// e2m1

test('e2m1 value table and codes', () => {
  assert.deepEqual(Array.from(E2M1_VALUES.subarray(0, 8)), [0, 0.5, 1, 1.5, 2, 3, 4, 6]);
  for (let code = 0; code < 16; code++) {
    const value = decodeE2m1(code);
    assert.equal(encodeE2m1(value), code, `code ${code}`);
    assert.equal(Math.abs(value), decodeE2m1(code & 7));
  }
  assert.ok(Object.is(decodeE2m1(8), -0));
});

test('e2m1 rounding: every tie of csa2-reference §2.3 goes to the even code', () => {
  const ties: [number, number][] = [
    [0.25, 0],
    [0.75, 1],
    [1.25, 1],
    [1.75, 2],
    [2.5, 2],
    [3.5, 4],
    [5, 4],
  ];
  for (const [input, expected] of ties) {
    assert.equal(decodeE2m1(encodeE2m1(input)), expected, `${input}`);
    assert.ok(Object.is(decodeE2m1(encodeE2m1(-input)), -expected), `-${input}`);
  }
  assert.equal(encodeE2m1(-0.25), 8); // rounds to -0, sign kept
  assert.equal(encodeE2m1(-0), 8);
  assert.equal(encodeE2m1(0), 0);
  // Just off the ties.
  assert.equal(decodeE2m1(encodeE2m1(Math.fround(0.25 + 2 ** -20))), 0.5);
  assert.equal(decodeE2m1(encodeE2m1(Math.fround(0.75 - 2 ** -20))), 0.5);
  assert.equal(decodeE2m1(encodeE2m1(Math.fround(5 + 2 ** -20))), 6);
  assert.equal(decodeE2m1(encodeE2m1(Math.fround(2.5 + 2 ** -20))), 3);
  assert.equal(decodeE2m1(encodeE2m1(6)), 6);
  assert.equal(decodeE2m1(encodeE2m1(-6)), -6);
});

test('e2m1 encoding equals a brute-force nearest search with ties to even', () => {
  const rand = seededUniform(7);
  for (let n = 0; n < 20000; n++) {
    const v = n % 4 === 0 ? (Math.round(rand() * 48) - 24) / 4 : Math.fround((rand() * 2 - 1) * 6);
    assert.equal(encodeE2m1(v), bruteForceE2m1(v), `${v}`);
  }
});

test('packNibbles puts the even element in the low nibble', () => {
  assert.deepEqual(Array.from(packNibbles(Uint8Array.from([1, 2, 3]))), [0x21, 0x03]);
  assert.deepEqual(Array.from(packNibbles(Uint8Array.from([0xf, 0x8, 0x0, 0xa]))), [0x8f, 0xa0]);
  assert.deepEqual(Array.from(unpackNibbles(Uint8Array.from([0x21, 0x03]), 3)), [1, 2, 3]);
  assert.throws(() => unpackNibbles(new Uint8Array(1), 3), ShapeError);
});

test('every byte value round-trips through unpackNibbles / packNibbles', () => {
  const all = new Uint8Array(256);
  for (let b = 0; b < 256; b++) all[b] = b;
  const codes = unpackNibbles(all, 512);
  for (let b = 0; b < 256; b++) {
    assert.equal(codes[2 * b], b & 0xf);
    assert.equal(codes[2 * b + 1], b >> 4);
  }
  assert.deepEqual(packNibbles(codes), all);
});

// ---------------------------------------------------------------------------------------------
// e4m3

test('e4m3 ties, subnormals and saturation', () => {
  const cases: [number, number][] = [
    [1, 1],
    [1.0625, 1], // tie 1 | 1.125 -> even mantissa 0
    [1.1875, 1.25], // tie 1.125 | 1.25 -> even mantissa 2
    [1.3125, 1.25], // tie 1.25 | 1.375 -> even
    [2 ** -10, 0], // tie 0 | 2^-9 -> 0
    [3 * 2 ** -11, 2 ** -9], // 0.75 of the smallest subnormal rounds up
    [2 ** -11, 0],
    [3 * 2 ** -10, 2 ** -8], // tie 2^-9 | 2^-8 (subnormal codes 1 | 2) -> even code 2
    [5 * 2 ** -10, 2 ** -8], // tie 2^-8 | 3·2^-9 -> even code 2
    [15 * 2 ** -10, 2 ** -6], // tie 7·2^-9 | 2^-6: subnormal carries into the first normal
    [2 ** -6, 2 ** -6],
    [240, 240],
    [248, 256], // tie 240 | 256 -> even (256)
    [440, 448], // between 416 and 448 (step 32 above 256): nearer 448
    [448, 448],
    [464, 448], // would round to 480 without the clamp
    [500, 448],
    [1e30, 448],
    [Infinity, 448],
  ];
  for (const [input, expected] of cases) {
    assert.equal(decodeE4m3(encodeE4m3(input)), expected, `${input}`);
    assert.equal(decodeE4m3(encodeE4m3(-input)), -expected, `-${input}`);
  }
  assert.equal(encodeE4m3(448), 0x7e);
  assert.equal(encodeE4m3(-500), 0xfe);
  assert.equal(encodeE4m3(2 ** -9), 0x01);
  assert.equal(encodeE4m3(-0), 0x80);
  assert.ok(Object.is(decodeE4m3(encodeE4m3(-(2 ** -11))), -0));
  assert.equal(encodeE4m3(NaN), 0x7f);
  assert.ok(Number.isNaN(decodeE4m3(0x7f)));
  assert.ok(Number.isNaN(decodeE4m3(0xff)));
});

test('every finite e4m3 byte round-trips and the grid is monotonic', () => {
  for (const { byte, value } of E4M3_FINITE) assert.equal(encodeE4m3(value), byte, `byte ${byte}`);
  for (let byte = 1; byte < 0x7f; byte++) assert.ok(decodeE4m3(byte) > decodeE4m3(byte - 1));
  assert.equal(decodeE4m3(0x7e), 448);
  assert.equal(decodeE4m3(0x08), 2 ** -6);
  assert.equal(decodeE4m3(0x07), 7 * 2 ** -9);
});

test('e4m3 encoding equals a brute-force nearest search with ties to even', () => {
  const rand = seededUniform(11);
  for (let n = 0; n < 20000; n++) {
    let x: number;
    if (n % 3 === 0) {
      // midpoints between neighbouring codes (exact ties) and their neighbours
      const i = Math.floor(rand() * (0x7e - 1));
      x = (decodeE4m3(i) + decodeE4m3(i + 1)) / 2;
    } else {
      x = Math.fround(2 ** (rand() * 24 - 14) * (1 + rand()));
    }
    if (rand() < 0.5) x = -x;
    assert.equal(encodeE4m3(x), bruteForceE4m3(x), `${x}`);
  }
});

// ---------------------------------------------------------------------------------------------
// ue8m0

test('fastRoundScale: exact powers of two stay, anything above goes to the next power', () => {
  for (let k = -120; k <= 120; k += 7) {
    const amax6 = 6 * 2 ** k;
    assert.equal(fastRoundScale(amax6, FP4_E2M1_MAX_INV_F32), 2 ** k, `6·2^${k}`);
    const above = Math.fround(amax6 * (1 + 2 ** -21)); // next fp32 above 6·2^k
    assert.ok(above > amax6);
    assert.equal(fastRoundScale(above, FP4_E2M1_MAX_INV_F32), 2 ** (k + 1), `above 6·2^${k}`);
    assert.equal(fastRoundScale(amax6 * 0.75, FP4_E2M1_MAX_INV_F32), 2 ** k, `4.5·2^${k}`);
    const amax448 = 448 * 2 ** k;
    assert.equal(fastRoundScale(amax448, FP8_E4M3_MAX_INV_F32), 2 ** k, `448·2^${k}`);
    assert.equal(fastRoundScale(Math.fround(amax448 * (1 + 2 ** -20)), FP8_E4M3_MAX_INV_F32), 2 ** (k + 1));
  }
  // The amax floors.
  assert.equal(fastRoundScale(FP4_UE8M0_AMAX_FLOOR, FP4_E2M1_MAX_INV_F32), 2 ** -126);
  assert.equal(fastRoundScale(FP8_UE8M0_AMAX_FLOOR_F32, FP8_E4M3_MAX_INV_F32), 2 ** -22);
});

test('ue8m0 bytes are the biased exponent', () => {
  for (let e = -126; e <= 127; e++) {
    assert.equal(encodeUe8m0(2 ** e), e + 127);
    assert.equal(decodeUe8m0(e + 127), 2 ** e);
  }
  assert.equal(encodeUe8m0(1), 127);
  assert.equal(decodeUe8m0(0), 2 ** -127);
  assert.ok(Number.isNaN(decodeUe8m0(0xff)));
});

// ---------------------------------------------------------------------------------------------
// fake quantizers and record codecs

test('all-zero blocks keep the floor scales and dequantize to zero', () => {
  assert.equal(FP4_E4M3_AMAX_FLOOR, 6 * 2 ** -9);
  const main = quantizeMainKvRows(new Float32Array(512), 512);
  assert.equal(main.length, 288);
  assert.ok(main.subarray(0, 256).every((b) => b === 0));
  assert.ok(
    main.subarray(256).every((b) => b === 0x01),
    'e4m3 scale 2^-9 (smallest subnormal)',
  );
  const index = quantizeIndexKRows(new Float32Array(128), 128);
  assert.equal(index.length, 68);
  assert.ok(index.subarray(0, 64).every((b) => b === 0));
  assert.ok(
    index.subarray(64).every((b) => b === 1),
    'ue8m0 scale 2^-126',
  );
  const window = quantizeWindowKvRows(new Float32Array(512), 512);
  assert.equal(window.length, 528);
  assert.ok(window.subarray(0, 512).every((b) => b === 0));
  assert.ok(
    window.subarray(512).every((b) => b === 127 - 22),
    'ue8m0 scale 2^-22 from the 1e-4 floor',
  );
  for (const fake of [fakeQuantFp4E4m3Block16, fakeQuantFp4Ue8m0Block32, fakeQuantFp8Ue8m0Block32]) {
    const zeros = Float32Array.from([-0, 0, -0, 0, ...new Array<number>(28).fill(0)]);
    fake(zeros, 32);
    assert.ok(Object.is(zeros[0], -0) && Object.is(zeros[1], 0) && Object.is(zeros[2], -0));
  }
});

test('record sizes and payload-then-scales layout', () => {
  assert.equal(mainKvRowBytes(512), 288);
  assert.equal(indexKRowBytes(128), 68);
  assert.equal(windowKvRowBytes(512), 528);
  // One main-KV row of 32: block 0 = [6, -3, 0.5, 0 ...] (amax 6 -> scale 1), block 1 = 12 everywhere (scale 2).
  const row = new Float32Array(32);
  row.set([6, -3, 0.5], 0);
  row.fill(12, 16);
  const bytes = quantizeMainKvRows(row, 32);
  assert.equal(bytes.length, 16 + 2);
  assert.equal(bytes[0], (0xd << 4) | 0x7); // element 0 = code 7 (6) low, element 1 = code 13 (-3) high
  assert.equal(bytes[1], 0x01); // element 2 = code 1 (0.5)
  assert.equal(bytes[8], 0x77); // 12 / 2 = 6 -> code 7, both nibbles
  assert.equal(decodeE4m3(bytes[16] ?? 0), 1);
  assert.equal(decodeE4m3(bytes[17] ?? 0), 2);
  assert.deepEqual(Array.from(dequantizeMainKvRows(bytes, 32)), Array.from(row));
  // Index K: block amax 6·2^3 = 48 -> scale 8 -> ue8m0 byte 130.
  const indexRow = new Float32Array(32);
  indexRow[31] = -48;
  indexRow[30] = 20; // 20 / 8 = 2.5 -> tie -> 2 -> 16
  const indexBytes = quantizeIndexKRows(indexRow, 32);
  assert.equal(indexBytes.length, 17);
  assert.equal(indexBytes[15], (0xf << 4) | 0x4);
  assert.equal(indexBytes[16], 130);
  assert.deepEqual(Array.from(dequantizeIndexKRows(indexBytes, 32)).slice(30), [16, -48]);
  // Window: amax 448·2^-4 = 28 -> scale 2^-4 -> byte 123; payload holds e4m3 of x / s.
  const windowRow = new Float32Array(32);
  windowRow[0] = 28;
  windowRow[1] = -1;
  const windowBytes = quantizeWindowKvRows(windowRow, 32);
  assert.equal(windowBytes.length, 33);
  assert.equal(windowBytes[0], 0x7e);
  assert.equal(windowBytes[1], encodeE4m3(-16));
  assert.equal(windowBytes[32], 123);
});

test('shape checks reject ragged inputs', () => {
  assert.throws(() => quantizeMainKvRows(new Float32Array(40), 40), ShapeError);
  assert.throws(() => quantizeMainKvRows(new Float32Array(48), 32), ShapeError);
  assert.throws(() => dequantizeIndexKRows(new Uint8Array(33), 32), ShapeError);
  assert.throws(() => dequantizeWindowKvRows(new Uint8Array(32), 32), ShapeError);
  assert.throws(() => fakeQuantFp8Ue8m0Block32(new Float32Array(48)), ShapeError);
  assert.throws(() => fakeQuantFp4E4m3Block16(new Float32Array(64), 24), ShapeError);
});

const CODECS = [
  {
    kind: 'fp4-e4m3-16' as const,
    block: 16,
    fake: fakeQuantFp4E4m3Block16,
    roundTrip: (x: Float32Array, d: number) => dequantizeMainKvRows(quantizeMainKvRows(x, d), d),
  },
  {
    kind: 'fp4-ue8m0-32' as const,
    block: 32,
    fake: fakeQuantFp4Ue8m0Block32,
    roundTrip: (x: Float32Array, d: number) => dequantizeIndexKRows(quantizeIndexKRows(x, d), d),
  },
  {
    kind: 'fp8-ue8m0-32' as const,
    block: 32,
    fake: fakeQuantFp8Ue8m0Block32,
    roundTrip: (x: Float32Array, d: number) => dequantizeWindowKvRows(quantizeWindowKvRows(x, d), d),
  },
];

test('dequantize(quantize(x)) equals the fake-quantizer bit for bit, and both equal the float64 oracle', () => {
  for (const { kind, block, fake, roundTrip } of CODECS) {
    for (const [seed, rowLength] of [
      [1, 512],
      [2, 128],
      [3, 64],
      [4, 512],
    ] as const) {
      const x = randomBf16Rows(seed * 100 + block, 24, rowLength, block);
      const decoded = roundTrip(x, rowLength);
      const faked = fake(x.slice(), rowLength);
      sameBits(decoded, faked, `${kind} seed ${seed}`);
      sameBits(faked, oracleFakeQuant(x, kind), `${kind} oracle seed ${seed}`);
      // The dequantized values are bf16 values (the reference stores them in bf16 tensors).
      for (const v of faked) assert.ok(Object.is(roundBf16(v), v), `${kind}: ${v} not bf16`);
    }
  }
});

/** Local e2m1 step at magnitude a (≤ 6). */
function e2m1StepAt(a: number): number {
  return a < 2 ? 0.5 : a < 4 ? 1 : 2;
}

/** Local e4m3 step at magnitude a (≤ 448). */
function e4m3StepAt(a: number): number {
  return a < 2 ** -6 ? 2 ** -9 : 2 ** (Math.floor(Math.log2(a)) - 3);
}

test('property: |dequant - x| is at most half a quantization step of the block (plus clamp excess)', () => {
  const rand = seededUniform(2024);
  for (const { kind, block, fake } of CODECS) {
    for (let trial = 0; trial < 200; trial++) {
      const magnitude = 2 ** (rand() * 60 - 30);
      const x = new Float32Array(block);
      for (let i = 0; i < block; i++) x[i] = roundBf16(gaussian(rand) * magnitude);
      const deq = fake(x.slice(), block);
      let amax = 0;
      for (const v of x) amax = Math.max(amax, Math.abs(v));
      // recover the block's scale from the largest element the way the format defines it
      const scale =
        kind === 'fp8-ue8m0-32'
          ? fastRoundScale(Math.max(amax, FP8_UE8M0_AMAX_FLOOR_F32), FP8_E4M3_MAX_INV_F32)
          : kind === 'fp4-ue8m0-32'
            ? fastRoundScale(Math.max(amax, FP4_UE8M0_AMAX_FLOOR), FP4_E2M1_MAX_INV_F32)
            : decodeE4m3(encodeE4m3(Math.fround(Math.max(amax, FP4_E4M3_AMAX_FLOOR) / 6)));
      const limit = kind === 'fp8-ue8m0-32' ? 448 : 6;
      for (let i = 0; i < block; i++) {
        const xi = x[i] ?? 0;
        const a = Math.min(Math.abs(xi) / scale, limit);
        const step = kind === 'fp8-ue8m0-32' ? e4m3StepAt(a) : e2m1StepAt(a);
        const clampExcess = Math.max(0, Math.abs(xi) - limit * scale);
        // fp32 rounding of x / s adds at most half an fp32 ulp of |x / s| (relative 2^-24).
        const bound = (0.5 * step + a * 2 ** -23) * scale + clampExcess;
        const err = Math.abs((deq[i] ?? 0) - xi);
        assert.ok(err <= bound, `${kind}: x=${xi} deq=${deq[i]} err=${err} bound=${bound}`);
      }
    }
  }
});

test('near the clamp: an E4M3 scale rounded below amax/6 saturates the largest element to ±6·s', () => {
  // amax = 6 * 1.0625 = 6.375: amax/6 = 1.0625 is a tie, the scale rounds down to 1 and 6.375 clamps to 6.
  const x = new Float32Array(16);
  x[0] = 6.375;
  x[1] = -6.375;
  x[2] = 5.5; // 5.5 -> 6 (nearer than 4)
  x[3] = 5; // tie 4 | 6 -> 4
  fakeQuantFp4E4m3Block16(x, 16);
  assert.deepEqual(Array.from(x.subarray(0, 4)), [6, -6, 6, 4]);
});
