/**
 * @module model/indexer-scores
 * The indexer's scores and picks as the default scan and pool compute them, split between onnxruntime
 * and TypeScript; the ONNX-only graphs of graphs/indexer-graphs (the FP4 unpack, scores, masks and
 * TopK in the graph) stay as the reference (`indexerScores: 'graph'`), and tests compare the two
 * bit for bit.
 *
 * Profiled at 1M tokens (tiny width, one row, 65,536 keys a run), the ONNX scan spent ~85 % of its
 * time unpacking: a Gather of two floats per payload byte, a broadcast Mul by the block scales and a
 * Transpose of the keys, each a pass over 128 B per key through freshly mapped memory; the product
 * itself was ~6 %. With many rows (a replay) the elementwise bf16 epilogue over [rows, hI, N] tensors
 * (casts to bf16 and back, relu, the head weight, the head sum, the mask) and the TopKs took ~80 %.
 * Here:
 *  - up to 4 index heads (every bundled model, the served one included), a run is scored in one
 *    WebAssembly SIMD loop straight from the packed keys (with index_head_dim 32 every run, with more
 *    only runs of ≤ FUSED_MAX_ROWS_MULTI_BLOCK rows, where it is the faster) (model/indexer-fused: MXFP4 codes as
 *    integers, an exact int32 dot per 32-block, the finish below four keys a vector), the same
 *    scores as the steps that follow (tests compare them bit for bit); queries that are not MXFP4
 *    values fall back to those steps, and `useFused: false` forces them (the tests' reference);
 *  - otherwise, keys are unpacked per run (model/indexer-kernels: a small WebAssembly loop, each payload
 *    byte's two values times its block's scale from one table of 65,536 pairs, the float32 products
 *    exactly as the graph's Mul gives them);
 *  - one Gemm (graph index_scores) gives a run's per-head products (per element the scan's MatMul's:
 *    the same kernel and order; see buildIndexScoresGraph), in runs of ≤ PRODUCTS_PER_RUN;
 *  - the bf16 einsum is finished per row (indexer-kernels' finish: bf16 round-to-nearest-even as
 *    onnxruntime's Cast, relu, × the head weight, the head sum in order h = 0, 1, …) for at most 4
 *    index heads, where onnxruntime's ReduceSum adds in that order too (with more heads it does not:
 *    there the graph does the head sum);
 *  - the picks come from bounded per-row heaps (model/indexer-ranking): by score, ties to the lower
 *    position, over the row's visible keys only; at the candidate source also the blocks by their
 *    maximum, the row's newest visible block pinned at +inf.
 * Nothing here grows with the context: the kernels' memory holds one run's keys and products.
 */
import { Csa2Error } from '../errors.js';
import type { ModelConfig } from '../config/model-config.js';
import { f32, type GraphSession, type TensorOf } from '../runtime/ort-session.js';
import { indexKRowBytes } from '../numerics/formats.js';
import type { NumericsMode } from './graph-ops.js';
import { FusedIndexScorer } from './indexer-fused.js';
import { IndexerKernels } from './indexer-kernels.js';
import type { BoundedHeaps } from './indexer-ranking.js';

/** Index heads up to which TypeScript sums the heads (onnxruntime's ReduceSum adds them in order there). */
export const MAX_HEADS_SUMMED_IN_TS = 4;

/**
 * Rows up to which a run of a model whose index heads span several 32-blocks (index_head_dim > 32) is
 * scored by the fused kernel; with one block per head it scores every run. Measured per key-score, run
 * and finish included (random MXFP4 rows, this machine): 2 heads × 32 fused 4.8–5.8 ns against the Gemm's
 * 8.8–30 ns at every row count; 4 heads × 64 (the served model) fused 24 / 29 / 26 / 24 / 19 ns at 1 / 2 / 4 /
 * 8 / 160 rows against the Gemm's 46 / 42 / 25 / 21 / 17 ns: the kernel wins at decode rows and loses from
 * ~4 rows, where the Gemm's wider float32 lanes do more per instruction than its int16 dot products.
 */
export const FUSED_MAX_ROWS_MULTI_BLOCK = 2;

/**
 * One run of the Gemm: at most this many products (rows × heads × keys: 2 MB of float32), keys (their
 * values, 2 MB at index_head_dim 32, are unpacked for the run) and rows × heads (so that a run takes
 * at least 512 keys). What a run allocates stays small and is read back while in cache; a decode row
 * scores a 65,536-key chunk in 4 runs, a replay's 160 rows 1,638 keys a run.
 */
