/**
 * @module model/indexer/indexer-fused
 * The index scores of a run computed in one WebAssembly SIMD loop straight from the packed index keys:
 * no unpacked keys, no per-head product arrays out of onnxruntime, no copies of them. For ≤ 4 index
 * heads (where model/indexer/indexer-scores finishes the bf16 einsum in TypeScript) it gives what the split
 * path (unpack, Gemm, finish) gives, bit for bit, because every product is exact:
 *
 * - index queries and keys are MXFP4 (E2M1 values times a power of two per 32 elements), so within a
 *   32-element block q·k is an integer times one power of two: the kernel takes the key codes as the
 *   integers 2·E2M1 (0, ±1, ±2, ±3, ±4, ±6, ±8, ±12: one i8x16.swizzle a nibble vector), the queries as
 *   integers |q| ≤ 12 times 2^e (e from the block's largest value), multiplies them in int16 lanes
 *   (|products| ≤ 144, four summed per lane ≤ 576) and sums a block in int32 (|dot| ≤ 4,608, exact in
 *   float32). A block's value is that integer times the two scales (exact while it stays a normal
 *   float32, i.e. unless the scales are below 2^-100 or so: activations after the indexer's RMSNorm
 *   never are);
 * - with one block per head (index_head_dim 32) that is the product itself; with more, the blocks are
 *   added in float32 in block order. onnxruntime's Gemm adds the same exact element products in its own
 *   order: both are the exact sum, hence equal, whenever that sum fits float32's 24 bits, i.e. unless the
 *   blocks' scales differ by more than ~2^10 (then each rounds, possibly differently; the tests measure
 *   how often on real models);
 * - the rest is the split path's finish (model/indexer/indexer-kernels), four heads in one vector: bf16(p) as
 *   onnxruntime's Cast (round to nearest even on the bits), relu by clearing negative bit patterns,
 *   × the head weight, bf16 again, the heads summed in order h = 0, 1, … from +0, bf16 once more (fp32
 *   numerics: the same without the roundings).
 *
 * Queries that are not MXFP4 values (a numerics mode that does not quantize them) are refused
 * (`loadRows` returns false) and the caller takes the split path.
 */
import { Csa2Error } from '../../errors.js';
import { indexKRowBytes } from '../../numerics/formats.js';
import type { ScoreRows } from './indexer-scan-run.js';
import {
  F32,
  I32,
  V128,
  add,
  align64,
  and,
  block,
  f32cNegInf,
  f32x4ExtractLane,
  f32x4Pmax,
  storeF32,
  br,
  brIf,
  compileModule,
  ctz,
  end,
  ensureBytes,
  eqz,
  f32x4Add,
  f32x4Ge,
  i32x4Bitmask,
  store32,
  sub,
  f32x4ConvertI32x4S,
  f32x4Mul,
  f32x4ReplaceLane,
  f32x4Splat,
  geU,
  get,
  i16x8ExtendHighI8x16S,
  i16x8ExtendLowI8x16S,
  i32c,
  i32x4Add,
  i32x4DotI16x8S,
  i32x4ShrS,
  i32x4ShrU,
  i8x16Shuffle,
  i8x16ShrU,
  i8x16Swizzle,
  instantiateModule,
  load8,
  loadF32,
  loop,
  mul,
  name,
  section,
  set,
  shl,
  uleb,
  vAnd,
  vAndNot,
  vConst,
  vConstI32,
  vLoad,
  vLoad32Splat,
  vStore,
  vector,
  type WasmMemory,
} from './wasm-asm.js';

/** The key-scale table: [scale byte] → 2^(byte - 127) / 2 (the codes are taken as 2·E2M1), byte 0xff (NaN) → 0. */
const SCALE_TABLE_BYTES = 1024;
/** 2·E2M1 for codes 0…15 as int8 (-0 → 0). */
const TWICE_E2M1 = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12].map((v) => v & 0xff);

/** Byte lanes of an i8x16.shuffle that picks these i32 lanes (0–3 the first operand, 4–7 the second). */
const lanes32 = (l: readonly number[]) => l.flatMap((i) => [4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3]);

/** The query bytes of one row: per (block, head) 16 even then 16 odd elements as int16; per (block, head) the scale (f32); per head the weight (f32). */
function rowLayout(heads: number, blocks: number) {
  const codes = blocks * heads * 64;
  const scales = codes;
  const weights = scales + blocks * heads * 4;
  return { codes, scales, weights, bytes: Math.ceil((weights + heads * 4) / 16) * 16 };
}

