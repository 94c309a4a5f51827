/**
 * @module model/indexer/indexer-kernels
 * The split indexer's loops over keys (model/indexer/indexer-scores), as two small WebAssembly functions in
 * one linear memory, bit for bit what the graphs compute:
 *
 * - unpack: packed index-K rows (MXFP4: d/2 payload bytes, element 2k in the low nibble of byte k,
 *   then one UE8M0 scale byte per 32; graphs/packed-ops) → float32 values, as unpackIndexK gives
 *   them. One table: [scale byte · 256 + payload byte] → the byte's two values times the scale, a
 *   float32 pair (the products rounded to float32 as the graph's Mul rounds them; scale byte 0xff
 *   is 0, as in the graph's table), so a key of d values is d/2 lookups of 8 bytes.
 *   `unpackIndexKeys` is the same loop in TypeScript (the reference the tests compare with; ~48 ns
 *   per 32-value key here, the WebAssembly loop ~21 ns with the copy of the rows into its memory).
 * - finish: one row's per-head products q·k (the Gemm's output) → its scores, the rest of the bf16
 *   einsum: per head bf16(relu(bf16(p)) × w), the heads summed in order h = 0, 1, …, bf16 again
 *   (fp32 numerics: relu(p) × w summed, no rounding). The bf16 rounding works on the bits (bits +
 *   0x7fff + lsb, truncated: onnxruntime's Cast), relu clears negative bits (-0 and negatives become
 *   0: a zero's sign never changes a pick), float32 arithmetic rounds as onnxruntime's (WebAssembly
 *   has no flush-to-zero). Only for ≤ 4 heads, where onnxruntime's ReduceSum adds in that order.
 *
 * The values and scores are views of the kernels' memory, handed to onnxruntime and the pickers as
 * they are, valid until the next call. MainKvUnpacker runs the unpack on main-KV rows (E4M3 scales per
 * 16) for the attention's selected entries (model/attention/attention).
 */
import { Csa2Error } from '../../errors.js';
import { E2M1_VALUES, decodeE4m3, decodeUe8m0 } from '../../numerics/formats.js';
import {
  F32,
  I32,
  add,
  align64,
  and,
  bf16Bits,
  block,
  br,
  brIf,
  compileModule,
  end,
  ensureBytes,
  f32OfI32,
  f32c0,
  fAdd,
  fMul,
  geU,
  get,
  i32OfF32,
  i32c,
  instantiateModule,
  load32,
  load64,
  load8,
  loadF32,
  loop,
  mul,
  name,
  section,
  set,
  shl,
  shrS,
  store64,
  storeF32,
  uleb,
  vector,
  xor,
  type WasmMemory,
} from './wasm-asm.js';

const TABLE_PAIRS = 65536;
const TABLE_BYTES = TABLE_PAIRS * 8;

/** The index keys' scales (UE8M0; byte 0xff, NaN, is 0 as in the graph's table). */
const indexKScale = (s: number): number => (s === 0xff ? 0 : decodeUe8m0(s));
/** The main KV's scales (E4M3; the NaN bytes 0x7f and 0xff are 0 as in the graph's table). */
const mainKvScale = (s: number): number => {
  const v = decodeE4m3(s);
  return Number.isNaN(v) ? 0 : v;
};

/** Fills `out` (65,536 float32 pairs) with the table: [scale byte · 256 + payload byte] → the byte's two values times the scale. */
function fillTable(out: Float32Array, scaleOf: (byte: number) => number): void {
  for (let s = 0; s < 256; s++) {
    const scale = scaleOf(s);
    for (let b = 0; b < 256; b++) {
      out[(s * 256 + b) * 2] = (E2M1_VALUES[b & 15] as number) * scale;
      out[(s * 256 + b) * 2 + 1] = (E2M1_VALUES[b >> 4] as number) * scale;
    }
  }
}

let jsTable: Float64Array | null = null;

/** Packed rows [count, d/2 + d/32] → values [count, d] into `out` (which must start at a multiple of 8 bytes). */
export function unpackIndexKeys(packed: Uint8Array, count: number, d: number, out: Float32Array): void {
  const rowBytes = d / 2 + d / 32;
  if (!(d % 32 === 0 && packed.length >= count * rowBytes && out.length >= count * d && out.byteOffset % 8 === 0)) {
    throw new Csa2Error('runtime', `unpackIndexKeys: ${count} rows of ${rowBytes} bytes (d ${d}) into ${out.length} values`);
  }
  if (jsTable === null) {
    const t = new Float32Array(TABLE_PAIRS * 2);
    fillTable(t, indexKScale);
    jsTable = new Float64Array(t.buffer);
  }
  const table = jsTable;
  // a float32 pair moves as one float64 (bits kept: finite float32 values never make a NaN pattern)
  const out64 = new Float64Array(out.buffer, out.byteOffset, (count * d) / 2);
  const half = d / 2;
  const blocks = d / 32;
  let o = 0;
  for (let i = 0; i < count; i++) {
    const row = i * rowBytes;
    for (let b = 0; b < blocks; b++) {
      const s = (packed[row + half + b] as number) << 8;
      const p = row + b * 16;
      for (let j = 0; j < 16; j++) out64[o++] = table[s | (packed[p + j] as number)] as number;
    }
  }
}

