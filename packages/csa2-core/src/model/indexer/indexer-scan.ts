/**
 * @module model/indexer/indexer-scan
 * Scans of every visible entry (Full layers, and index sources up to the candidate source): the
 * reference's top-k over all causally visible index keys, and at the candidate source level one of the
 * hierarchical indexer (the best candidate blocks).
 *
 * The default is scanSplit (model/indexer/indexer-scores, one span at a time, chunked as below); the ONNX
 * graph scans, kept as the reference (indexerScores 'graph') and for the masked reference path, run
 * two ways, with the same lists bit for bit:
 * - chunked (one span): its keys in chunks of indexerKeyChunk, each scored for the span's rows (in row
 *   blocks within the score budget); each chunk ranks its own best, and the chunks'
 *   rankings are merged as one ranking over all keys would order them (by score, ties to the lower
 *   position). Memory does not grow with the context.
 * - grouped (several spans with few keys, e.g. decode steps): one graph run with a span dimension,
 *   each span's rows scored against its own keys only (padded to the group's most keys and rows, the
 *   padding masked out), so a row's best ones are what it gets alone.
 *
 * A row's list: its best min(kk, visible) entries, in ascending position order, then -1. (The scan's
 * picks past the visible entries score -inf and are -1 in the reference too, so only finite picks are
 * kept; the reference path masked to the candidate pool keeps the -inf ones below the row's length,
 * as the reference does, see indexer-pool.)
 */
import type { LayerPlanEntry } from '../../config/layer-plan.js';
import type { ModelConfig } from '../../config/model-config.js';
import { Csa2Error } from '../../errors.js';
import { bool, i32, i64, u8, type TensorOf } from '../../runtime/ort-session.js';
import type { TypedGraph } from '../graphs/graph-io.js';
import type { INDEXER_SCAN } from '../graphs/signatures.js';
import { queryRows, type IndexerContext, type IndexerJob } from './indexer-job.js';
import { candidateMask } from './indexer-pool.js';
import { BoundedHeaps, RunningRanking } from './indexer-ranking.js';
import type { IndexScorer } from './indexer-scores.js';
import { keyChunks, pinOf, scoreBlock, type BlockRow, type ScoreRows } from './indexer-scan-run.js';
import type { PackedRowStore } from '../sequence/packed-rows.js';
import { SLICES_PER_TAKER, SLICE_MIN_SCORES, THREAD_MIN_SCORES, keysIn, type ScanPiece, type ScanReply, type ScanTask } from './scan-threads.js';

export interface ScanResult {
  readonly topk: Int32Array;
  /** [rows, kb] the candidate source's blocks (-1 = none); null elsewhere. */
  readonly candidates: Int32Array | null;
  readonly kb: number;
}

/** Candidate blocks a candidate-source row keeps: topBlocks, or every block of the nVis visible entries when fewer. */
export function candidateBlocksFor(c: ModelConfig, nVis: number): number {
  return Math.min(c.candidateTopKBlocks, Math.ceil(nVis / c.candidateBlockSize));
}

/** Merges rows [rowsFrom, rowsTo) of a run's [rows, k] output into rows r0… of `ranking` (positions shifted by -shift). */
function mergeRun(
  ranking: RunningRanking,
  r0: number,
  v: TensorOf<'float32'>,
  i: TensorOf<'int32'>,
  shift: number,
  keepInfinite: boolean,
  rowsFrom = 0,
  rowsTo = v.dims[0] as number,
): void {
  const k = v.dims[1] as number;
  for (let r = rowsFrom; r < rowsTo; r++) ranking.merge(r0 + r - rowsFrom, v.data, i.data, r * k, k, shift, keepInfinite);
}

