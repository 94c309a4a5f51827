/**
 * @module model/graphs/packed-ops
 * Graph emitters between float rows and the packed FP4 row bytes the global cache keeps (csa2 §2.3;
 * the same bytes as an artifact chunk's rows, see @csa2/artifacts format/chunk-codec):
 *
 *   main KV  [rows, D] → [rows, D/2 + D/16]: E2M1 payload (element 2k in the low nibble of byte k),
 *            then one E4M3 scale byte per 16 elements;
 *   index K  [rows, d] → [rows, d/2 + d/32]: E2M1 payload, then one UE8M0 scale byte per 32.
 *
 * Packing takes the quantizer's own scale and rounding (GraphOps.fp4E4m3Block16 / fp4Ue8m0Block32), so
 * the bytes are the quantizer's, with no search: unpacking gives exactly the fake-quantized values
 * (q·s is exact in float32), -0 included (its code is 8, taken from the sign of the clamped input).
 */
import type { GraphBuilder } from '../../onnx/graph-builder.js';
import { E2M1_VALUES, E4M3_VALUES, decodeUe8m0 } from '../../numerics/formats.js';
import type { Fp4Blocks, GraphOps } from './graph-ops.js';

/** E4M3 values of the positive finite bytes 0x01..0x7E, ascending with the byte. */
const E4M3_POSITIVE = Array.from(E4M3_VALUES.subarray(1, 0x7f));
const UE8M0_VALUES = Array.from({ length: 256 }, (_, b) => (b === 0xff ? 0 : decodeUe8m0(b)));

/**
 * E2M1 codes of rounded values q ∈ {±0, ±0.5, …, ±6}: magnitude index 0..7 (0, .5, 1, 1.5, 2, 3, 4, 6)
 * plus 8 when the clamped input v is negative or -0 (1/v < 0), the sign the rounding keeps (float32).
 */
function e2m1Codes(g: GraphBuilder, b: Fp4Blocks): string {
  const mag = g.abs(b.rounded);
  const idx = g.where(
    g.less(mag, g.scalar(2)),
    g.mul(mag, g.scalar(2)),
    g.where(g.less(mag, g.scalar(4)), g.add(mag, g.scalar(2)), g.add(g.mul(mag, g.scalar(0.5)), g.scalar(4))),
  );
  const negative = g.less(g.div(g.scalar(1), b.clamped), g.scalar(0));
  return g.add(idx, g.where(negative, g.scalar(8), g.scalar(0)));
}

/**
 * Codes [..., width] (float32 values 0..15) → bytes [rows, width/2]: element 2k low nibble, 2k+1 high
 * nibble, as lo + 16·hi (exact in float32; arithmetic rather than bit operators, which have no CUDA kernels).
 */
function packNibbles(g: GraphBuilder, codes: string, width: number): string {
  const pairs = g.reshape(codes, [-1, width / 2, 2]);
  const lo = g.squeeze(g.slice(pairs, [2], [0], [1]), [2]);
  const hi = g.squeeze(g.slice(pairs, [2], [1], [2]), [2]);
  return g.cast(g.add(lo, g.mul(hi, g.scalar(16))), 'uint8');
}

/** Packs rows of one FP4 format: payload then the scale bytes [rows, width/block]. */
function packRows(g: GraphBuilder, b: Fp4Blocks, width: number, block: number, scaleBytes: string): string {
  const payload = packNibbles(g, g.reshape(e2m1Codes(g, b), [-1, width]), width);
  return g.concat([payload, g.reshape(scaleBytes, [-1, width / block])], 1);
}

/** Main-KV rows x [rows, D] → packed [rows, D/2 + D/16] (fp4_act_quant(x, 16, e4m3), csa2 §2.3 A). */
export function packMainKv(o: GraphOps, x: string, D: number): string {
  const g = o.g;
  const b = o.fp4E4m3Block16(x, D);
  // the scale is an exact positive E4M3 value; its byte is 1 + the number of positive values below it
  const below = g.cast(g.less(g.const('float32', E4M3_POSITIVE), b.scale), 'int32'); // [rows, D/16, 126]
  const bytes = g.cast(g.add(g.reduceSum(below, [-1], false), g.const('int32', [1], [])), 'uint8');
  return packRows(g, b, D, 16, bytes);
}

/** Index-K rows x [rows, d] → packed [rows, d/2 + d/32] (MXFP4, csa2 §2.3 B). */
export function packIndexK(o: GraphOps, x: string, d: number): string {
  const g = o.g;
  const b = o.fp4Ue8m0Block32(x, d);
  // the scale is 2^e exactly: its byte is e + 127 (the log is off by far less than the 0.5 Round allows)
  const e = g.round(g.mul(g.log(b.scale), g.scalar(1 / Math.LN2)));
  return packRows(g, b, d, 32, g.cast(g.add(e, g.scalar(127)), 'uint8'));
}

/** E2M1 values of both nibbles of every byte: [256, 2] = (low nibble's, high nibble's), row = the byte. */
const E2M1_PAIRS = Array.from({ length: 256 }, (_, b) => [E2M1_VALUES[b & 15] as number, E2M1_VALUES[b >> 4] as number]).flat();

/**
 * Packed rows [rows, width/2 + width/block] (uint8) → values [rows, width], scale table `scales`: each
 * payload byte looks up its two E2M1 values at once ([256, 2] table), then each block is multiplied by
 * its scale (three passes over the values).
 */
function unpackRows(g: GraphBuilder, packed: string, width: number, block: number, scales: readonly number[]): string {
  const payload = g.slice(packed, [1], [0], [width / 2]);
  const scaleBytes = g.slice(packed, [1], [width / 2], [width / 2 + width / block]);
  const pairs = g.gather(g.const('float32', E2M1_PAIRS, [256, 2]), g.cast(payload, 'int32')); // [rows, width/2, 2]
  const s = g.gather(g.const('float32', scales), g.cast(scaleBytes, 'int32')); // [rows, width/block]
  return g.reshape(g.mul(g.reshape(pairs, [-1, width / block, block]), g.unsqueeze(s, [-1])), [-1, width]);
}

/** Packed main-KV rows [rows, D/2 + D/16] → the fake-quantized values [rows, D], bit for bit. */
export function unpackMainKv(g: GraphBuilder, packed: string, D: number): string {
  return unpackRows(
    g,
    packed,
    D,
    16,
    Array.from(E4M3_VALUES, (v) => (Number.isNaN(v) ? 0 : v)),
  );
}

/** Packed index-K rows [rows, d/2 + d/32] → the fake-quantized values [rows, d], bit for bit. */
export function unpackIndexK(g: GraphBuilder, packed: string, d: number): string {
  return unpackRows(g, packed, d, 32, UE8M0_VALUES);
}