/** Keys a group: the kernel scores four keys at once, their scores the lanes of one vector. */
const GROUP = 4;

/**
 * score(keys, groups, rowBytes, rows, q, out, outStride): for keys in groups of four (packed rows at
 * keys + i·rowBytes) and row r < rows (query bytes at q + r·layout.bytes), out[r·outStride + 4i] = the
 * score of key i (one vector store a group).
 */
function scoreBody(heads: number, blocks: number, round: boolean): number[] {
  const L = rowLayout(heads, blocks);
  // params 0 keys, 1 groups, 2 rowBytes, 3 rows, 4 q, 5 out, 6 outStride
  const [g, r, qa, oa, ka, ka1] = [7, 8, 9, 10, 11, 12];
  let next = 13;
  const v = () => next++;
  const [tbl, m0f, ones, c7fff, mhi, zero, x, t0, t1, acc] = [v(), v(), v(), v(), v(), v(), v(), v(), v(), v()] as const;
  const qv = [v(), v(), v(), v()] as const;
  const accK = [acc, v(), v(), v()];
  // a key block's 32 values as int16: even 0–7, even 8–15, odd 0–7, odd 8–15
  const kv = Array.from({ length: GROUP }, () => Array.from({ length: blocks }, () => [v(), v(), v(), v()] as const));
  const ks = Array.from({ length: blocks }, v);
  const P = Array.from({ length: heads }, v);
  const nV128 = next - 13;
  const bf16x4 = [
    ...set(x),
    ...get(x),
    ...get(x),
    ...i32c(16),
    ...i32x4ShrU,
    ...get(ones),
    ...vAnd,
    ...i32x4Add,
    ...get(c7fff),
    ...i32x4Add,
    ...get(mhi),
    ...vAnd,
  ];
  const half = (blocks * 32) / 2;
  // the group's keys: nibbles → 2·E2M1 int8 lanes; the blocks' scales, one lane a key
  const perGroup = [
    ...Array.from({ length: GROUP }, (_, k) => [
      ...(k === 0 ? [...get(ka), ...set(ka1)] : [...get(ka1), ...get(2), ...add, ...set(ka1)]),
      ...Array.from({ length: blocks }, (_, b) => [
        ...get(ka1),
        ...vLoad(16 * b),
        ...set(x),
        ...get(tbl),
        ...get(x),
        ...get(m0f),
        ...vAnd,
        ...i8x16Swizzle,
        ...set(t0),
        ...get(tbl),
        ...get(x),
        ...i32c(4),
        ...i8x16ShrU,
        ...i8x16Swizzle,
        ...set(t1),
        ...get(t0),
        ...i16x8ExtendLowI8x16S,
        ...set(kv[k]![b]![0]),
        ...get(t0),
        ...i16x8ExtendHighI8x16S,
        ...set(kv[k]![b]![1]),
        ...get(t1),
        ...i16x8ExtendLowI8x16S,
        ...set(kv[k]![b]![2]),
        ...get(t1),
        ...i16x8ExtendHighI8x16S,
        ...set(kv[k]![b]![3]),
        ...(k === 0
          ? [...get(ka1), ...load8(half + b), ...i32c(2), ...shl, ...loadF32(0), ...f32x4Splat, ...set(ks[b]!)]
          : [...get(ks[b]!), ...get(ka1), ...load8(half + b), ...i32c(2), ...shl, ...loadF32(0), ...f32x4ReplaceLane(k), ...set(ks[b]!)]),
      ]).flat(),
    ]).flat(),
  ];
  const keyDot = (k: number, b: number) => [
    ...get(kv[k]![b]![0]),
    ...get(qv[0]),
    ...i32x4DotI16x8S,
    ...get(kv[k]![b]![1]),
    ...get(qv[1]),
    ...i32x4DotI16x8S,
    ...i32x4Add,
    ...get(kv[k]![b]![2]),
    ...get(qv[2]),
    ...i32x4DotI16x8S,
    ...i32x4Add,
    ...get(kv[k]![b]![3]),
    ...get(qv[3]),
    ...i32x4DotI16x8S,
    ...i32x4Add,
    ...set(accK[k]!),
  ];
  // one (block, head): the four keys' int32 dots as the lanes of one vector, times the two scales, into P[h]
  const perBlockHead = (b: number, h: number) => {
    const off = (b * heads + h) * 64;
    return [
      ...[0, 1, 2, 3].flatMap((j) => [...get(qa), ...vLoad(off + 16 * j), ...set(qv[j as 0 | 1 | 2 | 3])]),
      ...Array.from({ length: GROUP }, (_, k) => keyDot(k, b)).flat(),
      ...get(accK[0]!),
      ...get(accK[1]!),
      ...i8x16Shuffle(lanes32([0, 1, 4, 5])),
      ...get(accK[0]!),
      ...get(accK[1]!),
      ...i8x16Shuffle(lanes32([2, 3, 6, 7])),
      ...i32x4Add,
      ...set(t0),
      ...get(accK[2]!),
      ...get(accK[3]!),
      ...i8x16Shuffle(lanes32([0, 1, 4, 5])),
      ...get(accK[2]!),
      ...get(accK[3]!),
      ...i8x16Shuffle(lanes32([2, 3, 6, 7])),
      ...i32x4Add,
      ...set(t1),
      ...get(t0),
      ...get(t1),
      ...i8x16Shuffle(lanes32([0, 2, 4, 6])),
      ...get(t0),
      ...get(t1),
      ...i8x16Shuffle(lanes32([1, 3, 5, 7])),
      ...i32x4Add,
      ...f32x4ConvertI32x4S,
      ...get(qa),
      ...vLoad32Splat(L.scales + 4 * (b * heads + h)),
      ...get(ks[b]!),
      ...f32x4Mul,
      ...f32x4Mul,
      ...(b === 0 ? [] : [...get(P[h]!), ...f32x4Add]),
      ...set(P[h]!),
    ];
  };
  // the rest of the einsum, lane-wise (a lane = a key): heads summed in order from +0
  const finish = [
    ...get(oa),
    ...get(zero),
    ...Array.from({ length: heads }, (_, h) => [
      ...get(P[h]!),
      ...(round ? bf16x4 : []),
      ...set(x),
      ...get(x),
      ...get(x),
      ...i32c(31),
      ...i32x4ShrS,
      ...vAndNot,
      ...get(qa),
      ...vLoad32Splat(L.weights + 4 * h),
      ...f32x4Mul,
      ...(round ? bf16x4 : []),
      ...f32x4Add,
    ]).flat(),
    ...(round ? bf16x4 : []),
    ...vStore(0),
  ];
  const body = [
    ...vConst(TWICE_E2M1),
    ...set(tbl),
    ...vConstI32([0x0f0f0f0f, 0x0f0f0f0f, 0x0f0f0f0f, 0x0f0f0f0f]),
    ...set(m0f),
    ...vConstI32([1, 1, 1, 1]),
    ...set(ones),
    ...vConstI32([0x7fff, 0x7fff, 0x7fff, 0x7fff]),
    ...set(c7fff),
    ...vConstI32([-65536, -65536, -65536, -65536]),
    ...set(mhi),
    ...vConstI32([0, 0, 0, 0]),
    ...set(zero),
    ...get(0),
    ...set(ka),
    ...i32c(0),
    ...set(g),
    ...block,
    ...loop,
    ...get(g),
    ...get(1),
    ...geU,
    ...brIf(1),
    ...perGroup,
    ...get(4),
    ...set(qa),
    ...get(5),
    ...get(g),
    ...i32c(4),
    ...shl,
    ...add,
    ...set(oa),
    ...i32c(0),
    ...set(r),
    ...block,
    ...loop,
    ...get(r),
    ...get(3),
    ...geU,
    ...brIf(1),
    ...Array.from({ length: blocks }, (_, b) => Array.from({ length: heads }, (_, h) => perBlockHead(b, h)).flat()).flat(),
    ...finish,
    ...get(qa),
    ...i32c(L.bytes),
    ...add,
    ...set(qa),
    ...get(oa),
    ...get(6),
    ...add,
    ...set(oa),
    ...get(r),
    ...i32c(1),
    ...add,
    ...set(r),
    ...br(0),
    ...end,
    ...end,
    ...get(ka),
    ...get(2),
    ...i32c(GROUP),
    ...mul,
    ...add,
    ...set(ka),
    ...get(g),
    ...i32c(1),
    ...add,
    ...set(g),
    ...br(0),
    ...end,
    ...end,
    ...end,
  ];
  return [
    ...vector([
      [6, I32],
      [nV128, V128],
    ]),
    ...body,
  ];
}