/** The merged best min(kk, nVis) per row → ascending positions, those ≥ the row's length -1, padded to kk. */
function topkFromRanking(ranking: RunningRanking, job: IndexerJob): Int32Array {
  const { rows: S, kk, nVis, clen } = job;
  const out = new Int32Array(S * kk).fill(-1);
  const cap = ranking.capacity;
  for (let r = 0; r < S; r++) {
    const n = Math.min(kk, nVis, ranking.count[r] as number);
    const picks = out.subarray(r * kk, r * kk + n);
    picks.set(ranking.ids.subarray(r * cap, r * cap + n));
    picks.sort();
    const visible = clen[r] as number;
    for (let j = 0; j < n; j++) if ((picks[j] as number) >= visible) picks[j] = -1;
  }
  return out;
}

/** The merged best kb candidate blocks per row, in rank order; blocks whose maximum is -inf (nothing reachable) → -1. */
function blocksFromRanking(ranking: RunningRanking, S: number, kb: number): Int32Array {
  const out = new Int32Array(S * kb).fill(-1);
  const cap = ranking.capacity;
  for (let r = 0; r < S; r++) {
    const n = Math.min(kb, ranking.count[r] as number);
    for (let k = 0; k < n; k++) if ((ranking.values[r * cap + k] as number) > -Infinity) out[r * kb + k] = ranking.ids[r * cap + k] as number;
  }
  return out;
}

const int64Tensor = (values: ArrayLike<number>, dims: readonly number[]) => i64(BigInt64Array.from(Array.from(values, (v) => BigInt(v))), dims);

/** A [G, S, k] output as [G·S, k] rows. */
function rows2d<T extends 'float32' | 'int32'>(t: TensorOf<T>): TensorOf<T> {
  return { ...t, dims: [(t.dims[0] as number) * (t.dims[1] as number), t.dims[2] as number] };
}

/** A span's candidate blocks [rows, kb] (-1 = none): the reference path scans every key masked to them. */
export interface CandidateBlocks {
  readonly cand: Int32Array;
  readonly kb: number;
}

/**
 * One span alone: its keys in chunks, its rows in blocks; `pool` restricts picks to the rows'
 * candidate blocks (reference path), its mask built per run.
 */
export async function scanChunked(
  ctx: IndexerContext,
  graph: TypedGraph<typeof INDEXER_SCAN>,
  e: LayerPlanEntry,
  job: IndexerJob,
  pool: CandidateBlocks | null,
): Promise<ScanResult> {
  const c = ctx.config;
  const { indexNumHeads: hI, indexHeadDim: dI } = c;
  const bs = c.candidateBlockSize;
  const { rows: S, nVis, clen } = job;
  const rowBytes = job.src.indexK.rowBytes;
  const kb = candidateBlocksFor(c, nVis);
  const ranking = new RunningRanking(S, Math.min(job.kk, nVis));
  const blockRanking = e.isCandidateSource && pool === null ? new RunningRanking(S, kb) : null;
  const kkT = i32(Int32Array.of(job.kk), [1]);
  // split where a shared prefix ends (rounded down to a whole candidate block): every chunk but the
  // one holding the private tail is read in place (see PackedRowStore)
  const split = Math.floor(job.src.indexK.sharedRowCount / bs) * bs;
  for (const [k0, k1] of keyChunks(nVis, ctx.indexerKeyChunk, split)) {
    // at least two keys (a one-column product takes another code path): a zero row nobody may pick
    const N = Math.max(2, k1 - k0);
    let packed = job.src.indexK.range(k0, k1 - k0);
    if (N > k1 - k0) {
      const p = new Uint8Array(N * rowBytes);
      p.set(packed);
      packed = p;
    }
    const K = u8(packed, [1, N, rowBytes]);
    const step = Math.max(1, Math.floor(ctx.indexerBudgetValues / (hI * N)));
    for (let r0 = 0; r0 < S; r0 += step) {
      const r1 = Math.min(S, r0 + step);
      const n = r1 - r0;
      const candIn = pool !== null ? bool(candidateMask(pool.cand, pool.kb, bs, [r0, r1], [k0, k1], N), [1, n, N]) : undefined;
      const q = queryRows(c, job, r0, r1);
      const out = await graph.run({
        iq: { ...q.iq, dims: [1, n, hI, dI] },
        iw: { ...q.iw, dims: [1, n, hI] },
        K,
        kbase: int64Tensor([k0], [1, 1, 1]),
        lo: int64Tensor(new Array<number>(n).fill(0), [1, n, 1]),
        hi: int64Tensor(clen.subarray(r0, r1), [1, n, 1]),
        kk: kkT,
        ...(candIn !== undefined ? { cand_in: candIn } : {}),
        ...(e.isCandidateSource
          ? {
              pin: int64Tensor(
                Array.from(clen.subarray(r0, r1), (v) => pinOf(v, bs)),
                [1, n, 1],
              ),
            }
          : {}),
      });
      mergeRun(ranking, r0, rows2d(out.topv), rows2d(out.topi), 0, pool !== null);
      if (blockRanking !== null && out.blockv !== undefined && out.blocki !== undefined)
        mergeRun(blockRanking, r0, rows2d(out.blockv), rows2d(out.blocki), 0, true);
    }
  }
  // the reference path keeps the -inf picks below a row's length (see the module comment)
  if (pool !== null) return { topk: topkFromRanking(ranking, job), candidates: null, kb: 0 };
  return { topk: topkFromRanking(ranking, job), candidates: blockRanking !== null ? blocksFromRanking(blockRanking, S, kb) : null, kb };
}

