/**
 * @module numerics/formats
 * The low-precision formats of the CSA2 caches (csa2-reference §2.3), bit-exact with the reference's
 * torch kernel port. Every operation the reference does in fp32 is emulated with `Math.fround`.
 *
 * Element formats:
 * - e2m1 (FP4): 4-bit code, bit 3 = sign, magnitudes by code 0..7 = 0, 0.5, 1, 1.5, 2, 3, 4, 6.
 * - e4m3fn (FP8): sign, 4 exponent bits (bias 7), 3 mantissa bits; subnormals down to 2^-9; max 448;
 *   0x7F / 0xFF are NaN (no infinities).
 * - ue8m0: an unsigned power-of-two scale stored as its biased fp32 exponent byte (2^(byte - 127)).
 *
 * Row ("record") layouts, payload first, then the scales, one row after another with no padding:
 *
 * | record              | payload                          | scales                        | bytes at D      |
 * |---------------------|----------------------------------|-------------------------------|-----------------|
 * | main KV (§2.3 A)    | D/2 bytes, two e2m1 per byte     | D/16 e4m3 bytes, block of 16  | 288 at D = 512  |
 * | index K (§2.3 B)    | d/2 bytes, two e2m1 per byte     | d/32 ue8m0 bytes, block of 32 | 68 at d = 128   |
 * | window KV (§2.3 C)  | D e4m3 bytes                     | D/32 ue8m0 bytes, block of 32 | 528 at D = 512  |
 *
 * Nibble order: element 2k in the low nibble of payload byte k, element 2k+1 in the high nibble
 * (PyTorch `float4_e2m1fn_x2`). Negative zero keeps its sign (e2m1 code 8, e4m3 byte 0x80).
 *
 * The fake-quantizers (quantize then dequantize in place) are the reference's `act_quant` /
 * `fp4_act_quant(inplace=True)`; for every input, `dequantize*Rows(quantize*Rows(x))` equals the
 * fake-quantized `x` bit for bit.
 */

import { ShapeError } from '../errors.js';

/** Largest finite e4m3fn magnitude. */
export const FP8_E4M3_MAX = 448;
/** Largest e2m1 magnitude. */
export const FP4_E2M1_MAX = 6;
/** fp32(1/448), the reference's `FP8_MAX_INV`. */
export const FP8_E4M3_MAX_INV_F32 = Math.fround(1 / FP8_E4M3_MAX);
/** fp32(1/6), the reference's `FP4_MAX_INV`. */
export const FP4_E2M1_MAX_INV_F32 = Math.fround(1 / FP4_E2M1_MAX);

/** Channels sharing one e4m3 scale in a main compressed-KV row. */
export const MAIN_KV_BLOCK_ELEMENTS = 16;
/** Channels sharing one ue8m0 scale in an index-K (or index-Q) row. */
export const INDEX_K_BLOCK_ELEMENTS = 32;
/** Channels sharing one ue8m0 scale in a sliding-window KV row. */
export const WINDOW_KV_BLOCK_ELEMENTS = 32;

/** amax floor of the FP8/UE8M0 act_quant (an all-zero block gets scale 2^-22). */
export const FP8_UE8M0_AMAX_FLOOR_F32 = Math.fround(1e-4);
/** amax floor of the FP4/E4M3 quantizer: 6·2^-9, so the scale is at least the smallest e4m3 subnormal. */
export const FP4_E4M3_AMAX_FLOOR = 6 * 2 ** -9;
/** amax floor of the FP4/UE8M0 (MXFP4) quantizer: 6·2^-126, so the scale is at least 2^-126. */
export const FP4_UE8M0_AMAX_FLOOR = 6 * 2 ** -126;

const scratchF32 = new Float32Array(1);
const scratchU32 = new Uint32Array(scratchF32.buffer);
const scratchI32 = new Int32Array(scratchF32.buffer);

function f32Bits(x: number): number {
  scratchF32[0] = x;
  return scratchU32[0] ?? 0;
}