/**
 * above(row, from, count, threshold, out) → n: the indices i in [from, count) of the float32 scores at
 * `row` with score ≥ threshold, ascending, written as i32 at `out` (four scores a compare; it may read up
 * to three scores past `count` and list indices up to count + 2, which the caller drops). NaN is never
 * listed. The scans' top-k push (indexer-scores pushRow) visits only these once its heap is full.
 */
function aboveBody(): number[] {
  // params 0 row, 1 from, 2 count, 3 threshold (f32), 4 out; locals 5 i, 6 n, 7 mask, 8 thr (v128)
  const [i, n, m, vt] = [5, 6, 7, 8];
  const body = [
    ...get(3),
    ...f32x4Splat,
    ...set(vt),
    ...get(1),
    ...set(i),
    ...i32c(0),
    ...set(n),
    ...block,
    ...loop,
    ...get(i),
    ...get(2),
    ...geU,
    ...brIf(1),
    ...get(0),
    ...get(i),
    ...i32c(2),
    ...shl,
    ...add,
    ...vLoad(0),
    ...get(vt),
    ...f32x4Ge,
    ...i32x4Bitmask,
    ...set(m),
    ...block,
    ...loop,
    ...get(m),
    ...eqz,
    ...brIf(1),
    ...get(4),
    ...get(n),
    ...i32c(2),
    ...shl,
    ...add,
    ...get(i),
    ...get(m),
    ...ctz,
    ...add,
    ...store32,
    ...get(n),
    ...i32c(1),
    ...add,
    ...set(n),
    ...get(m),
    ...get(m),
    ...i32c(1),
    ...sub,
    ...and,
    ...set(m),
    ...br(0),
    ...end,
    ...end,
    ...get(i),
    ...i32c(4),
    ...add,
    ...set(i),
    ...br(0),
    ...end,
    ...end,
    ...get(n),
    ...end,
  ];
  return [
    ...vector([
      [3, I32],
      [1, V128],
    ]),
    ...body,
  ];
}