/**
 * Several spans with few keys in shared runs: one graph run scores each span's rows against its own
 * keys (a batch dimension, padded to the group's most rows and keys), while the group's padded
 * spans × rows × keys × heads stays within the budget.
 */
export async function scanGrouped(
  ctx: IndexerContext,
  graph: TypedGraph<typeof INDEXER_SCAN>,
  e: LayerPlanEntry,
  jobs: readonly IndexerJob[],
): Promise<Map<IndexerJob, ScanResult>> {
  const hI = ctx.config.indexNumHeads;
  const results = new Map<IndexerJob, ScanResult>();
  // similar sizes together: less padding
  const order = [...jobs].sort((a, b) => a.nVis - b.nVis || a.rows - b.rows);
  let group: IndexerJob[] = [];
  const cost = (g: readonly IndexerJob[]) => g.length * Math.max(...g.map((j) => j.rows)) * Math.max(2, ...g.map((j) => j.nVis)) * hI;
  for (const j of order) {
    if (group.length > 0 && cost([...group, j]) > ctx.indexerBudgetValues) {
      for (const [k, r] of await scanGroup(ctx, graph, e, group)) results.set(k, r);
      group = [];
    }
    group.push(j);
  }
  if (group.length > 0) for (const [k, r] of await scanGroup(ctx, graph, e, group)) results.set(k, r);
  return results;
}