export const PRODUCTS_PER_RUN = 1 << 19;
export const KEYS_PER_RUN = 16384;
export const ROWS_TIMES_HEADS_PER_RUN = 1024;

/** What one scoring run needs: the rows' index queries [rows, hI, dI] and head weights [rows, hI]. */
export interface ScoreRows {
  readonly iq: Float32Array;
  readonly iw: Float32Array;
  readonly rows: number;
}

/**
 * Scores rows against key values, in reused buffers (one instance per model; runs are sequential).
 * `scoreRow` gives row r's scores of the last run.
 */
export class IndexScorer {
  private readonly kernels: IndexerKernels;
  /** The fused kernel (model/indexer-fused) where it applies (≤ 4 heads, unless `useFused` is false). */
  private readonly fused: FusedIndexScorer | null;
  /** The packed keys `loadKeys` took last, unpacked for the Gemm only when a run needs them. */
  private packedKeys: Uint8Array = new Uint8Array(0);
  private packedCount = 0;
  private unpacked = false;
  /** Whether the last run's scores came from the fused kernel. */
  private lastFused = false;
  /** Runs scored by the fused kernel and by the Gemm (the tests check which path ran). */
  readonly runs = { fused: 0, gemm: 0 };
  private keyRows = 0;
  private scoresOut: TensorOf<'float32'> | null = null;
  private q2 = new Float32Array(0);
  private n = 0;
  private rows = 0;
  private iw: Float32Array = new Float32Array(0);
  readonly headSumInGraph: boolean;

  constructor(
    readonly config: ModelConfig,
    readonly mode: NumericsMode,
    private readonly session: GraphSession,
    useFused = true,
  ) {
    this.headSumInGraph = config.indexNumHeads > MAX_HEADS_SUMMED_IN_TS;
    this.kernels = new IndexerKernels(config.indexHeadDim);
    this.fused = useFused && !this.headSumInGraph ? new FusedIndexScorer(config.indexNumHeads, config.indexHeadDim, mode === 'bf16') : null;
  }

  dispose(): Promise<void> {
    return this.session.dispose();
  }

  /**
   * Unpacks `count` packed index-K rows into the key buffer the next runs score (at least 2 rows: a
   * one-column product takes another code path; the padding row is zero and never read).
   */
  loadKeys(packed: Uint8Array, count: number): void {
    this.packedKeys = packed;
    this.packedCount = count;
    this.unpacked = false;
    this.keyRows = Math.max(2, count);
  }

  /**
   * Scores the rows against keys [from, from + count) of those `loadKeys` loaded last (padded to
   * 2 with the zero row when the whole buffer is one key).
   */
  async run(q: ScoreRows, from: number, count: number): Promise<void> {
    const { indexNumHeads: hI, indexHeadDim: dI } = this.config;
    const N = Math.max(2, count);
    if (!(from >= 0 && from + N <= this.keyRows)) throw new Csa2Error('runtime', `IndexScorer.run: keys [${from}, ${from + N}) of ${this.keyRows}`);
    const fusedRows = this.config.indexHeadDim === 32 || q.rows <= FUSED_MAX_ROWS_MULTI_BLOCK;
    if (this.fused !== null && fusedRows && count >= 1 && from + count <= this.packedCount && this.fused.loadRows(q)) {
      this.fused.score(this.packedKeys.subarray(from * indexKRowBytes(this.config.indexHeadDim)), count);
      this.n = count;
      this.rows = q.rows;
      this.lastFused = true;
      this.runs.fused++;
      return;
    }
    this.lastFused = false;
    this.runs.gemm++;
    if (!this.unpacked) {
      this.kernels.unpack(this.packedKeys, this.packedCount, this.keyRows);
      this.unpacked = true;
    }
    let M = q.rows * hI;
    let iq = q.iq.subarray(0, M * dI);
    if (M === 1) {
      // M ≥ 2 as for N (a one-row product takes another code path); the extra row's products are not read
      if (this.q2.length < 2 * dI) this.q2 = new Float32Array(2 * dI);
      this.q2.set(iq);
      iq = this.q2;
      M = 2;
    }
    const k = f32(this.kernels.keys(from, N), [N, dI]);
    if (this.headSumInGraph) {
      const out = await this.session.run({ q: f32(iq, [M, dI]), k, iw: f32(q.iw.subarray(0, q.rows * hI), [q.rows, hI]) });
      this.scoresOut = out['scores'] as TensorOf<'float32'>;
    } else {
      const p = (await this.session.run({ q: f32(iq, [M, dI]), k }))['p'] as TensorOf<'float32'>;
      this.kernels.loadProducts(p.data, M, N);
    }
    this.n = N;
    this.rows = q.rows;
    this.iw = q.iw;
  }