/** Round to the nearest integer, ties to even (y ≥ 0). */
function roundHalfEven(y: number): number {
  const f = Math.floor(y);
  const d = y - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

function isNegative(x: number): boolean {
  return x < 0 || (x === 0 && 1 / x < 0);
}

// ---------------------------------------------------------------------------------------------
// e2m1 (FP4)

/** e2m1 value of each 4-bit code 0..15 (codes 8..15 are the negatives; code 8 is -0). §2.3 table. */
export const E2M1_VALUES: Float32Array = Float32Array.from([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6]);

/**
 * e2m1 code of `v` (already clamped to [-6, 6]): round to nearest, ties to the even code (§2.3,
 * `cvt.rn.satfinite.e2m1x2`). Ties: 0.25→0, 0.75→1, 1.25→1, 1.75→2, 2.5→2, 3.5→4, 5→4. Magnitudes
 * above 6 saturate to 6; the sign of zero is kept (-0 → code 8). NaN gives code 7 (never produced by
 * the quantizers below for finite input).
 */
export function encodeE2m1(v: number): number {
  const sign = isNegative(v) ? 8 : 0;
  const a = Math.abs(v);
  let code: number;
  if (a <= 0.25) code = 0;
  else if (a < 0.75) code = 1;
  else if (a <= 1.25) code = 2;
  else if (a < 1.75) code = 3;
  else if (a <= 2.5) code = 4;
  else if (a < 3.5) code = 5;
  else if (a <= 5) code = 6;
  else code = 7;
  return sign | code;
}

/** Value of a 4-bit e2m1 code (only the low 4 bits are read). */
export function decodeE2m1(code: number): number {
  return E2M1_VALUES[code & 0xf] ?? 0;
}

/** Packs 4-bit codes two per byte, element 2k in the low nibble of byte k (odd count: last high nibble 0). */
export function packNibbles(codesU8: Uint8Array): Uint8Array {
  const bytesU8 = new Uint8Array((codesU8.length + 1) >> 1);
  for (let i = 0; i < codesU8.length; i++) {
    const code = (codesU8[i] ?? 0) & 0xf;
    const k = i >> 1;
    bytesU8[k] = (bytesU8[k] ?? 0) | ((i & 1) === 0 ? code : code << 4);
  }
  return bytesU8;
}

/** Unpacks `count` 4-bit codes from nibble-packed bytes (inverse of `packNibbles`). */
export function unpackNibbles(bytesU8: Uint8Array, count: number): Uint8Array {
  if (count > bytesU8.length * 2 || count < 0) {
    throw new ShapeError('unpackNibbles.bytesU8', [`>= ${Math.ceil(count / 2)}`], [bytesU8.length]);
  }
  const codesU8 = new Uint8Array(count);
  for (let i = 0; i < count; i++) {
    const byte = bytesU8[i >> 1] ?? 0;
    codesU8[i] = (i & 1) === 0 ? byte & 0xf : byte >> 4;
  }
  return codesU8;
}

// ---------------------------------------------------------------------------------------------
// e4m3fn (FP8)

/** Value of every e4m3fn byte (0x7F and 0xFF are NaN). */
export const E4M3_VALUES: Float32Array = (() => {
  const table = new Float32Array(256);
  for (let byte = 0; byte < 256; byte++) {
    const exponent = (byte >> 3) & 0xf;
    const mantissa = byte & 7;
    let magnitude: number;
    if (exponent === 15 && mantissa === 7) magnitude = NaN;
    else if (exponent === 0) magnitude = mantissa * 2 ** -9;
    else magnitude = (8 + mantissa) * 2 ** (exponent - 10);
    table[byte] = (byte & 0x80) !== 0 ? -magnitude : magnitude;
  }
  return table;
})();

/** 2^(3 - e) for the e4m3 exponents e = -6..8, indexed by e + 6. */
const E4M3_STEPS_PER_UNIT: Float64Array = Float64Array.from({ length: 15 }, (_, i) => 2 ** (3 - (i - 6)));

/**
 * e4m3fn byte of fp32(x): `to_e4m3_satfinite`, i.e. clamp to [-448, 448] then round to nearest even
 * (§2.3 C); subnormals down to 2^-9, values below 2^-10 flush to ±0, the sign of zero is kept. NaN
 * gives 0x7F (0xFF for negative NaN).
 */
export function encodeE4m3(x: number): number {
  const bits = f32Bits(x);
  const sign = (bits >>> 24) & 0x80;
  if ((bits & 0x7f800000) === 0x7f800000 && (bits & 0x007fffff) !== 0) return sign | 0x7f;
  const a = Math.abs(scratchF32[0] ?? 0);
  if (a >= FP8_E4M3_MAX) return sign | 0x7e;
  // Unbiased exponent of a, floored at the subnormal exponent -6 (all of which share the 2^-9 grid).
  const exponent = a >= 2 ** -6 ? ((bits >>> 23) & 0xff) - 127 : -6;
  const steps = roundHalfEven(a * (E4M3_STEPS_PER_UNIT[exponent + 6] ?? 0)); // 8..16 (normal) or 0..8 (subnormal)
  return sign | ((exponent + 6) * 8 + steps); // a carry (steps = 16) lands on the next exponent
}

/** Value of an e4m3fn byte (NaN for 0x7F / 0xFF, -0 for 0x80). */
export function decodeE4m3(byte: number): number {
  return E4M3_VALUES[byte & 0xff] ?? NaN;
}

// ---------------------------------------------------------------------------------------------
// ue8m0 scales

/**
 * Power-of-two scale ≥ fp32(amax · maxInvF32): `fast_round_scale` (§2.3 B): with x = fp32(amax·maxInv),
 * e = biasedExponent(x) - 127 + (mantissa(x) != 0), result 2^e built from the fp32 bits
 * ((e + 127) << 23), exactly like the reference (so e = -127 would give 0; the amax floors keep e ≥ -126).
 */
export function fastRoundScale(amax: number, maxInvF32: number): number {
  const bits = f32Bits(Math.fround(amax * maxInvF32));
  const exponent = ((bits >>> 23) & 0xff) - 127 + ((bits & 0x7fffff) !== 0 ? 1 : 0);
  scratchI32[0] = (exponent + 127) << 23;
  return scratchF32[0] ?? 0;
}

/** ue8m0 byte of a power-of-two scale: its biased fp32 exponent, (bits(s) >> 23) & 0xFF. */
export function encodeUe8m0(scale: number): number {
  return (f32Bits(scale) >>> 23) & 0xff;
}

/** Value of a ue8m0 byte: 2^(byte - 127) (byte 0 is 2^-127, byte 0xFF is NaN, as float8_e8m0fnu). */
export function decodeUe8m0(byte: number): number {
  const b = byte & 0xff;
  return b === 0xff ? NaN : 2 ** (b - 127);
}

// ---------------------------------------------------------------------------------------------
// per-block scales (one function per equation)

function blockAmax(valuesF32: Float32Array, start: number, end: number): number {
  let amax = 0;
  for (let i = start; i < end; i++) {
    const a = Math.abs(valuesF32[i] ?? 0);
    if (a > amax) amax = a;
  }
  return amax;
}

/** §2.3 A scale byte: e4m3(fp32(max(amax, 6·2^-9) / 6)). */
function scaleByteFp4E4m3(valuesF32: Float32Array, start: number, end: number): number {
  const amax = Math.max(blockAmax(valuesF32, start, end), FP4_E4M3_AMAX_FLOOR);
  return encodeE4m3(Math.fround(amax / FP4_E2M1_MAX));
}

/** §2.3 B scale: fast_round_scale(max(amax, 6·2^-126), fp32(1/6)). */
function scaleFp4Ue8m0(valuesF32: Float32Array, start: number, end: number): number {
  const amax = Math.max(blockAmax(valuesF32, start, end), FP4_UE8M0_AMAX_FLOOR);
  return fastRoundScale(amax, FP4_E2M1_MAX_INV_F32);
}

/** §2.3 C scale: fast_round_scale(max(amax, 1e-4), fp32(1/448)). */
function scaleFp8Ue8m0(valuesF32: Float32Array, start: number, end: number): number {
  const amax = Math.max(blockAmax(valuesF32, start, end), FP8_UE8M0_AMAX_FLOOR_F32);
  return fastRoundScale(amax, FP8_E4M3_MAX_INV_F32);
}

/** e2m1 code of x under scale s: e2m1_rne(clamp(fp32(x / s), -6, 6)). */
function e2m1CodeScaled(x: number, scale: number): number {
  const v = Math.fround(x / scale);
  return encodeE2m1(Math.min(Math.max(v, -FP4_E2M1_MAX), FP4_E2M1_MAX));
}

// ---------------------------------------------------------------------------------------------
// fake quantizers (quantize + dequantize in place)

function checkRowLength(label: string, rowLength: number, blockElements: number): void {
  if (!Number.isInteger(rowLength) || rowLength <= 0 || rowLength % blockElements !== 0) {
    throw new ShapeError(`${label}.rowLength`, [`multiple of ${blockElements}`], [rowLength]);
  }
}

function checkRows(label: string, length: number, rowLength: number, blockElements: number): void {
  checkRowLength(label, rowLength, blockElements);
  if (length % rowLength !== 0) throw new ShapeError(`${label}.values`, ['rows', rowLength], [length]);
}

/** `act_quant(x, 32, "ue8m0", inplace=True)` (§2.3 C): FP8 e4m3 with one ue8m0 scale per 32, in place. */
export function fakeQuantFp8Ue8m0Block32(valuesF32: Float32Array, rowLength = Math.max(valuesF32.length, WINDOW_KV_BLOCK_ELEMENTS)): Float32Array {
  checkRows('fakeQuantFp8Ue8m0Block32', valuesF32.length, rowLength, WINDOW_KV_BLOCK_ELEMENTS);
  for (let start = 0; start < valuesF32.length; start += WINDOW_KV_BLOCK_ELEMENTS) {
    const end = start + WINDOW_KV_BLOCK_ELEMENTS;
    const scale = scaleFp8Ue8m0(valuesF32, start, end);
    for (let i = start; i < end; i++) {
      valuesF32[i] = decodeE4m3(encodeE4m3(Math.fround((valuesF32[i] ?? 0) / scale))) * scale;
    }
  }
  return valuesF32;
}

/** Fake-quantizes FP4 blocks in place: e2m1 codes under each block's scale, times the scale. */
function fakeQuantFp4Blocks(
  label: string,
  valuesF32: Float32Array,
  rowLength: number,
  blockElements: number,
  scaleOf: (values: Float32Array, start: number, end: number) => number,
): Float32Array {
  checkRows(label, valuesF32.length, rowLength, blockElements);
  for (let start = 0; start < valuesF32.length; start += blockElements) {
    const end = start + blockElements;
    const scale = scaleOf(valuesF32, start, end);
    for (let i = start; i < end; i++) {
      valuesF32[i] = decodeE2m1(e2m1CodeScaled(valuesF32[i] ?? 0, scale)) * scale;
    }
  }
  return valuesF32;
}

/** `fp4_act_quant(x, 16, inplace=True, scale_dtype=float8_e4m3fn)` (§2.3 A): e2m1 with an e4m3 scale per 16. */
export function fakeQuantFp4E4m3Block16(valuesF32: Float32Array, rowLength = Math.max(valuesF32.length, MAIN_KV_BLOCK_ELEMENTS)): Float32Array {
  return fakeQuantFp4Blocks('fakeQuantFp4E4m3Block16', valuesF32, rowLength, MAIN_KV_BLOCK_ELEMENTS, (v, start, end) =>
    decodeE4m3(scaleByteFp4E4m3(v, start, end)),
  );
}

/** `fp4_act_quant(x, 32, inplace=True)` (§2.3 B, MXFP4): e2m1 with a ue8m0 scale per 32, in place. */
export function fakeQuantFp4Ue8m0Block32(valuesF32: Float32Array, rowLength = Math.max(valuesF32.length, INDEX_K_BLOCK_ELEMENTS)): Float32Array {
  return fakeQuantFp4Blocks('fakeQuantFp4Ue8m0Block32', valuesF32, rowLength, INDEX_K_BLOCK_ELEMENTS, scaleFp4Ue8m0);
}

// ---------------------------------------------------------------------------------------------
// record codecs

/** Bytes of one main compressed-KV row: D/2 e2m1 payload + D/16 e4m3 scales (288 at D = 512). */
export function mainKvRowBytes(headDim: number): number {
  return headDim / 2 + headDim / MAIN_KV_BLOCK_ELEMENTS;
}

/** Bytes of one index-K row: d/2 e2m1 payload + d/32 ue8m0 scales (68 at d = 128). */
export function indexKRowBytes(indexHeadDim: number): number {
  return indexHeadDim / 2 + indexHeadDim / INDEX_K_BLOCK_ELEMENTS;
}

/** Bytes of one window-KV row: D e4m3 payload + D/32 ue8m0 scales (528 at D = 512). */
export function windowKvRowBytes(headDim: number): number {
  return headDim + headDim / WINDOW_KV_BLOCK_ELEMENTS;
}

function rowCountOfBytes(label: string, byteLength: number, rowBytes: number): number {
  if (byteLength % rowBytes !== 0) throw new ShapeError(`${label}.bytes`, ['rows', rowBytes], [byteLength]);
  return byteLength / rowBytes;
}

/** Packs FP4 rows payload-first: e2m1 codes under each block's scale, then the blocks' scale bytes. */
function quantizeFp4Rows(
  valuesF32: Float32Array,
  rowLength: number,
  blockElements: number,
  scaleByteOf: (values: Float32Array, start: number, end: number) => number,
  scaleOfByte: (byte: number) => number,
): Uint8Array {
  const rowBytes = rowLength / 2 + rowLength / blockElements;
  const rows = valuesF32.length / rowLength;
  const bytesU8 = new Uint8Array(rows * rowBytes);
  for (let row = 0; row < rows; row++) {
    const rowStart = row * rowLength;
    const out = row * rowBytes;
    for (let block = 0; block < rowLength / blockElements; block++) {
      const start = rowStart + block * blockElements;
      const scaleByte = scaleByteOf(valuesF32, start, start + blockElements);
      const scale = scaleOfByte(scaleByte);
      bytesU8[out + rowLength / 2 + block] = scaleByte;
      for (let i = 0; i < blockElements; i += 2) {
        const low = e2m1CodeScaled(valuesF32[start + i] ?? 0, scale);
        const high = e2m1CodeScaled(valuesF32[start + i + 1] ?? 0, scale);
        bytesU8[out + ((block * blockElements + i) >> 1)] = low | (high << 4);
      }
    }
  }
  return bytesU8;
}

function dequantizeFp4Rows(bytesU8: Uint8Array, rowLength: number, blockElements: number, rows: number, scaleOfByte: (byte: number) => number): Float32Array {
  const rowBytes = rowLength / 2 + rowLength / blockElements;
  const valuesF32 = new Float32Array(rows * rowLength);
  for (let row = 0; row < rows; row++) {
    const base = row * rowBytes;
    for (let block = 0; block < rowLength / blockElements; block++) {
      const scale = scaleOfByte(bytesU8[base + rowLength / 2 + block] ?? 0);
      for (let i = 0; i < blockElements; i += 2) {
        const element = block * blockElements + i;
        const byte = bytesU8[base + (element >> 1)] ?? 0;
        valuesF32[row * rowLength + element] = decodeE2m1(byte & 0xf) * scale;
        valuesF32[row * rowLength + element + 1] = decodeE2m1(byte >> 4) * scale;
      }
    }
  }
  return valuesF32;
}

/** §2.3 A: main compressed-KV rows [rows, headDim] → packed [rows, headDim/2 + headDim/16] bytes. */
export function quantizeMainKvRows(valuesF32: Float32Array, headDim: number): Uint8Array {
  checkRows('quantizeMainKvRows', valuesF32.length, headDim, MAIN_KV_BLOCK_ELEMENTS);
  return quantizeFp4Rows(valuesF32, headDim, MAIN_KV_BLOCK_ELEMENTS, scaleByteFp4E4m3, decodeE4m3);
}

/** §2.3 A: packed main compressed-KV rows → values [rows, headDim]. */
export function dequantizeMainKvRows(bytesU8: Uint8Array, headDim: number): Float32Array {
  checkRowLength('dequantizeMainKvRows', headDim, MAIN_KV_BLOCK_ELEMENTS);
  const rows = rowCountOfBytes('dequantizeMainKvRows', bytesU8.length, mainKvRowBytes(headDim));
  return dequantizeFp4Rows(bytesU8, headDim, MAIN_KV_BLOCK_ELEMENTS, rows, decodeE4m3);
}

function scaleByteFp4Ue8m0(valuesF32: Float32Array, start: number, end: number): number {
  return encodeUe8m0(scaleFp4Ue8m0(valuesF32, start, end));
}

/** §2.3 B (MXFP4): index-K rows [rows, d] → packed [rows, d/2 + d/32] bytes. */
export function quantizeIndexKRows(valuesF32: Float32Array, indexHeadDim: number): Uint8Array {
  checkRows('quantizeIndexKRows', valuesF32.length, indexHeadDim, INDEX_K_BLOCK_ELEMENTS);
  return quantizeFp4Rows(valuesF32, indexHeadDim, INDEX_K_BLOCK_ELEMENTS, scaleByteFp4Ue8m0, decodeUe8m0);
}

/** §2.3 B (MXFP4): packed index-K rows → values [rows, d]. */
export function dequantizeIndexKRows(bytesU8: Uint8Array, indexHeadDim: number): Float32Array {
  checkRowLength('dequantizeIndexKRows', indexHeadDim, INDEX_K_BLOCK_ELEMENTS);
  const rows = rowCountOfBytes('dequantizeIndexKRows', bytesU8.length, indexKRowBytes(indexHeadDim));
  return dequantizeFp4Rows(bytesU8, indexHeadDim, INDEX_K_BLOCK_ELEMENTS, rows, decodeUe8m0);
}

/** §2.3 C: window-KV rows [rows, headDim] → packed [rows, headDim + headDim/32] bytes (e4m3 + ue8m0). */
export function quantizeWindowKvRows(valuesF32: Float32Array, headDim: number): Uint8Array {
  checkRows('quantizeWindowKvRows', valuesF32.length, headDim, WINDOW_KV_BLOCK_ELEMENTS);
  const rowBytes = windowKvRowBytes(headDim);
  const rows = valuesF32.length / headDim;
  const bytesU8 = new Uint8Array(rows * rowBytes);
  for (let row = 0; row < rows; row++) {
    for (let block = 0; block < headDim / WINDOW_KV_BLOCK_ELEMENTS; block++) {
      const start = row * headDim + block * WINDOW_KV_BLOCK_ELEMENTS;
      const scale = scaleFp8Ue8m0(valuesF32, start, start + WINDOW_KV_BLOCK_ELEMENTS);
      bytesU8[row * rowBytes + headDim + block] = encodeUe8m0(scale);
      for (let i = 0; i < WINDOW_KV_BLOCK_ELEMENTS; i++) {
        const element = block * WINDOW_KV_BLOCK_ELEMENTS + i;
        bytesU8[row * rowBytes + element] = encodeE4m3(Math.fround((valuesF32[start + i] ?? 0) / scale));
      }
    }
  }
  return bytesU8;
}

/** §2.3 C: packed window-KV rows → values [rows, headDim]. */
export function dequantizeWindowKvRows(bytesU8: Uint8Array, headDim: number): Float32Array {
  checkRowLength('dequantizeWindowKvRows', headDim, WINDOW_KV_BLOCK_ELEMENTS);
  const rowBytes = windowKvRowBytes(headDim);
  const rows = rowCountOfBytes('dequantizeWindowKvRows', bytesU8.length, rowBytes);
  const valuesF32 = new Float32Array(rows * headDim);
  for (let row = 0; row < rows; row++) {
    for (let block = 0; block < headDim / WINDOW_KV_BLOCK_ELEMENTS; block++) {
      const scale = decodeUe8m0(bytesU8[row * rowBytes + headDim + block] ?? 0);
      for (let i = 0; i < WINDOW_KV_BLOCK_ELEMENTS; i++) {
        const element = block * WINDOW_KV_BLOCK_ELEMENTS + i;
        valuesF32[row * headDim + element] = decodeE4m3(bytesU8[row * rowBytes + element] ?? 0) * scale;
      }
    }
  }
  return valuesF32;
}
