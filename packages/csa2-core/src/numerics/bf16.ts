/**
 * @module numerics/bf16
 * bfloat16 emulation on top of JS numbers. A bf16 value is the upper 16 bits of an IEEE fp32 value:
 * 1 sign bit, 8 exponent bits (bias 127, same range as fp32, subnormals included), 7 mantissa bits.
 *
 * Rounding is round-to-nearest-even on the fp32 bit pattern, as `torch.Tensor.to(torch.bfloat16)` does.
 * Every input is first taken as fp32 (`Math.fround`), so `roundBf16(x)` equals torch's
 * `torch.tensor(x, dtype=float32).to(bfloat16)`. NaN stays NaN (quiet), ±Infinity stays ±Infinity,
 * and values that round past the largest finite bf16 (≈3.39e38) become ±Infinity.
 */

const scratchF32 = new Float32Array(1);
const scratchU32 = new Uint32Array(scratchF32.buffer);

/** Quiet-NaN bit pattern torch produces when casting NaN to bf16. */
const BF16_QUIET_NAN_BITS = 0x7fc0;

/** bf16 bit pattern (0..0xFFFF) of `x` rounded to bf16 (RNE on the fp32 bits of `x`). */
export function f32ToBf16Bits(x: number): number {
  scratchF32[0] = x;
  const bits = scratchU32[0] ?? 0;
  if ((bits & 0x7f800000) === 0x7f800000 && (bits & 0x007fffff) !== 0) {
    return ((bits >>> 16) & 0x8000) | BF16_QUIET_NAN_BITS;
  }
  // Adding 0x7FFF plus the lowest kept bit rounds to nearest with ties to the even kept pattern;
  // a carry out of the mantissa correctly bumps the exponent (up to Infinity).
  const rounded = bits + 0x7fff + ((bits >>> 16) & 1);
  return (rounded >>> 16) & 0xffff;
}

/** fp32 value (as a JS number) of a bf16 bit pattern. */
export function bf16BitsToF32(bits: number): number {
  scratchU32[0] = (bits & 0xffff) << 16;
  return scratchF32[0] ?? 0;
}

/** `x` rounded to the nearest bf16 value (ties to even), returned as a JS number. */
export function roundBf16(x: number): number {
  return bf16BitsToF32(f32ToBf16Bits(x));
}

/** Rounds every element of `valuesF32` to bf16 in place and returns the same array. */
export function roundBf16Array(valuesF32: Float32Array): Float32Array {
  const bits = new Uint32Array(valuesF32.buffer, valuesF32.byteOffset, valuesF32.length);
  for (let i = 0; i < bits.length; i++) {
    const b = bits[i] ?? 0;
    if ((b & 0x7f800000) === 0x7f800000 && (b & 0x007fffff) !== 0) {
      bits[i] = ((b & 0x80000000) | (BF16_QUIET_NAN_BITS << 16)) >>> 0;
    } else {
      bits[i] = ((b + 0x7fff + ((b >>> 16) & 1)) & 0xffff0000) >>> 0;
    }
  }
  return valuesF32;
}

/** Smallest positive bf16 value (subnormal), 2^-133: the spacing of bf16 values below 2^-126. */
export const BF16_MIN_SUBNORMAL = 2 ** -133;

/**
 * The spacing between consecutive bf16 values around `x` (one unit in the last place): 2^(e - 7) where
 * 2^e ≤ |bf16(x)| < 2^(e+1), and 2^-133 in the subnormal range and at 0. For tolerances in tests, e.g.
 * `Math.abs(a - b) <= BF16_ULP(b)`. Infinity for non-finite `x`.
 */
export function BF16_ULP(x: number): number {
  const r = Math.abs(roundBf16(x));
  if (!Number.isFinite(r)) return Infinity;
  if (r < 2 ** -126) return BF16_MIN_SUBNORMAL;
  scratchF32[0] = r;
  const biasedExponent = ((scratchU32[0] ?? 0) >>> 23) & 0xff;
  return 2 ** (biasedExponent - 127 - 7);
}