  /**
   * Keys per run for `rows` rows: one run's products (rows × heads × keys) stay within
   * PRODUCTS_PER_RUN (and the indexer budget), a multiple of the block size (block maxima never
   * straddle runs), at least one block.
   */
  keysPerRun(rows: number, blockSize: number, budgetValues: number): number {
    const perRow = Math.max(2, rows * this.config.indexNumHeads);
    const keys = Math.min(KEYS_PER_RUN, Math.floor(Math.min(PRODUCTS_PER_RUN, budgetValues) / perRow));
    return Math.max(1, Math.floor(keys / blockSize)) * blockSize;
  }

  /** Rows per run: rows × heads ≤ ROWS_TIMES_HEADS_PER_RUN (a run then still takes ≥ 512 keys). */
  rowsPerRun(): number {
    return Math.max(1, Math.floor(ROWS_TIMES_HEADS_PER_RUN / this.config.indexNumHeads));
  }

  /** Row r's scores over the first `count` keys of the last run (a view, valid until the next call). */
  scoreRow(r: number, count: number): Float32Array {
    const N = this.n;
    if (!(r >= 0 && r < this.rows && count <= N)) throw new Csa2Error('runtime', `IndexScorer.scoreRow: row ${r} of ${this.rows}, ${count} of ${N} keys`);
    if (this.lastFused) return (this.fused as FusedIndexScorer).scoreRow(r, count);
    if (this.headSumInGraph) return (this.scoresOut as TensorOf<'float32'>).data.subarray(r * N, r * N + count);
    const hI = this.config.indexNumHeads;
    return this.kernels.finish(r, hI, this.iw.subarray(r * hI, (r + 1) * hI), count, this.mode === 'bf16');
  }

  /**
   * Row r's keys in [from, count) of the last run whose score is ≥ threshold, ascending (a view; it may
   * end with indices ≥ count), found in WebAssembly four scores a compare; null when the last run was
   * not the fused kernel's (the caller reads the scores).
   */
  above(r: number, from: number, count: number, threshold: number): Int32Array | null {
    return this.lastFused ? (this.fused as FusedIndexScorer).above(r, from, count, threshold) : null;
  }

  /** Row r's largest score in each of its first `blocks` blocks of `blockSize` keys (NaN left out), in WebAssembly; null when the last run was not the fused kernel's or the block size is not a multiple of 4. */
  blockMax(r: number, blocks: number, blockSize: number): Float32Array | null {
    return this.lastFused && blockSize % 4 === 0 ? (this.fused as FusedIndexScorer).blockMax(r, blocks, blockSize) : null;
  }
}

/** Scores left after the heap fills from which pushRow asks for the keys above its worst (fewer: it reads them all). */
export const ABOVE_MIN_KEYS = 256;

const f32Box = new Float32Array(1);
const u32Box = new Uint32Array(f32Box.buffer);

/** The least float32 above x (x itself for +Infinity and NaN): `≥ nextUpF32(x)` is `> x` for float32 values. */
export function nextUpF32(x: number): number {
  if (x !== x || x === Infinity) return x;
  if (x === 0) return 2 ** -149;
  f32Box[0] = x;
  u32Box[0] = (u32Box[0] as number) + (x > 0 ? 1 : -1);
  return f32Box[0] as number;
}


/**
 * Pushes a row's scores s[0..count) of keys at positions `first` + n into its top-k heap (finite
 * scores only) and, with `blocks`, the maxima of its candidate blocks (`first` a multiple of the block
 * size; the row's pinned block at +inf; blocks with no finite score are left out: they rank last and
 * the published list has -1 there anyway).
 */
