import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BF16_MIN_SUBNORMAL, BF16_ULP, bf16BitsToF32, f32ToBf16Bits, roundBf16, roundBf16Array } from './bf16.js';

test('exact bf16 values are unchanged and map to the expected bit patterns', () => {
  assert.equal(f32ToBf16Bits(1), 0x3f80);
  assert.equal(f32ToBf16Bits(-2), 0xc000);
  assert.equal(f32ToBf16Bits(0), 0x0000);
  assert.equal(f32ToBf16Bits(-0), 0x8000);
  assert.equal(f32ToBf16Bits(Infinity), 0x7f80);
  assert.equal(f32ToBf16Bits(-Infinity), 0xff80);
  assert.equal(f32ToBf16Bits(1.5), 0x3fc0);
  assert.equal(roundBf16(3.140625), 3.140625);
  assert.ok(Object.is(roundBf16(-0), -0));
});

test('bf16 rounding is to nearest with ties to even', () => {
  const ulpAt1 = 2 ** -7;
  // 1 + ulp/2 is a tie between 1 (even mantissa) and 1 + ulp (odd): goes to 1.
  assert.equal(roundBf16(1 + ulpAt1 / 2), 1);
  // 1 + 3ulp/2 is a tie between 1 + ulp (odd) and 1 + 2ulp (even): goes to 1 + 2ulp.
  assert.equal(roundBf16(1 + (3 * ulpAt1) / 2), 1 + 2 * ulpAt1);
  // Just above / below the tie.
  assert.equal(roundBf16(1 + ulpAt1 / 2 + 2 ** -23), 1 + ulpAt1);
  assert.equal(roundBf16(1 + ulpAt1 / 2 - 2 ** -24), 1);
  // Negative ties mirror the positive ones.
  assert.equal(roundBf16(-(1 + ulpAt1 / 2)), -1);
  assert.equal(roundBf16(-(1 + (3 * ulpAt1) / 2)), -(1 + 2 * ulpAt1));
  // Hand-checked: 0.1f = 0x3DCCCCCD -> bf16 0x3DCD (lower half 0xCCCD > 0x8000 rounds up).
  assert.equal(f32ToBf16Bits(0.1), 0x3dcd);
  assert.equal(roundBf16(0.1), 0.10009765625);
  // 1/3f = 0x3EAAAAAB -> 0x3EAB.
  assert.equal(f32ToBf16Bits(1 / 3), 0x3eab);
});

test('bf16 rounding carries into the exponent and overflows to infinity', () => {
  // 2 - 2^-8 (1.1111111_1 binary) is a tie between 1.9921875 (odd) and 2 (even).
  assert.equal(roundBf16(2 - 2 ** -8), 2);
  const maxBf16 = bf16BitsToF32(0x7f7f);
  assert.equal(maxBf16, 3.3895313892515355e38);
  assert.equal(roundBf16(maxBf16), maxBf16);
  // Largest fp32 rounds past the largest bf16.
  assert.equal(roundBf16(3.4028234663852886e38), Infinity);
});

test('NaN stays NaN and subnormals round on the same grid', () => {
  assert.ok(Number.isNaN(roundBf16(NaN)));
  assert.equal(f32ToBf16Bits(NaN) & 0x7fc0, 0x7fc0);
  assert.equal(roundBf16(BF16_MIN_SUBNORMAL), BF16_MIN_SUBNORMAL);
  assert.equal(roundBf16(BF16_MIN_SUBNORMAL / 2), 0); // tie to even (0)
  assert.equal(roundBf16((3 * BF16_MIN_SUBNORMAL) / 2), 2 * BF16_MIN_SUBNORMAL); // tie to even (2)
});

test('bf16 bit round trip over every pattern', () => {
  for (let bits = 0; bits <= 0xffff; bits++) {
    const v = bf16BitsToF32(bits);
    if (Number.isNaN(v)) {
      assert.ok(Number.isNaN(roundBf16(v)));
      continue;
    }
    assert.equal(f32ToBf16Bits(v), bits);
  }
});

test('roundBf16Array rounds in place and agrees with roundBf16', () => {
  const values = [0.1, -0.1, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 65504.7, -1e-40, NaN, -0, 3.4028234663852886e38];
  const a = Float32Array.from(values);
  const out = roundBf16Array(a);
  assert.equal(out, a);
  for (let i = 0; i < values.length; i++) {
    const expected = roundBf16(values[i] ?? 0);
    const actual = a[i] ?? 0;
    if (Number.isNaN(expected)) assert.ok(Number.isNaN(actual));
    else assert.ok(Object.is(actual, expected), `element ${i}: ${actual} vs ${expected}`);
  }
  // Works on a view with a byte offset.
  const backing = new Float32Array([1, 0.1, 0.1]);
  roundBf16Array(backing.subarray(1, 2));
  assert.deepEqual(Array.from(backing), [1, 0.10009765625, Math.fround(0.1)]);
});

test('BF16_ULP gives the bf16 spacing', () => {
  assert.equal(BF16_ULP(1), 2 ** -7);
  assert.equal(BF16_ULP(1.9), 2 ** -7);
  assert.equal(BF16_ULP(-3), 2 ** -6);
  assert.equal(BF16_ULP(1024), 8);
  assert.equal(BF16_ULP(0), BF16_MIN_SUBNORMAL);
  assert.equal(BF16_ULP(2 ** -130), BF16_MIN_SUBNORMAL);
  assert.equal(BF16_ULP(Infinity), Infinity);
  // Consecutive bf16 values differ by exactly the ulp of the smaller one within a binade.
  assert.equal(bf16BitsToF32(0x4121) - bf16BitsToF32(0x4120), BF16_ULP(bf16BitsToF32(0x4120)));
});
