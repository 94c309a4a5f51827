/**
 * @module legacy-row-packing
 * The artifact write path before sequences held packed rows, kept for the artifacts bench's `float`
 * column (the same run measures the old path beside the new one). Packs DEQUANTIZED cache rows (the exact fake-quantized float32 values a Sequence holds) back into
 * their FP4 bytes (E2M1 codes with per-block scales, as packed rows hold them), so that unpacking gives the
 * same values bit for bit.
 *
 * Re-running the quantizer on fake-quantized values is not always enough:
 * - index K (E2M1 + UE8M0 per 32): it always is. A block whose largest code is below 6 may come back
 *   with a smaller power-of-two scale and larger codes (max code 3 → half the scale, codes doubled):
 *   other bytes, same values.
 * - main KV (E2M1 + E4M3 per 16): in the E4M3 subnormal range (block max < 6·2^-6 ≈ 0.094) the scale
 *   amax/6 rounds coarsely, the original block max may be 4·s or 3·s instead of 6·s, and the quantizer
 *   then picks another scale and LOSES values (e.g. 4·2^-8 comes back as 6·2^-9).
 *
 * So every block goes through the quantizer first (fast path), the packed rows are unpacked with
 * csa2-core's own dequantizer and compared bit for bit; a block that differs is packed again by search:
 * its scale must be amax / |q| for some E2M1 magnitude q, and the first candidate that is an exact scale
 * value and turns every element into an exact E2M1 code wins. A block no candidate represents (values
 * that were never fake-quantized, NaN, ±Inf) is refused with {@link RowNotRepresentableError}: an
 * artifact never holds rows that would not read back exactly.
 *
 * Packing is a pure function of the values, so packing rows read from an artifact reproduces its bytes.
 */
import {
  Csa2Error,
  INDEX_K_BLOCK_ELEMENTS,
  MAIN_KV_BLOCK_ELEMENTS,
  decodeE2m1,
  decodeE4m3,
  decodeUe8m0,
  dequantizeIndexKRows,
  dequantizeMainKvRows,
  encodeE2m1,
  encodeE4m3,
  encodeUe8m0,
  quantizeIndexKRows,
  quantizeMainKvRows,
} from '@csa2/core';

/** E2M1 magnitudes a block maximum can have, in the order the search tries them. */
const E2M1_NONZERO_MAGNITUDES = [6, 4, 3, 2, 1.5, 1, 0.5] as const;

/** Rows hold values that no FP4 record of this kind represents exactly. */
export class RowNotRepresentableError extends Csa2Error {
  readonly rowKind: string;
  readonly row: number;
  readonly block: number;
  constructor(rowKind: string, row: number, block: number, reason: string) {
    super('cache-format', `${rowKind} row ${row}, block ${block}: ${reason}`);
    this.rowKind = rowKind;
    this.row = row;
    this.block = block;
  }
}

/** Packed rows and how many blocks needed the search path (for tests and metrics). */
export interface PackedRows {
  readonly bytesU8: Uint8Array;
  readonly searchedBlocks: number;
}

interface Fp4RowFormat {
  readonly rowKind: string;
  readonly blockElements: number;
  quantize(valuesF32: Float32Array, rowLength: number): Uint8Array;
  dequantize(bytesU8: Uint8Array, rowLength: number): Float32Array;
  encodeScale(scale: number): number;
  decodeScale(byte: number): number;
}

const MAIN_KV_FORMAT: Fp4RowFormat = {
  rowKind: 'main-KV',
  blockElements: MAIN_KV_BLOCK_ELEMENTS,
  quantize: quantizeMainKvRows,
  dequantize: dequantizeMainKvRows,
  encodeScale: encodeE4m3,
  decodeScale: decodeE4m3,
};

const INDEX_K_FORMAT: Fp4RowFormat = {
  rowKind: 'index-K',
  blockElements: INDEX_K_BLOCK_ELEMENTS,
  quantize: quantizeIndexKRows,
  dequantize: dequantizeIndexKRows,
  encodeScale: encodeUe8m0,
  decodeScale: decodeUe8m0,
};

function bitsOf(valuesF32: Float32Array): Uint32Array {
  return new Uint32Array(valuesF32.buffer, valuesF32.byteOffset, valuesF32.length);
}

/** Indices of the blocks (over all rows) whose unpacked bits differ from the input's. */
function mismatchedBlocks(wantF32: Float32Array, gotF32: Float32Array, blockElements: number): number[] {
  const want = bitsOf(wantF32);
  const got = bitsOf(gotF32);
  const blocks: number[] = [];
  for (let i = 0; i < want.length; i++) {
    if (want[i] !== got[i]) {
      const block = Math.floor(i / blockElements);
      blocks.push(block);
      i = (block + 1) * blockElements - 1; // skip to the next block
    }
  }
  return blocks;
}