async function scanGroup(
  ctx: IndexerContext,
  graph: TypedGraph<typeof INDEXER_SCAN>,
  e: LayerPlanEntry,
  group: readonly IndexerJob[],
): Promise<Map<IndexerJob, ScanResult>> {
  const c = ctx.config;
  const bs = c.candidateBlockSize;
  const { indexNumHeads: hI, indexHeadDim: dI } = c;
  const G = group.length;
  const rowBytes = (group[0] as IndexerJob).src.indexK.rowBytes;
  const N = Math.max(2, ...group.map((j) => j.nVis)); // at least two keys (a one-column product takes another code path)
  const S = Math.max(...group.map((j) => j.rows));
  const packed = new Uint8Array(G * N * rowBytes);
  const iq = new Float32Array(G * S * hI * dI);
  const iw = new Float32Array(G * S * hI);
  const hi = new Array<number>(G * S).fill(0); // padding rows pick nothing
  const pin = new Array<number>(G * S).fill(-1);
  group.forEach((j, g) => {
    j.src.indexK.copyRange(0, j.nVis, packed, g * N);
    iq.set(j.iq, g * S * hI * dI);
    iw.set(j.iw, g * S * hI);
    for (let r = 0; r < j.rows; r++) {
      hi[g * S + r] = j.clen[r] as number;
      pin[g * S + r] = pinOf(j.clen[r] as number, bs);
    }
  });
  const out = await graph.run({
    iq: { type: 'float32', data: iq, dims: [G, S, hI, dI] },
    iw: { type: 'float32', data: iw, dims: [G, S, hI] },
    K: u8(packed, [G, N, rowBytes]),
    kbase: int64Tensor(new Array<number>(G).fill(0), [G, 1, 1]),
    lo: int64Tensor(new Array<number>(G * S).fill(0), [G, S, 1]),
    hi: int64Tensor(hi, [G, S, 1]),
    kk: i32(Int32Array.of(Math.max(...group.map((j) => j.kk))), [1]),
    ...(e.isCandidateSource ? { pin: int64Tensor(pin, [G, S, 1]) } : {}),
  });
  const results = new Map<IndexerJob, ScanResult>();
  const flat = rows2d;
  group.forEach((j, g) => {
    const ranking = new RunningRanking(j.rows, Math.min(j.kk, j.nVis));
    mergeRun(ranking, 0, flat(out.topv), flat(out.topi), 0, false, g * S, g * S + j.rows);
    let candidates: Int32Array | null = null;
    const kb = candidateBlocksFor(c, j.nVis);
    if (e.isCandidateSource && out.blockv !== undefined && out.blocki !== undefined) {
      const blocks = new RunningRanking(j.rows, kb);
      mergeRun(blocks, 0, flat(out.blockv), flat(out.blocki), 0, false, g * S, g * S + j.rows);
      candidates = blocksFromRanking(blocks, j.rows, kb);
    }
    results.set(j, { topk: topkFromRanking(ranking, j), candidates, kb });
  });
  return results;
}

/** How often scans shared one frozen prefix's keys across spans (for tests: that the grouped path ran). */
export const sharedScanStats = { groups: 0 };

interface SplitState {
  readonly job: IndexerJob;
  readonly topk: BoundedHeaps;
  readonly blocks: BoundedHeaps | null;
  readonly kb: number;
}

function splitState(ctx: IndexerContext, e: LayerPlanEntry, job: IndexerJob): SplitState {
  const kb = candidateBlocksFor(ctx.config, job.nVis);
  return { job, topk: new BoundedHeaps(job.rows, Math.min(job.kk, job.nVis)), blocks: e.isCandidateSource ? new BoundedHeaps(job.rows, kb) : null, kb };
}

/** Scans shared with the scan threads (model/indexer/scan-threads), for tests and benchmarks: scans, slices the threads scored, slices a failed thread took that the main thread scored again. */
export const threadScanStats = { scans: 0, threadSlices: 0, takenBack: 0 };

/** The scan chunks of a span's `n` keys (split where its shared prefix ends, see scanChunked) that lie in [from, to), cut to it. */
function chunksIn(n: number, chunk: number, split: number, from: number, to: number): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  for (const [a, b] of keyChunks(n, chunk, split)) if (b > from && a < to) out.push([Math.max(a, from), Math.min(b, to)]);
  return out;
}

/** Scores (row × visible key pairs) of keys [a, b) for the rows. */
function workIn(rows: readonly BlockRow[], a: number, b: number): number {
  let w = 0;
  for (const x of rows) w += Math.max(0, Math.min(b, x.clen) - a);
  return w;
}

/** Scores the rows against the pieces on this thread. */
async function scorePieces(
  ctx: IndexerContext,
  scorer: IndexScorer,
  R: number,
  pieces: readonly ScanPiece[],
  q: ScoreRows,
  rows: readonly BlockRow[],
): Promise<void> {
  for (const p of pieces) await scoreBlock(scorer, ctx.config.candidateBlockSize, ctx.indexerBudgetValues, p.keys, R, p.k0, p.keys.length / R, q, rows);
}