// ---------------------------------------------------------------- the WebAssembly module

/**
 * unpack(src, count, rowBytes, blocks, dst), P = perBlock payload bytes a block (16: index keys, 32
 * values per scale; 8: main KV, 16 values per scale):
 *   o = dst; row = src; half = blocks · P
 *   for i < count: for b < blocks:
 *     s = mem8[row + half + b] << 11                        (the scale's 256 pairs of 8 bytes)
 *     for j < P (unrolled): mem64[o + 8j] = mem64[s + (mem8[row + P·b + j] << 3)]
 *     o += 8 · P
 *   row += rowBytes
 */
function unpackBody(perBlock: 16 | 8): number[] {
  // params 0 src, 1 count, 2 rowBytes, 3 blocks, 4 dst; locals 5 i, 6 b, 7 row, 8 s, 9 p, 10 o, 11 half
  const shift = perBlock === 16 ? 4 : 3;
  const body = [
    ...get(4),
    ...set(10),
    ...get(0),
    ...set(7),
    ...get(3),
    ...i32c(perBlock),
    ...mul,
    ...set(11),
    ...i32c(0),
    ...set(5),
    ...block,
    ...loop,
    ...get(5),
    ...get(1),
    ...geU,
    ...brIf(1),
    ...i32c(0),
    ...set(6),
    ...block,
    ...loop,
    ...get(6),
    ...get(3),
    ...geU,
    ...brIf(1),
    ...get(7),
    ...get(11),
    ...add,
    ...get(6),
    ...add,
    ...load8(0),
    ...i32c(11),
    ...shl,
    ...set(8),
    ...get(7),
    ...get(6),
    ...i32c(shift),
    ...shl,
    ...add,
    ...set(9),
    ...Array.from({ length: perBlock }, (_, j) => [
      ...get(10),
      ...get(8),
      ...get(9),
      ...load8(j),
      ...i32c(3),
      ...shl,
      ...add,
      ...load64(0),
      ...store64(8 * j),
    ]).flat(),
    ...get(10),
    ...i32c(8 * perBlock),
    ...add,
    ...set(10),
    ...get(6),
    ...i32c(1),
    ...add,
    ...set(6),
    ...br(0),
    ...end,
    ...end,
    ...get(7),
    ...get(2),
    ...add,
    ...set(7),
    ...get(5),
    ...i32c(1),
    ...add,
    ...set(5),
    ...br(0),
    ...end,
    ...end,
    ...end,
  ];
  return [...vector([[7, I32]]), ...body];
}

/**
 * finish(p, stride, count, heads, w, out) (one build rounding to bf16, one not):
 *   for n < count:
 *     acc = 0; a = p + 4n
 *     for h < heads: x = bits(mem32[a]) (bf16-rounded); x = x & ~(x >> 31) (relu);
 *                    y = f32(x) · memf32[w + 4h] (bf16-rounded); acc = acc + y; a += 4 · stride
 *     memf32[out + 4n] = acc (bf16-rounded)
 */
