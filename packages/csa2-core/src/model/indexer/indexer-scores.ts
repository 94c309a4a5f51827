/**
 * @module model/indexer/indexer-scores
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
 *    only runs of ≤ FUSED_MAX_ROWS_MULTI_BLOCK rows, where it is the faster) (model/indexer/indexer-fused: MXFP4 codes as
 *    integers, an exact int32 dot per 32-block, the finish below four keys a vector), the same
 *    scores as the steps that follow (tests compare them bit for bit); queries that are not MXFP4
 *    values fall back to those steps, and `useFused: false` forces them (the tests' reference);
 *  - otherwise, keys are unpacked per run (model/indexer/indexer-kernels: a small WebAssembly loop, each payload
 *    byte's two values times its block's scale from one table of 65,536 pairs, the float32 products
 *    exactly as the graph's Mul gives them);
 *  - one Gemm (graph index_scores) gives a run's per-head products (per element the scan's MatMul's:
 *    the same kernel and order; see buildIndexScoresGraph), in runs of ≤ PRODUCTS_PER_RUN;
 *  - the bf16 einsum is finished per row (indexer-kernels' finish: bf16 round-to-nearest-even as
 *    onnxruntime's Cast, relu, × the head weight, the head sum in order h = 0, 1, …) for at most 4
 *    index heads, where onnxruntime's ReduceSum adds in that order too (with more heads it does not:
 *    there the graph does the head sum);
 *  - the picks come from bounded per-row heaps (model/indexer/indexer-ranking): by score, ties to the lower
 *    position, over the row's visible keys only; at the candidate source also the blocks by their
 *    maximum, the row's newest visible block pinned at +inf.
 * Nothing here grows with the context: the kernels' memory holds one run's keys and products.
 */
import { Csa2Error } from '../../errors.js';
import type { ModelConfig } from '../../config/model-config.js';
import { f32, type GraphSession, type TensorOf } from '../../runtime/ort-session.js';
import { indexKRowBytes } from '../../numerics/formats.js';
import type { NumericsMode } from '../graphs/graph-ops.js';
import { FusedIndexScorer } from './indexer-fused.js';
import { IndexerKernels } from './indexer-kernels.js';
import { keysPerRunFor, rowsPerRunFor, type RunScorer, type ScoreRows } from './indexer-scan-run.js';
import type { ScanThreads } from './scan-threads.js';

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

export class IndexScorer implements RunScorer {
  private readonly kernels: IndexerKernels;
  /** The fused kernel (model/indexer/indexer-fused) where it applies (≤ 4 heads, unless `useFused` is false). */
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
    /** Threads that take part of the long scans (model/indexer/scan-threads); null: the main thread alone. */
    readonly threads: ScanThreads | null = null,
  ) {
    this.headSumInGraph = config.indexNumHeads > MAX_HEADS_SUMMED_IN_TS;
    this.kernels = new IndexerKernels(config.indexHeadDim);
    this.fused = useFused && !this.headSumInGraph ? new FusedIndexScorer(config.indexNumHeads, config.indexHeadDim, mode === 'bf16') : null;
  }

  async dispose(): Promise<void> {
    await this.threads?.terminate();
    await this.session.dispose();
  }

  /** Starts the scan threads now and waits until they run (a serving process's warm-up), so that their start and memory count from there. */
  async warmThreads(): Promise<void> {
    await this.threads?.ready();
  }

  /** Whether a run of `rows` rows is the fused kernel's (when the queries are MXFP4 values): the scan threads run only that. */
  fusedFor(rows: number): boolean {
    return this.fused !== null && (this.config.indexHeadDim === 32 || rows <= FUSED_MAX_ROWS_MULTI_BLOCK);
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
    if (this.fused !== null && this.fusedFor(q.rows) && count >= 1 && from + count <= this.packedCount && this.fused.loadRows(q)) {
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
    return keysPerRunFor(rows, this.config.indexNumHeads, blockSize, budgetValues);
  }

  /** Rows per run: rows × heads ≤ ROWS_TIMES_HEADS_PER_RUN (a run then still takes ≥ 512 keys). */
  rowsPerRun(): number {
    return rowsPerRunFor(this.config.indexNumHeads);
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