/** Merges a thread's heaps (row i = rows[i]) into the rows' heaps: the best of the best of each part are the best of all. */
function mergeHeaps(rows: readonly BlockRow[], reply: Extract<ScanReply, { kind: 'done' }>): void {
  rows.forEach((x, i) => {
    for (const [from, into] of [
      [reply.topk, x.topk],
      [reply.blocks, x.blocks],
    ] as const) {
      if (from === null || into === null) continue;
      const n = from.size[i] as number;
      const base = i * from.capacity;
      for (let j = 0; j < n; j++) {
        const v = from.values[base + j] as number;
        const id = from.ids[base + j] as number;
        if (into.accepts(x.r, v, id)) into.push(x.r, v, id);
      }
    }
  });
}

/**
 * Cuts keys [lo, hi) on block boundaries into `n` slices of about equal work (rows × visible keys):
 * n + 1 boundaries, the first lo, the last hi.
 */
function sliceByWork(rows: readonly BlockRow[], lo: number, hi: number, bs: number, n: number): Int32Array {
  const total = workIn(rows, lo, hi);
  const blocks = Math.ceil((hi - lo) / bs);
  const cuts = [lo];
  for (let p = 1; p < n; p++) {
    const target = (total * p) / n;
    let a = Math.ceil(((cuts[cuts.length - 1] as number) - lo) / bs);
    let b = blocks;
    while (a < b) {
      const m = (a + b) >> 1;
      if (workIn(rows, lo, Math.min(hi, lo + m * bs)) >= target) b = m;
      else a = m + 1;
    }
    const cut = Math.min(hi, lo + a * bs);
    if (cut > (cuts[cuts.length - 1] as number)) cuts.push(cut);
  }
  if (hi > (cuts[cuts.length - 1] as number)) cuts.push(hi);
  return Int32Array.from(cuts);
}

/**
 * Scores a block of rows (queries in `q`, in `rows` order) against the keys of `chunks` (block-aligned
 * starts; each within one segment of `src`). With scan threads, a scan of at least THREAD_MIN_SCORES
 * scores that the fused kernel runs and whose keys lie in SharedArrayBuffers is cut on block
 * boundaries into slices of about equal work; this thread and the scan threads take them from one
 * shared counter (model/indexer/scan-threads), the threads into heaps of their own, merged here. Slices a
 * thread took but did not report (it failed) are scored here afterwards. The same heaps as one
 * thread, bit for bit.
 */