function finishBody(round: boolean): number[] {
  // params 0 p, 1 stride, 2 count, 3 heads, 4 w, 5 out; locals i32 6 n, 7 h, 8 a, 9 t; f32 10 acc
  const maybeRound = (bitsOnStack: number[]) => (round ? [...bitsOnStack, ...bf16Bits(9)] : bitsOnStack);
  const body = [
    ...i32c(0),
    ...set(6),
    ...block,
    ...loop,
    ...get(6),
    ...get(2),
    ...geU,
    ...brIf(1),
    ...f32c0,
    ...set(10),
    ...get(0),
    ...get(6),
    ...i32c(2),
    ...shl,
    ...add,
    ...set(8),
    ...i32c(0),
    ...set(7),
    ...block,
    ...loop,
    ...get(7),
    ...get(3),
    ...geU,
    ...brIf(1),
    // x = relu(bf16(p[a]))
    ...maybeRound([...get(8), ...load32]),
    ...set(9),
    ...get(9),
    ...get(9),
    ...i32c(31),
    ...shrS,
    ...i32c(-1),
    ...xor,
    ...and,
    // y = bf16(f32(x) · w[h]); acc += y
    ...f32OfI32,
    ...get(4),
    ...get(7),
    ...i32c(2),
    ...shl,
    ...add,
    ...loadF32(),
    ...fMul,
    ...(round ? [...i32OfF32, ...bf16Bits(9), ...f32OfI32] : []),
    ...get(10),
    ...fAdd,
    ...set(10),
    ...get(8),
    ...get(1),
    ...i32c(2),
    ...shl,
    ...add,
    ...set(8),
    ...get(7),
    ...i32c(1),
    ...add,
    ...set(7),
    ...br(0),
    ...end,
    ...end,
    // out[n] = bf16(acc)
    ...get(5),
    ...get(6),
    ...i32c(2),
    ...shl,
    ...add,
    ...get(10),
    ...(round ? [...i32OfF32, ...bf16Bits(9), ...f32OfI32] : []),
    ...storeF32,
    ...get(6),
    ...i32c(1),
    ...add,
    ...set(6),
    ...br(0),
    ...end,
    ...end,
    ...end,
  ];
  return [
    ...vector([
      [4, I32],
      [1, F32],
    ]),
    ...body,
  ];
}

function moduleBytes(): Uint8Array {
  const funcs = [unpackBody(16), finishBody(true), finishBody(false), unpackBody(8)];
  return Uint8Array.from([
    0x00,
    0x61,
    0x73,
    0x6d,
    1,
    0,
    0,
    0,
    ...section(
      1,
      vector([
        [0x60, ...vector([[I32], [I32], [I32], [I32], [I32]]), 0],
        [0x60, ...vector([[I32], [I32], [I32], [I32], [I32], [I32]]), 0],
      ]),
    ),
    ...section(3, vector([[0], [1], [1], [0]])),
    ...section(5, vector([[0, ...uleb(Math.ceil(TABLE_BYTES / 65536) + 1)]])),
    ...section(
      7,
      vector([
        [...name('unpack'), 0, 0],
        [...name('finish_bf16'), 0, 1],
        [...name('finish_fp32'), 0, 2],
        [...name('unpack8'), 0, 3],
        [...name('mem'), 2, 0],
      ]),
    ),
    ...section(10, vector(funcs.map((f) => [...uleb(f.length), ...f]))),
  ]);
}

let compiled: object | null = null;

type Unpack = (src: number, count: number, rowBytes: number, blocks: number, dst: number) => void;
type Finish = (p: number, stride: number, count: number, heads: number, w: number, out: number) => void;

/** A new instance of the kernels with its own memory, the table filled for `scaleOf`'s scales. */
function instantiate(scaleOf: (byte: number) => number): { memory: WasmMemory; exports: Readonly<Record<string, unknown>> } {
  compiled ??= compileModule(moduleBytes());
  const { memory, exports } = instantiateModule(compiled);
  fillTable(new Float32Array(memory.buffer, 0, TABLE_PAIRS * 2), scaleOf);
  return { memory, exports };
}

/**
 * The kernels with their memory, for index keys of width d (one instance per model; calls are
 * sequential). Memory: the table, then the unpacked keys (they stay while their runs are scored),
 * then a run's products, one row's scores and its head weights; it grows as needed and is reused.
 */
export class IndexerKernels {
  private readonly memory: WasmMemory;
  private readonly unpackFn: Unpack;
  private readonly finishBf16: Finish;
  private readonly finishFp32: Finish;
  private readonly rowBytes: number;
  /** Where the keys end (the scratch of the runs starts here). */
  private scratch = TABLE_BYTES;
  private products = 0;
  private productStride = 0;
  private productRows = 0;
  private keyRows = 0;

  constructor(readonly d: number) {
    if (!(Number.isInteger(d) && d > 0 && d % 32 === 0)) throw new Csa2Error('runtime', `IndexerKernels: index head dim ${d} is not a multiple of 32`);
    this.rowBytes = d / 2 + d / 32;
    const { memory, exports } = instantiate(indexKScale);
    this.memory = memory;
    this.unpackFn = exports['unpack'] as Unpack;
    this.finishBf16 = exports['finish_bf16'] as Finish;
    this.finishFp32 = exports['finish_fp32'] as Finish;
  }