/**
 * blockMax(row, blocks, vectors, out): for each block of `vectors` × 4 float32 scores at `row`, the
 * largest, NaN left out (-Infinity for a block of NaN), written as float32 at `out` — what pushRow's
 * candidate-block maxima take (the candidate source scans every entry: 1M a decode row at 1M tokens).
 */
function blockMaxBody(): number[] {
  // params 0 row, 1 blocks, 2 vectors a block, 3 out; locals 4 b, 5 k, 6 p; v128 7 acc, 8 t, 9 -inf
  const [b, k, p, acc, t, ninf] = [4, 5, 6, 7, 8, 9];
  const body = [
    ...f32cNegInf,
    ...f32x4Splat,
    ...set(ninf),
    ...get(0),
    ...set(p),
    ...i32c(0),
    ...set(b),
    ...block,
    ...loop,
    ...get(b),
    ...get(1),
    ...geU,
    ...brIf(1),
    ...get(ninf),
    ...set(acc),
    ...i32c(0),
    ...set(k),
    ...block,
    ...loop,
    ...get(k),
    ...get(2),
    ...geU,
    ...brIf(1),
    // acc = pmax(acc, v): a NaN score keeps acc
    ...get(acc),
    ...get(p),
    ...vLoad(0),
    ...f32x4Pmax,
    ...set(acc),
    ...get(p),
    ...i32c(16),
    ...add,
    ...set(p),
    ...get(k),
    ...i32c(1),
    ...add,
    ...set(k),
    ...br(0),
    ...end,
    ...end,
    ...get(acc),
    ...get(acc),
    ...get(acc),
    ...i8x16Shuffle(lanes32([2, 3, 0, 1])),
    ...f32x4Pmax,
    ...set(t),
    ...get(t),
    ...get(t),
    ...get(t),
    ...i8x16Shuffle(lanes32([1, 0, 3, 2])),
    ...f32x4Pmax,
    ...set(t),
    ...get(3),
    ...get(b),
    ...i32c(2),
    ...shl,
    ...add,
    ...get(t),
    ...f32x4ExtractLane(0),
    ...storeF32,
    ...get(b),
    ...i32c(1),
    ...add,
    ...set(b),
    ...br(0),
    ...end,
    ...end,
    ...end,
  ];
  return [
    ...vector([
      [3, I32],
      [3, V128],
    ]),
    ...body,
  ];
}