/** Scale byte and codes representing block values exactly, or a reason why none does. */
function searchBlock(fmt: Fp4RowFormat, valuesF32: Float32Array, start: number): { scaleByte: number; codesU8: Uint8Array } | string {
  const n = fmt.blockElements;
  let amax = 0;
  for (let i = start; i < start + n; i++) {
    const v = valuesF32[i] ?? 0;
    if (!Number.isFinite(v)) return `element ${i - start} is ${v}`;
    amax = Math.max(amax, Math.abs(v));
  }
  const codesU8 = new Uint8Array(n);
  if (amax === 0) {
    for (let i = 0; i < n; i++) codesU8[i] = encodeE2m1(valuesF32[start + i] ?? 0); // ±0 under any scale
    return { scaleByte: fmt.encodeScale(1), codesU8 };
  }
  for (const q of E2M1_NONZERO_MAGNITUDES) {
    const scale = amax / q;
    const scaleByte = fmt.encodeScale(scale);
    if (fmt.decodeScale(scaleByte) !== scale) continue;
    let exact = true;
    for (let i = 0; i < n && exact; i++) {
      const v = valuesF32[start + i] ?? 0;
      const code = encodeE2m1(v / scale);
      codesU8[i] = code;
      exact = Object.is(Math.fround(decodeE2m1(code) * scale), v);
    }
    if (exact) return { scaleByte, codesU8 };
  }
  return `no ${fmt.rowKind} scale represents the block exactly (max |x| = ${amax}); the values were not fake-quantized with this format`;
}

function writeBlock(
  bytesU8: Uint8Array,
  rowLength: number,
  blockElements: number,
  blockIndex: number,
  packed: { scaleByte: number; codesU8: Uint8Array },
): void {
  const blocksPerRow = rowLength / blockElements;
  const row = Math.floor(blockIndex / blocksPerRow);
  const block = blockIndex % blocksPerRow;
  const rowBytes = rowLength / 2 + blocksPerRow;
  const base = row * rowBytes;
  bytesU8[base + rowLength / 2 + block] = packed.scaleByte;
  for (let i = 0; i < blockElements; i += 2) {
    const lo = (packed.codesU8[i] ?? 0) & 0xf;
    const hi = (packed.codesU8[i + 1] ?? 0) & 0xf;
    bytesU8[base + ((block * blockElements + i) >> 1)] = lo | (hi << 4);
  }
}

function packExact(fmt: Fp4RowFormat, valuesF32: Float32Array, rowLength: number): PackedRows {
  const bytesU8 = fmt.quantize(valuesF32, rowLength);
  const blocks = mismatchedBlocks(valuesF32, fmt.dequantize(bytesU8, rowLength), fmt.blockElements);
  if (blocks.length === 0) return { bytesU8, searchedBlocks: 0 };
  const blocksPerRow = rowLength / fmt.blockElements;
  for (const blockIndex of blocks) {
    const packed = searchBlock(fmt, valuesF32, blockIndex * fmt.blockElements);
    if (typeof packed === 'string') {
      throw new RowNotRepresentableError(fmt.rowKind, Math.floor(blockIndex / blocksPerRow), blockIndex % blocksPerRow, packed);
    }
    writeBlock(bytesU8, rowLength, fmt.blockElements, blockIndex, packed);
  }
  // The cheap, decisive check: unpack with csa2-core's dequantizer again and compare every bit.
  const still = mismatchedBlocks(valuesF32, fmt.dequantize(bytesU8, rowLength), fmt.blockElements);
  const first = still[0];
  if (first !== undefined) {
    throw new RowNotRepresentableError(fmt.rowKind, Math.floor(first / blocksPerRow), first % blocksPerRow, 'packed block does not unpack to the same bits');
  }
  return { bytesU8, searchedBlocks: blocks.length };
}

/**
 * Packs main-KV rows [rows, headDim] (fake-quantized E2M1 × E4M3-per-16 values) into
 * [rows, headDim/2 + headDim/16] bytes that unpack to the same bits. Throws RowNotRepresentableError.
 *
 * @example
 * const { bytesU8 } = packMainKvRows(seq.cache(20).mainKv.view(), 512);
 */
export function packMainKvRows(valuesF32: Float32Array, headDim: number): PackedRows {
  return packExact(MAIN_KV_FORMAT, valuesF32, headDim);
}

/** Packs index-K rows [rows, indexHeadDim] (MXFP4 values) into [rows, d/2 + d/32] bytes; see packMainKvRows. */
export function packIndexKRows(valuesF32: Float32Array, indexHeadDim: number): PackedRows {
  return packExact(INDEX_K_FORMAT, valuesF32, indexHeadDim);
}

/** Unpacks main-KV rows (csa2-core's dequantizer; the inverse of packMainKvRows). */
export function unpackMainKvRows(bytesU8: Uint8Array, headDim: number): Float32Array {
  return dequantizeMainKvRows(bytesU8, headDim);
}

/** Unpacks index-K rows (csa2-core's dequantizer; the inverse of packIndexKRows). */
export function unpackIndexKRows(bytesU8: Uint8Array, indexHeadDim: number): Float32Array {
  return dequantizeIndexKRows(bytesU8, indexHeadDim);
}