  /**
   * Rows [count, d/2 + d/32] → values [rows, d], rows ≥ count (the ones past count zero): a view of
   * the kernels' memory, valid until the memory grows (`keys` gives a current view).
   */
  unpack(packed: Uint8Array, count: number, rows = count): Float32Array {
    const R = this.rowBytes;
    const d = this.d;
    if (!(packed.length >= count * R && rows >= count))
      throw new Csa2Error('runtime', `IndexerKernels.unpack: ${count} rows of ${R} bytes from ${packed.length}`);
    // the packed rows go where the values end up after them: dst first, src past it
    const dst = TABLE_BYTES;
    const src = align64(dst + rows * d * 4);
    const buf = ensureBytes(this.memory, src + count * R);
    new Uint8Array(buf, src, count * R).set(packed.subarray(0, count * R));
    this.unpackFn(src, count, R, d / 32, dst);
    const out = new Float32Array(buf, dst, rows * d);
    if (rows > count) out.fill(0, count * d);
    this.scratch = align64(dst + rows * d * 4);
    this.keyRows = rows;
    return out;
  }

  /** Keys [from, from + n) of those `unpack` gave last, as a view of the current memory. */
  keys(from: number, n: number): Float32Array {
    if (!(from >= 0 && from + n <= this.keyRows)) throw new Csa2Error('runtime', `IndexerKernels.keys: [${from}, ${from + n}) of ${this.keyRows}`);
    return new Float32Array(this.memory.buffer, TABLE_BYTES + from * this.d * 4, n * this.d);
  }

  /** Copies a run's products [rows · heads, stride] (row r, head h at (r · heads + h) · stride) into the kernels' memory. */
  loadProducts(p: Float32Array, rowsTimesHeads: number, stride: number): void {
    const bytes = rowsTimesHeads * stride * 4;
    const buf = ensureBytes(this.memory, this.scratch + bytes + align64(stride * 4) + 256);
    new Float32Array(buf, this.scratch, rowsTimesHeads * stride).set(p.subarray(0, rowsTimesHeads * stride));
    this.products = this.scratch;
    this.productStride = stride;
    this.productRows = rowsTimesHeads;
  }

  /** Row r's scores over its first `count` products (heads ≤ 4, weights w[0..heads)): a view, valid until the next call. */
  finish(r: number, heads: number, w: Float32Array, count: number, round: boolean): Float32Array {
    const stride = this.productStride;
    if (!((r + 1) * heads <= this.productRows && count <= stride && w.length >= heads))
      throw new Csa2Error('runtime', `IndexerKernels.finish: row ${r} × ${heads} heads of ${this.productRows}, ${count} of ${stride}`);
    const out = this.products + align64(this.productRows * stride * 4);
    const wAt = out + align64(stride * 4);
    const buf = this.memory.buffer;
    new Float32Array(buf, wAt, heads).set(w.subarray(0, heads));
    (round ? this.finishBf16 : this.finishFp32)(this.products + r * heads * stride * 4, stride, count, heads, wAt, out);
    return new Float32Array(buf, out, count);
  }
}

/**
 * Packed main-KV rows [count, D/2 + D/16] (FP4 E2M1, element 2k in the low nibble of byte k, then one
 * E4M3 scale byte per 16) → float32 values [count, D], bit for bit the graph `unpack_main_kv`
 * (graphs/packed-ops unpackMainKv; tested for every payload and scale byte): the same table lookup as
 * the index keys' (the E4M3 scales' products), 8 payload bytes a block. One instance per model (calls
 * are sequential); the values are a view of its memory, valid until the next call.
 */
export class MainKvUnpacker {
  private readonly memory: WasmMemory;
  private readonly unpackFn: Unpack;
  private readonly rowBytes: number;

  constructor(readonly D: number) {
    if (!(Number.isInteger(D) && D > 0 && D % 16 === 0)) throw new Csa2Error('runtime', `MainKvUnpacker: head dim ${D} is not a multiple of 16`);
    this.rowBytes = D / 2 + D / 16;
    const { memory, exports } = instantiate(mainKvScale);
    this.memory = memory;
    this.unpackFn = exports['unpack8'] as Unpack;
  }

  unpack(packed: Uint8Array, count: number): Float32Array {
    const R = this.rowBytes;
    if (!(packed.length >= count * R)) throw new Csa2Error('runtime', `MainKvUnpacker.unpack: ${count} rows of ${R} bytes from ${packed.length}`);
    const dst = TABLE_BYTES;
    const src = align64(dst + count * this.D * 4);
    const buf = ensureBytes(this.memory, src + count * R);
    new Uint8Array(buf, src, count * R).set(packed.subarray(0, count * R));
    this.unpackFn(src, count, R, this.D / 16, dst);
    return new Float32Array(buf, dst, count * this.D);
  }
}