function moduleBytes(heads: number, blocks: number, round: boolean): Uint8Array {
  const f = scoreBody(heads, blocks, round);
  const a = aboveBody();
  const m = blockMaxBody();
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
        [0x60, ...vector([[I32], [I32], [I32], [I32], [I32], [I32], [I32]]), 0],
        [0x60, ...vector([[I32], [I32], [I32], [F32], [I32]]), ...vector([[I32]])],
        [0x60, ...vector([[I32], [I32], [I32], [I32]]), 0],
      ]),
    ),
    ...section(3, vector([[0], [1], [2]])),
    ...section(5, vector([[0, 1]])),
    ...section(
      7,
      vector([
        [...name('score'), 0, 0],
        [...name('above'), 0, 1],
        [...name('blockMax'), 0, 2],
        [...name('mem'), 2, 0],
      ]),
    ),
    ...section(
      10,
      vector([
        [...uleb(f.length), ...f],
        [...uleb(a.length), ...a],
        [...uleb(m.length), ...m],
      ]),
    ),
  ]);
}

const compiledByShape = new Map<string, object>();

type Score = (keys: number, groups: number, rowBytes: number, rows: number, q: number, out: number, outStride: number) => void;
type Above = (row: number, from: number, count: number, threshold: number, out: number) => number;
type BlockMax = (row: number, blocks: number, vectors: number, out: number) => void;

/**
 * The fused scorer for `heads` (≤ 4) index heads of width d (a multiple of 32), one instance per model
 * (calls are sequential). Memory: the key-scale table, then a run's query rows, packed keys and scores;
 * it grows as needed and is reused.
 */
export class FusedIndexScorer {
  private readonly memory: WasmMemory;
  private readonly scoreFn: Score;
  private readonly aboveFn: Above;
  private readonly blockMaxFn: BlockMax;
  private readonly blocks: number;
  private readonly layout: ReturnType<typeof rowLayout>;
  private rows = 0;
  private rowsOf: ScoreRows | null = null;
  private out = 0;
  private stride = 0;
  /** Where `above` writes its indices (after the scores, 16 bytes of slack between: it reads 4 scores a time). */
  private idx = 0;

  constructor(
    readonly heads: number,
    readonly d: number,
    readonly round: boolean,
  ) {
    if (!(Number.isInteger(heads) && heads >= 1 && heads <= 4 && Number.isInteger(d) && d > 0 && d % 32 === 0)) {
      throw new Csa2Error('runtime', `FusedIndexScorer: ${heads} heads of width ${d} (1–4 heads, width a multiple of 32)`);
    }
    this.blocks = d / 32;
    this.layout = rowLayout(heads, this.blocks);
    const key = `${heads}/${this.blocks}/${round}`;
    let compiled = compiledByShape.get(key);
    if (compiled === undefined) {
      compiled = compileModule(moduleBytes(heads, this.blocks, round));
      compiledByShape.set(key, compiled);
    }
    const { memory, exports } = instantiateModule(compiled);
    this.memory = memory;
    this.scoreFn = exports['score'] as Score;
    this.aboveFn = exports['above'] as Above;
    this.blockMaxFn = exports['blockMax'] as BlockMax;
    const table = new Float32Array(memory.buffer, 0, 256);
    for (let s = 0; s < 256; s++) table[s] = s === 0xff ? 0 : 2 ** (s - 128);
  }