export function pushRow(
  s: Float32Array,
  count: number,
  first: number,
  row: number,
  topk: BoundedHeaps,
  blocks: { heaps: BoundedHeaps; blockSize: number; pin: number } | null,
  above: ((from: number, threshold: number) => Int32Array | null) | null = null,
  blockMax: ((blocks: number) => Float32Array | null) | null = null,
): void {
  // pushScores' loops, kept inline here: the scans' hot loop. Calling pushScores from here instead was
  // measured 1.4× slower on a 1M* question with the document cache warm (documents-scale, 2.48 s → 3.68 s)
  const cap = topk.capacity;
  const base = row * cap;
  const vs = topk.values;
  const is = topk.ids;
  let n = 0;
  // until the heap is full every finite score goes in; then only those ranking before its worst
  for (; n < count && (topk.size[row] as number) < cap; n++) {
    const v = s[n] as number;
    if (v !== -Infinity && v === v) topk.push(row, v, first + n);
  }
  if (cap > 0 && (topk.size[row] as number) === cap) {
    let wv = vs[base] as number;
    let wi = is[base] as number;
    // the keys scoring at least the heap's worst now (a superset of those that can enter it: the worst only
    // rises), visited in key order as the loop below would: the same pushes, the same heap. When every key
    // left lies after the worst's position (a scan's keys come in position order), a tie with the worst can
    // never enter (ties go to the lower position, and every later worst lies before them too): only scores
    // above it are asked for (bf16 scores tie often; ≥ listed ~7% of a 1M* scan's keys, > ~0.5%)
    const strict = wi < first + n;
    const keys = above !== null && count - n >= ABOVE_MIN_KEYS ? above(n, strict ? nextUpF32(wv) : wv) : null;
    if (keys !== null) {
      for (let j = 0; j < keys.length; j++) {
        const k = keys[j] as number;
        if (k >= count) break;
        const v = s[k] as number;
        if (v > wv || (v === wv && first + k < wi)) {
          topk.push(row, v, first + k);
          wv = vs[base] as number;
          wi = is[base] as number;
        }
      }
      n = count;
    }
    for (; n < count; n++) {
      const v = s[n] as number;
      if (v < wv) continue; // most keys (NaN fails every test below too)
      if (v > wv || (v === wv && first + n < wi)) {
        topk.push(row, v, first + n);
        wv = vs[base] as number;
        wi = is[base] as number;
      }
    }
  }
  if (blocks === null) return;
  const { heaps, blockSize: bs, pin } = blocks;
  const b0 = first / bs;
  // the whole blocks' maxima in WebAssembly where the scorer has them (the same values: NaN left out, -inf
  // for none; a ±0 tie may keep the other zero, which ranks the same)
  const whole = Math.floor(count / bs);
  const maxima = blockMax !== null && whole > 0 ? blockMax(whole) : null;
  for (let j = 0; j * bs < count; j++) {
    const end = Math.min(count, (j + 1) * bs);
    let m = -Infinity;
    if (maxima !== null && j < whole) m = maxima[j] as number;
    else for (let k = j * bs; k < end; k++) if ((s[k] as number) > m) m = s[k] as number;
    const id = b0 + j;
    if (id === pin) m = Infinity;
    if (m === -Infinity) continue;
    if (heaps.accepts(row, m, id)) heaps.push(row, m, id);
  }
}

/**
 * Pushes scores s[from, to) of a row (key ids = index + `shift`) into its heap, in order: every finite
 * score until the heap is full, then those ranking before its worst (the pools' column ranges; pushRow
 * has the same loops inline).
 */
export function pushScores(s: Float32Array, from: number, to: number, shift: number, row: number, heaps: BoundedHeaps): void {
  const cap = heaps.capacity;
  if (cap === 0) return;
  let u = from;
  for (; u < to && (heaps.size[row] as number) < cap; u++) {
    const v = s[u] as number;
    if (v !== -Infinity && v === v) heaps.push(row, v, u + shift);
  }
  if (u >= to) return;
  const base = row * cap;
  let wv = heaps.values[base] as number;
  let wi = heaps.ids[base] as number;
  for (; u < to; u++) {
    const v = s[u] as number;
    if (v < wv) continue; // most keys (NaN fails every test below too)
    if (v > wv || (v === wv && u + shift < wi)) {
      heaps.push(row, v, u + shift);
      wv = heaps.values[base] as number;
      wi = heaps.ids[base] as number;
    }
  }
}