async function scoreKeys(
  ctx: IndexerContext,
  scorer: IndexScorer,
  src: PackedRowStore,
  chunks: ReadonlyArray<readonly [number, number]>,
  q: ScoreRows,
  rows: readonly BlockRow[],
): Promise<void> {
  if (chunks.length === 0 || rows.length === 0) return;
  const threads = scorer.threads;
  const bs = ctx.config.candidateBlockSize;
  const R = src.rowBytes;
  const lo = (chunks[0] as readonly [number, number])[0];
  let most = 0;
  for (const x of rows) most = Math.max(most, x.clen);
  const hi = Math.min((chunks[chunks.length - 1] as readonly [number, number])[1], most);
  if (hi <= lo) return;
  // each chunk read in place (`src.range` of one chunk is a view of one segment), cut to the keys some row sees
  const pieces = keysIn(
    chunks.map(([c0, c1]) => ({ k0: c0, keys: src.range(c0, c1 - c0) })),
    R,
    lo,
    hi,
  );
  const total = workIn(rows, lo, hi);
  if (
    threads === null ||
    !threads.usable ||
    total < THREAD_MIN_SCORES ||
    !scorer.fusedFor(q.rows) ||
    !pieces.every((p) => p.keys.buffer instanceof SharedArrayBuffer)
  ) {
    await scorePieces(ctx, scorer, R, pieces, q, rows);
    return;
  }
  const n = Math.max(1, Math.min((threads.count + 1) * SLICES_PER_TAKER, Math.floor(total / SLICE_MIN_SCORES)));
  const slices = sliceByWork(rows, lo, hi, bs, n);
  const count = slices.length - 1;
  const counter = new Int32Array(new SharedArrayBuffer(4));
  const { indexNumHeads: hI, indexHeadDim: dI } = ctx.config;
  let topkCap = 0;
  let blocksCap = 0;
  for (const x of rows) {
    topkCap = Math.max(topkCap, x.topk.capacity);
    blocksCap = Math.max(blocksCap, x.blocks?.capacity ?? 0);
  }
  const task: ScanTask = {
    heads: hI,
    dim: dI,
    round: scorer.mode === 'bf16',
    rowBytes: R,
    blockSize: bs,
    budgetValues: ctx.indexerBudgetValues,
    // copies of the rows' queries: a view would post its whole underlying buffer (the batch's queries)
    iq: q.iq.slice(0, q.rows * hI * dI),
    iw: q.iw.slice(0, q.rows * hI),
    rows: q.rows,
    clen: Int32Array.from(rows, (x) => x.clen),
    pieces,
    slices,
    counter,
    topkCap,
    blocksCap,
  };
  const replies = Array.from({ length: threads.count }, (_, i) => threads.run(i, task).catch(() => null));
  threadScanStats.scans++;
  const done = new Uint8Array(count);
  const scoreSlice = async (s: number) => {
    await scorePieces(ctx, scorer, R, keysIn(pieces, R, slices[s] as number, slices[s + 1] as number), q, rows);
    done[s] = 1;
  };
  for (let s = Atomics.add(counter, 0, 1); s < count; s = Atomics.add(counter, 0, 1)) await scoreSlice(s);
  for (const p of replies) {
    const reply = await p;
    if (reply === null || reply.kind !== 'done') continue;
    mergeHeaps(rows, reply);
    for (const s of reply.slices) done[s] = 1;
    threadScanStats.threadSlices += reply.slices.length;
  }
  // slices a failed thread took
  for (let s = 0; s < count; s++) {
    if (done[s] === 0) {
      threadScanStats.takenBack++;
      await scoreSlice(s);
    }
  }
}

/** Scores one span's keys [from, nVis) into its heaps: its rows in blocks, each against the span's scan chunks. */
async function scanSplitKeys(ctx: IndexerContext, scorer: IndexScorer, st: SplitState, from: number): Promise<void> {
  const { indexNumHeads: hI, indexHeadDim: dI } = ctx.config;
  const bs = ctx.config.candidateBlockSize;
  const { job } = st;
  const { rows: S, nVis, clen } = job;
  const split = Math.floor(job.src.indexK.sharedRowCount / bs) * bs;
  const chunks = chunksIn(nVis, ctx.indexerKeyChunk, split, from, nVis);
  const rowsPerBlock = scorer.rowsPerRun();
  // rows see keys below their causal length: those that see none of the keys are left out
  let first = 0;
  while (first < S && (clen[first] as number) <= from) first++;
  for (let r0 = first; r0 < S; r0 += rowsPerBlock) {
    const r1 = Math.min(S, r0 + rowsPerBlock);
    const q = { iq: job.iq.subarray(r0 * hI * dI, r1 * hI * dI), iw: job.iw.subarray(r0 * hI, r1 * hI), rows: r1 - r0 };
    const rows = Array.from({ length: r1 - r0 }, (_, i) => ({ topk: st.topk, blocks: st.blocks, r: r0 + i, clen: clen[r0 + i] as number }));
    await scoreKeys(ctx, scorer, job.src.indexK, chunks, q, rows);
  }
}