  /**
   * Takes the rows' index queries [rows, heads, d] (MXFP4 values) and head weights [rows, heads] for the
   * next `score` calls (kept while the same ScoreRows object comes again: a caller that changes its
   * arrays passes a new object). False, and nothing kept,
   * where a query block is not an integer |c| ≤ 12 times a power of two in float32's normal range.
   */
  loadRows(q: ScoreRows): boolean {
    if (q === this.rowsOf) return true;
    const { iq, iw, rows } = q;
    const { heads: H, d, blocks: B, layout: L } = this;
    const buf = ensureBytes(this.memory, SCALE_TABLE_BYTES + rows * L.bytes);
    const codes = new Int16Array(buf, SCALE_TABLE_BYTES, (rows * L.bytes) / 2);
    const f = new Float32Array(buf);
    const bits = new Uint32Array(1);
    const asFloat = new Float32Array(bits.buffer);
    for (let r = 0; r < rows; r++) {
      const rowAt = SCALE_TABLE_BYTES + r * L.bytes;
      for (let b = 0; b < B; b++) {
        for (let h = 0; h < H; h++) {
          const v0 = (r * H + h) * d + b * 32;
          let amax = 0;
          for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(iq[v0 + j] as number));
          let scale = 0;
          if (amax > 0) {
            asFloat[0] = amax;
            const e = (((bits[0] as number) >>> 23) & 0xff) - 127 - 3;
            if (!(e >= -100 && e <= 100)) return this.forget();
            scale = 2 ** e;
            const inv = 2 ** -e;
            const at = (rowAt - SCALE_TABLE_BYTES + (b * H + h) * 64) / 2;
            for (let j = 0; j < 32; j++) {
              const c = (iq[v0 + j] as number) * inv;
              if (!(Number.isInteger(c) && Math.abs(c) <= 12)) return this.forget();
              codes[at + (j & 1) * 16 + (j >> 1)] = c;
            }
          } else {
            codes.fill(0, (rowAt - SCALE_TABLE_BYTES + (b * H + h) * 64) / 2, (rowAt - SCALE_TABLE_BYTES + (b * H + h + 1) * 64) / 2);
          }
          f[(rowAt + L.scales) / 4 + b * H + h] = scale;
        }
      }
      for (let h = 0; h < H; h++) f[(rowAt + L.weights) / 4 + h] = iw[r * H + h] as number;
    }
    this.rows = rows;
    this.rowsOf = q;
    return true;
  }

  private forget(): false {
    this.rows = 0;
    this.rowsOf = null;
    return false;
  }

  /** Scores the loaded rows against `count` packed index-K rows (`scoreRow` gives a row's scores, valid until the next call). */
  score(packed: Uint8Array, count: number): void {
    const rowBytes = indexKRowBytes(this.d);
    if (this.rowsOf === null) throw new Csa2Error('runtime', 'FusedIndexScorer.score: no rows loaded');
    if (!(packed.length >= count * rowBytes))
      throw new Csa2Error('runtime', `FusedIndexScorer.score: ${count} rows of ${rowBytes} bytes from ${packed.length}`);
    const rows = this.rows;
    const groups = Math.ceil(count / GROUP);
    const keysAt = align64(SCALE_TABLE_BYTES + rows * this.layout.bytes);
    // the last group padded with zero keys (codes 0: scores of 0, never read)
    const padded = groups * GROUP * rowBytes;
    const outAt = align64(keysAt + padded);
    const stride = groups * GROUP;
    const idxAt = align64(outAt + rows * stride * 4 + 16);
    const buf = ensureBytes(this.memory, idxAt + (stride + GROUP) * 4);
    const keys = new Uint8Array(buf, keysAt, padded);
    keys.set(packed.subarray(0, count * rowBytes));
    keys.fill(0, count * rowBytes);
    this.scoreFn(keysAt, groups, rowBytes, rows, SCALE_TABLE_BYTES, outAt, stride * 4);
    this.out = outAt;
    this.stride = stride;
    this.idx = idxAt;
  }

  /**
   * The indices i in [from, count) whose score in row r of the last `score` call is ≥ threshold,
   * ascending (a view, valid until the next call); may end with indices ≥ count, which callers drop.
   */
  above(r: number, from: number, count: number, threshold: number): Int32Array {
    if (!(r >= 0 && r < this.rows && from >= 0 && count <= this.stride))
      throw new Csa2Error('runtime', `FusedIndexScorer.above: row ${r} of ${this.rows}, [${from}, ${count}) of ${this.stride}`);
    const n = this.aboveFn(this.out + r * this.stride * 4, from, count, threshold, this.idx);
    return new Int32Array(this.memory.buffer, this.idx, n);
  }

  /**
   * The largest score of each of the first `blocks` blocks of `blockSize` keys (a multiple of 4) in row r
   * of the last `score` call, NaN left out (-Infinity for a block with no other score): a view, valid
   * until the next call.
   */
  blockMax(r: number, blocks: number, blockSize: number): Float32Array {
    if (!(r >= 0 && r < this.rows && blockSize % 4 === 0 && blockSize > 0 && blocks * blockSize <= this.stride)) {
      throw new Csa2Error('runtime', `FusedIndexScorer.blockMax: row ${r} of ${this.rows}, ${blocks} blocks of ${blockSize} in ${this.stride}`);
    }
    this.blockMaxFn(this.out + r * this.stride * 4, blocks, blockSize / 4, this.idx);
    return new Float32Array(this.memory.buffer, this.idx, blocks);
  }

  /** Row r's scores over the first `count` keys of the last `score` call (a view, valid until the next call). */
  scoreRow(r: number, count: number): Float32Array {
    return new Float32Array(this.memory.buffer, this.out + r * this.stride * 4, count);
  }
}