function splitResult(st: SplitState): ScanResult {
  const { job, topk, blocks, kb } = st;
  const { rows: S, kk } = job;
  const out = new Int32Array(S * kk).fill(-1);
  for (let r = 0; r < S; r++) {
    const n = topk.size[r] as number;
    const picks = out.subarray(r * kk, r * kk + n);
    picks.set(topk.ids.subarray(r * topk.capacity, r * topk.capacity + n));
    picks.sort();
  }
  let candidates: Int32Array | null = null;
  if (blocks !== null) {
    candidates = new Int32Array(S * kb).fill(-1);
    for (let r = 0; r < S; r++) blocks.rankedIds(r, candidates.subarray(r * kb, (r + 1) * kb));
  }
  return { topk: out, candidates, kb };
}

/**
 * The default scan of one span (model/indexer/indexer-scores): its keys in chunks (as scanChunked's, split
 * where a shared prefix ends), each scored for the span's rows in blocks (usually one) in runs of a
 * few thousand keys, each run's keys unpacked for it; each row's visible scores pushed into bounded
 * heaps (top-k; at the candidate source its blocks). The same lists as the graph scan, bit for bit.
 */
export async function scanSplit(ctx: IndexerContext, scorer: IndexScorer, e: LayerPlanEntry, job: IndexerJob): Promise<ScanResult> {
  const st = splitState(ctx, e, job);
  await scanSplitKeys(ctx, scorer, st, 0);
  return splitResult(st);
}

/**
 * Spans whose index keys begin with one frozen prefix (forks of one document: every question on it)
 * score that prefix together: each run unpacks its keys once and scores the rows of all the spans in
 * one product, each row pushed into its own span's heaps; then every span scores its private keys
 * alone. A row's scores and picks are those of scanSplit (the same per-element products, heaps that
 * rank by score and position whatever the order of the pushes).
 */
export async function scanSplitShared(ctx: IndexerContext, scorer: IndexScorer, e: LayerPlanEntry, jobs: readonly IndexerJob[]): Promise<ScanResult[]> {
  const c = ctx.config;
  const { indexNumHeads: hI, indexHeadDim: dI } = c;
  const bs = c.candidateBlockSize;
  const states = jobs.map((j) => splitState(ctx, e, j));
  const src = (jobs[0] as IndexerJob).src.indexK;
  const split = Math.floor(src.sharedRowCount / bs) * bs;
  for (const j of jobs) {
    if (j.src.indexK.sharedPrefix !== src.sharedPrefix || j.src.indexK.sharedRowCount !== src.sharedRowCount || j.nVis < split) {
      throw new Csa2Error('runtime', 'scanSplitShared: the spans do not all read the same frozen prefix in full');
    }
  }
  // every (span, row) that sees at least one prefix key, stacked
  const rows: BlockRow[] = [];
  const jobOf: IndexerJob[] = []; // rows[i]'s span
  for (const st of states) {
    for (let r = 0; r < st.job.rows; r++) {
      if ((st.job.clen[r] as number) <= 0) continue;
      rows.push({ topk: st.topk, blocks: st.blocks, r, clen: st.job.clen[r] as number });
      jobOf.push(st.job);
    }
  }
  const rowsPerBlock = scorer.rowsPerRun();
  const chunks = chunksIn(split, ctx.indexerKeyChunk, split, 0, split);
  for (let b0 = 0; b0 < rows.length; b0 += rowsPerBlock) {
    const block = rows.slice(b0, b0 + rowsPerBlock);
    const iq = new Float32Array(block.length * hI * dI);
    const iw = new Float32Array(block.length * hI);
    block.forEach((x, i) => {
      const j = jobOf[b0 + i] as IndexerJob;
      iq.set(j.iq.subarray(x.r * hI * dI, (x.r + 1) * hI * dI), i * hI * dI);
      iw.set(j.iw.subarray(x.r * hI, (x.r + 1) * hI), i * hI);
    });
    await scoreKeys(ctx, scorer, src, chunks, { iq, iw, rows: block.length }, block);
  }
  for (const st of states) await scanSplitKeys(ctx, scorer, st, split);
  sharedScanStats.groups++;
  return states.map(splitResult);
}
