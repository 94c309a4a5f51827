/**
 * @module model/indexer/indexer-pool
 * The second level of the hierarchical indexer (csa2 §3.3): layers after the candidate source pick
 * their top-k inside each row's candidate pool (≤ topBlocks × blockSize positions). Only the pool is
 * scored: the keys of the union of a span's candidate blocks are gathered (a decode step: ≤ 16,384 at
 * the released config, whatever the context) and each row is masked to its own blocks; spans share a
 * run while rows × keys stays within the budget (block-diagonal masks). The official code scores every
 * entry and masks (`indexerPool: false`); both give the same list bit for bit, tests compare them:
 * - scores are the same per entry (the graph computes each one alike for any key count ≥ 2);
 * - ties go to the lower position in both (pool columns are in position order);
 * - where a row has fewer allowed entries than it must pick, the scan's top-k goes on into -inf
 *   scores, lowest position first, and keeps those below the row's visible length (entries outside
 *   its pool); `completePicks` reproduces that.
 */
import type { LayerPlanEntry } from '../../config/layer-plan.js';
import { bool, i32, u8 } from '../../runtime/ort-session.js';
import type { TypedGraph } from '../graphs/graph-io.js';
import type { INDEXER_POOL } from '../graphs/signatures.js';
import { queryRows, requireCandidates, type IndexerContext, type IndexerJob } from './indexer-job.js';
import { BoundedHeaps } from './indexer-ranking.js';
import { ABOVE_MIN_KEYS, keyChunks, pushScores } from './indexer-scan-run.js';
import type { IndexScorer } from './indexer-scores.js';
import type { PackedRowStore } from '../sequence/packed-rows.js';

/**
 * Each job's top-k lists, the pools of several jobs scored in one run while their rows × pool keys ×
 * heads stay within the budget (a job too big alone runs in row blocks of its own).
 */
export async function poolTopk(
  ctx: IndexerContext,
  graph: TypedGraph<typeof INDEXER_POOL>,
  e: LayerPlanEntry,
  jobs: readonly IndexerJob[],
): Promise<Int32Array[]> {
  const hI = ctx.config.indexNumHeads;
  const parts = poolParts(ctx, e, jobs);
  const lists = jobs.map((j) => new Int32Array(j.rows * j.kk).fill(-1));
  // runs: consecutive parts while they fit together
  let run: typeof parts = [];
  let rows = 0;
  let keys = 0;
  const flush = async () => {
    if (run.length > 0) await poolRun(ctx, graph, jobs, run, lists);
    run = [];
    rows = 0;
    keys = 0;
  };
  for (const p of parts) {
    const U = p.pool.columns;
    if (U === 0) {
      const job = jobs[p.job] as IndexerJob;
      lists[p.job]?.set(
        completePicks(new Int32Array(0), p.r1 - p.r0, job.kk, Math.min(job.kk, job.nVis), job.clen.subarray(p.r0, p.r1), p.pool),
        p.r0 * job.kk,
      );
      continue;
    }
    if (run.length > 0 && (rows + p.r1 - p.r0) * (keys + U) * hI > ctx.indexerBudgetValues) await flush();
    run.push(p);
    rows += p.r1 - p.r0;
    keys += U;
  }
  await flush();
  return lists;
}

/**
 * The default pool scoring (model/indexer/indexer-scores): per part, its pool's keys gathered and unpacked in
 * runs of a few thousand, scored for the part's rows, each row's allowed columns pushed into a
 * bounded heap; then completePicks as the graph path. The same lists, bit for bit.
 */
export async function poolTopkSplit(ctx: IndexerContext, scorer: IndexScorer, e: LayerPlanEntry, jobs: readonly IndexerJob[]): Promise<Int32Array[]> {
  const c = ctx.config;
  const { indexNumHeads: hI, indexHeadDim: dI } = c;
  const lists = jobs.map((j) => new Int32Array(j.rows * j.kk).fill(-1));
  // one buffer for every part's gathered keys (a fresh 278 KB buffer a row cost page faults: mmap'd and zeroed each time)
  let scratch = new Uint8Array(0);
  // jobs whose every row's pool fits the key cache keep their rows' gathered keys for the next Reindex layers
  // (a decode batch, a replay chunk); a bigger job's rows would only push each other out
  const cache = poolKeyCacheOf(scorer);
  const cacheFor = (job: IndexerJob): PoolKeyCache | null =>
    job.rows * (job.st.shared.kb * c.candidateBlockSize) * job.src.indexK.rowBytes <= cache.maxBytes ? cache : null;
  for (const p of poolParts(ctx, e, jobs)) {
    const job = jobs[p.job] as IndexerJob;
    const S = p.r1 - p.r0;
    const clen = job.clen.subarray(p.r0, p.r1);
    const U = p.pool.columns;
    const kEff = Math.min(job.kk, job.nVis);
    if (U === 0) {
      (lists[p.job] as Int32Array).set(completePicks(new Int32Array(0), S, job.kk, kEff, clen, p.pool), p.r0 * job.kk);
      continue;
    }
    const positions = poolPositions(p.pool);
    // each row's allowed columns as ranges (what writePoolMask marks), visited in column order as the mask was
    const ranges = poolRanges(p.pool, clen);
    const cursor = new Int32Array(S);
    const cap = Math.min(job.kk, U);
    const heaps = new BoundedHeaps(S, cap);
    const rowsPerBlock = scorer.rowsPerRun();
    for (let r0 = 0; r0 < S; r0 += rowsPerBlock) {
      const r1 = Math.min(S, r0 + rowsPerBlock);
      const q0 = p.r0 + r0;
      const q = { iq: job.iq.subarray(q0 * hI * dI, (q0 + r1 - r0) * hI * dI), iw: job.iw.subarray(q0 * hI, (q0 + r1 - r0) * hI), rows: r1 - r0 };
      const chunks = keyChunks(U, scorer.keysPerRun(r1 - r0, 1, ctx.indexerBudgetValues));
      for (const [t0, t1] of chunks) {
        // the whole pool in one run (a row's own pool): its blocks copied as blocks, not position by position
        const whole = chunks.length === 1 && p.pool.size === U;
        const bytes = (t1 - t0) * job.src.indexK.rowBytes;
        if (scratch.length < bytes) scratch = new Uint8Array(bytes);
        const into = scratch.subarray(0, bytes);
        // a cached pool's keys go to a buffer of their own (the cache keeps it), the others to the scratch
        const keyCache = whole ? cacheFor(job) : null;
        let keys = keyCache?.find(job.src.indexK, p.pool) ?? null;
        if (keys === null) {
          keys = whole
            ? job.src.indexK.gatherBlocks(p.pool.blocks, p.pool.blockSize, p.pool.nVis, keyCache === null ? into : new Uint8Array(bytes))
            : job.src.indexK.gather(positions.subarray(t0, t1), into);
          keyCache?.keep(job.src.indexK, p.pool, keys);
        }
        scorer.loadKeys(keys, t1 - t0);
        await scorer.run(q, 0, t1 - t0);
        for (let r = r0; r < r1; r++) {
          const s = scorer.scoreRow(r - r0, t1 - t0);
          const rg = ranges[r] as Int32Array;
          // a row allowed one run of columns from the first (its own blocks, the last one cut at its visible length)
          if (whole && rg.length === 2 && rg[0] === 0 && pushAboveFloor(scorer, r - r0, s, rg[1] as number, r, heaps)) {
            cursor[r] = 2;
            continue;
          }
          let j = cursor[r] as number;
          while (j < rg.length && (rg[j] as number) < t1) {
            const end = rg[j + 1] as number;
            pushScores(s, Math.max(rg[j] as number, t0) - t0, Math.min(end, t1) - t0, t0, r, heaps);
            if (end > t1) break;
            j += 2;
          }
          cursor[r] = j;
        }
      }
    }
    const picks = new Int32Array(S * cap).fill(-1);
    for (let r = 0; r < S; r++) {
      const n = heaps.size[r] as number;
      for (let j = 0; j < n; j++) picks[r * cap + j] = positions[heaps.ids[r * cap + j] as number] as number;
    }
    (lists[p.job] as Int32Array).set(completePicks(picks, S, job.kk, kEff, clen, p.pool), p.r0 * job.kk);
  }
  return lists;
}

/**
 * Bytes of gathered pool keys kept for reuse (per scorer, i.e. per model) within one forward call: the
 * Reindex layers of a step or a replay chunk read the same index-K source through the same candidate
 * blocks (the candidate source's picks), so a row's pool keys gathered by the first Reindex layer serve
 * the next ones. The gather is a copy of 2,048 blocks from random places of the document (~0.13–0.25 µs
 * a block here: memory latency), ~0.3–0.5 ms a 1M-token row. 32 MiB holds a decoder-replay chunk's rows
 * at 1M tokens (a chunk of 43 rows at the bench's tiny width, 278 KB a row: 12 MB; 16 rows at the
 * released width, 1.1 MB a row: 18 MB); a 1M* question's Reindex layers then gather 128 rows once instead
 * of four times (bench/README, "Pool keys across a replay's Reindex layers"). The cache is emptied after
 * every forward call (Csa2Model.forward): its keys are of that call's rows and visible length, which the
 * next call does not share, so it holds memory only while a forward runs.
 */
export const POOL_KEY_CACHE_BYTES = 32 * 1024 * 1024;

/** Pool key cache hits and misses so far (tests check that reuse happens, and only where it is the same pool). */
export const poolKeyCacheStats = { hits: 0, misses: 0 };

interface CachedPoolKeys {
  /** The store's serial (storeSerial), not the store: an entry must not keep a finished question's document alive. */
  readonly store: number;
  readonly generation: number;
  readonly nVis: number;
  readonly blockSize: number;
  readonly blocks: Int32Array;
  readonly hash: number;
  readonly keys: Uint8Array;
}

/**
 * Copies of whole-pool key gathers, looked up by what determines their bytes: the store, its generation,
 * the visible entries and the blocks (compared whole). Oldest dropped first beyond POOL_KEY_CACHE_BYTES.
 */
export class PoolKeyCache {
  private entries: CachedPoolKeys[] = [];
  private bytes = 0;

  constructor(readonly maxBytes = POOL_KEY_CACHE_BYTES) {}

  find(store: PackedRowStore, pool: PoolBlocks): Uint8Array | null {
    const hash = blocksHash(pool.blocks);
    const serial = storeSerial(store);
    for (const e of this.entries) {
      if (
        e.store === serial &&
        e.generation === store.generation &&
        e.nVis === pool.nVis &&
        e.blockSize === pool.blockSize &&
        e.hash === hash &&
        sameBlocks(e.blocks, pool.blocks)
      ) {
        poolKeyCacheStats.hits++;
        return e.keys;
      }
    }
    poolKeyCacheStats.misses++;
    return null;
  }

  keep(store: PackedRowStore, pool: PoolBlocks, keys: Uint8Array): void {
    if (keys.length > this.maxBytes) return;
    // the caller hands over `keys` (a buffer of its own that it no longer writes)
    while (this.entries.length > 0 && this.bytes + keys.length > this.maxBytes) this.bytes -= (this.entries.shift() as CachedPoolKeys).keys.length;
    this.entries.push({
      store: storeSerial(store),
      generation: store.generation,
      nVis: pool.nVis,
      blockSize: pool.blockSize,
      blocks: pool.blocks.slice(),
      hash: blocksHash(pool.blocks),
      keys,
    });
    this.bytes += keys.length;
  }

  get heldBytes(): number {
    return this.bytes;
  }

  /** Drops every entry (after a forward call: see POOL_KEY_CACHE_BYTES). */
  clear(): void {
    this.entries = [];
    this.bytes = 0;
  }
}

const poolKeyCaches = new WeakMap<IndexScorer, PoolKeyCache>();

const storeSerials = new WeakMap<PackedRowStore, number>();
let nextStoreSerial = 1;

/** A number for each store, never reused (held weakly: the cache holds numbers, not stores). */
function storeSerial(store: PackedRowStore): number {
  let n = storeSerials.get(store);
  if (n === undefined) {
    n = nextStoreSerial++;
    storeSerials.set(store, n);
  }
  return n;
}

/** The pool key cache of a scorer (one per model: every layer shares the model's scorer). */
export function poolKeyCacheOf(scorer: IndexScorer): PoolKeyCache {
  let c = poolKeyCaches.get(scorer);
  if (c === undefined) {
    c = new PoolKeyCache();
    poolKeyCaches.set(scorer, c);
  }
  return c;
}

function blocksHash(blocks: Int32Array): number {
  let h = blocks.length | 0;
  for (let i = 0; i < blocks.length; i++) h = Math.imul(h ^ (blocks[i] as number), 0x9e3779b1) | 0;
  return h;
}

function sameBlocks(a: Int32Array, b: Int32Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Rows whose pool scores went through pushAboveFloor's filter (tests check that it ran). */
export const poolPushStats = { filtered: 0 };

/** pushAboveFloor's keys, scores and selection scratch, grown as needed. */
let floorIds = new Int32Array(0);
let floorValues = new Float32Array(0);
let floorScratch = new Float32Array(0);

/**
 * Fills row `row`'s (empty) heap from its scores s[0, count) (every key allowed, none after them) as
 * pushScores over all of them would, from the keys scoring at least a floor that cap keys are known to
 * reach: the least of the maxima of cap disjoint groups of keys (each group holds a key ≥ it, so the
 * cap-th best is too, and no key below it can be among the cap best). The heap's set, the cap best by
 * (score desc, position asc), does not depend on the order of pushes, so ranking only those keys
 * (BoundedHeaps.assign: one selection) gives the same set. The group maxima and the keys ≥ the floor
 * come from the scorer's WebAssembly (a 1M-token pool: 16,384 scores, ~3.6K at or above the floor of
 * 512 groups of 32 on the bench's random documents). False, nothing pushed, where it does not apply
 * (no fused scores, too few keys, or a group with no finite score).
 */

function pushAboveFloor(scorer: IndexScorer, runRow: number, s: Float32Array, count: number, row: number, heaps: BoundedHeaps): boolean {
  const cap = heaps.capacity;
  if (cap === 0 || count < ABOVE_MIN_KEYS || (heaps.size[row] as number) !== 0) return false;
  const g = Math.floor(count / cap / 4) * 4;
  if (g < 4) return false;
  const maxima = scorer.blockMax(runRow, cap, g);
  if (maxima === null) return false;
  let floor = Infinity;
  for (let i = 0; i < cap; i++) {
    const m = maxima[i] as number;
    if (m < floor) floor = m;
  }
  if (!(floor > -Infinity)) return false;
  const keys = scorer.above(runRow, 0, count, floor);
  if (keys === null) return false;
  // the keys at or above the floor (ascending) with their scores, then the heap by selection
  if (floorIds.length < keys.length) {
    floorIds = new Int32Array(keys.length);
    floorValues = new Float32Array(keys.length);
    floorScratch = new Float32Array(keys.length);
  }
  let m = 0;
  for (let n = 0; n < keys.length; n++) {
    const k = keys[n] as number;
    if (k >= count) break;
    floorIds[m] = k;
    floorValues[m++] = s[k] as number;
  }
  heaps.assign(row, floorValues, floorIds, m, floorScratch);
  poolPushStats.filtered++;
  return true;
}

/** Pool parts made so far (tests assert which kind ran): union parts, and rows scored alone over their own blocks. */
export const poolPartStats = { unionParts: 0, ownRowParts: 0 };

/**
 * Rows whose union pool would be scored at more than this many times what their own blocks hold are
 * scored one by one, each over its own blocks (poolParts).
 */
export const OWN_POOL_FACTOR = 2;

/**
 * Per row, its allowed columns of the pool as ascending [start, end) pairs (adjacent ones joined): the
 * row's blocks, cut at its visible length (writePoolMask marks them in a mask). A block's first column
 * is the union's columns before it: the row's blocks are a sorted subset of the union's.
 */
/** Positions of candidate block b (the last one cut at the nVis visible entries). */
const blockWidth = (b: number, bs: number, nVis: number): number => Math.min(nVis, (b + 1) * bs) - b * bs;

export function poolRanges(pool: PoolBlocks, clen: Int32Array): Int32Array[] {
  const { blocks, blockSize: bs, nVis } = pool;
  return pool.rowBlocks.map((own, r) => {
    const visible = clen[r] as number;
    const out = new Int32Array(2 * own.length);
    let n = 0;
    let u = 0;
    let col = 0;
    for (const b of own) {
      while ((blocks[u] as number) < b) {
        col += blockWidth(blocks[u] as number, bs, nVis);
        u++;
      }
      const first = b * bs;
      const end = Math.min(nVis, visible, (b + 1) * bs);
      if (end <= first) continue;
      if (n > 0 && out[n - 1] === col) out[n - 1] = col + end - first;
      else {
        out[n++] = col;
        out[n++] = col + end - first;
      }
    }
    return out.subarray(0, n);
  });
}

/**
 * Per job, row blocks whose pools fit the budget (a decode row: one block); only the blocks: positions
 * and masks are made when a part is scored. A part scores rows × union columns, so rows that share few
 * blocks are scored one by one over their own blocks instead (OWN_POOL_FACTOR): rows of a 1M document
 * each pick 2,048 of 130K blocks, and 8 rows' union was 80–120K positions against 16K a row in the
 * documents-scale suite. Either way every (row, position) score is the same (the scorer computes each
 * alike whatever the run's rows and keys), ties go by position and completePicks reads only the row's
 * own blocks: the same lists bit for bit.
 */
function poolParts(ctx: IndexerContext, e: LayerPlanEntry, jobs: readonly IndexerJob[]): Array<{ job: number; r0: number; r1: number; pool: PoolBlocks }> {
  const hI = ctx.config.indexNumHeads;
  const bs = ctx.config.candidateBlockSize;
  const parts: Array<{ job: number; r0: number; r1: number; pool: PoolBlocks }> = [];
  jobs.forEach((job, ji) => {
    const cand = requireCandidates(job.st.shared.candidates, e);
    const kb = job.st.shared.kb;
    const nVis = job.nVis;
    // each row's blocks once; a row block's union counted with stamps, not sorted, until it fits
    const { own, ownSize } = rowBlocksCached(cand, job.rows, kb, nVis, bs);
    // made on the first union of several rows (a decode row's pool is its own blocks: no 0.5 MB array a layer at 1M)
    let stamp: Int32Array | null = null;
    let stampId = 0;
    // the union of rows [r0, r1)'s blocks, or null as soon as its size times the rows passes `over` (the
    // rows are then scored one by one whatever the rest adds: a replay's 160 rows of a 1M document share
    // few blocks, and their whole union was 327K pushes a layer to find that out)
    const union = (r0: number, r1: number, over: number): { blocks: ArrayLike<number>; size: number } | null => {
      if (r1 - r0 === 1) return { blocks: own[r0] as Int32Array, size: ownSize[r0] as number };
      stamp ??= new Int32Array(Math.ceil(nVis / bs) + 1).fill(-1);
      const id = stampId++;
      const out: number[] = [];
      let size = 0;
      for (let r = r0; r < r1; r++) {
        for (const b of own[r] as Int32Array) {
          if (stamp[b] === id) continue;
          stamp[b] = id;
          out.push(b);
          size += blockWidth(b, bs, nVis);
        }
        if ((r1 - r0) * size > over) return null;
      }
      return { blocks: out, size };
    };
    const ranges: Array<[number, number]> = [[0, job.rows]];
    while (ranges.length > 0) {
      const [r0, r1] = ranges.pop() as [number, number];
      let ownSum = 0;
      for (let r = r0; r < r1; r++) ownSum += ownSize[r] as number;
      // rows × columns > OWN_POOL_FACTOR × ownSum decides; columns ≥ size, so a size past it decides early (null)
      const u = union(r0, r1, OWN_POOL_FACTOR * ownSum);
      const columns = u === null ? 0 : u.size === 1 ? 2 : u.size;
      if (u === null || (r1 - r0 > 1 && (r1 - r0) * columns > OWN_POOL_FACTOR * ownSum)) {
        for (let r = r0; r < r1; r++) {
          const size = ownSize[r] as number;
          parts.push({
            job: ji,
            r0: r,
            r1: r + 1,
            pool: { blocks: own[r] as Int32Array, rowBlocks: [own[r] as Int32Array], size, columns: size === 1 ? 2 : size, nVis, blockSize: bs },
          });
        }
        poolPartStats.ownRowParts += r1 - r0;
        continue;
      }
      if (r1 - r0 > 1 && (r1 - r0) * columns * hI > ctx.indexerBudgetValues) {
        const mid = (r0 + r1) >> 1;
        ranges.push([mid, r1], [r0, mid]);
        continue;
      }
      // a single row's blocks are sorted already (rowBlocksOf)
      const pool: PoolBlocks = {
        blocks: r1 - r0 === 1 ? (own[r0] as Int32Array) : Int32Array.from(u.blocks).sort(),
        rowBlocks: own.slice(r0, r1),
        size: u.size,
        columns,
        nVis,
        blockSize: bs,
      };
      parts.push({ job: ji, r0, r1, pool });
      poolPartStats.unionParts++;
    }
  });
  return parts;
}

/** One run over several parts: their pools' keys one after another, block-diagonal masks. */
async function poolRun(
  ctx: IndexerContext,
  graph: TypedGraph<typeof INDEXER_POOL>,
  jobs: readonly IndexerJob[],
  run: ReadonlyArray<{ job: number; r0: number; r1: number; pool: PoolBlocks }>,
  lists: Int32Array[],
): Promise<void> {
  const c = ctx.config;
  const { indexNumHeads: hI, indexHeadDim: dI } = c;
  const R = run.reduce((s, p) => s + (p.r1 - p.r0), 0);
  const U = run.reduce((s, p) => s + p.pool.columns, 0);
  const rowBytes = (jobs[(run[0] as (typeof run)[number]).job] as IndexerJob).src.indexK.rowBytes;
  const K = new Uint8Array(U * rowBytes);
  const allow = new Uint8Array(R * U);
  const iq = new Float32Array(R * hI * dI);
  const iw = new Float32Array(R * hI);
  const positions: Int32Array[] = [];
  let row = 0;
  let col = 0;
  for (const p of run) {
    const job = jobs[p.job] as IndexerJob;
    const pos = poolPositions(p.pool);
    positions.push(pos);
    job.src.indexK.gather(pos, K, col);
    const q = queryRows(c, job, p.r0, p.r1);
    iq.set(q.iq.data, row * hI * dI);
    iw.set(q.iw.data, row * hI);
    writePoolMask(p.pool, job.clen.subarray(p.r0, p.r1), allow, row, U, col);
    row += p.r1 - p.r0;
    col += pos.length;
  }
  const kk = Math.max(...run.map((p) => (jobs[p.job] as IndexerJob).kk));
  const out = await graph.run({
    iq: { type: 'float32', data: iq, dims: [R, hI, dI] },
    iw: { type: 'float32', data: iw, dims: [R, hI] },
    K: u8(K, [U, rowBytes]),
    allow: bool(allow, [R, U]),
    kk: i32(Int32Array.of(kk), [1]),
  });
  const k = out.pick.dims[1] as number;
  row = 0;
  col = 0;
  run.forEach((p, pi) => {
    const job = jobs[p.job] as IndexerJob;
    const pos = positions[pi] as Int32Array;
    const S = p.r1 - p.r0;
    const picks = new Int32Array(S * k).fill(-1);
    for (let r = 0; r < S; r++) {
      for (let j = 0; j < k; j++) {
        const at = (row + r) * k + j;
        const u = (out.pick.data[at] as number) - col;
        if (out.finite.data[at] === 1 && u >= 0 && u < pos.length) picks[r * k + j] = pos[u] as number;
      }
    }
    lists[p.job]?.set(completePicks(picks, S, job.kk, Math.min(job.kk, job.nVis), job.clen.subarray(p.r0, p.r1), p.pool), p.r0 * job.kk);
    row += S;
    col += pos.length;
  });
}

/**
 * Candidate blocks [rows, kb] (-1 = none) → the mask [r1 - r0, width] of rows [r0, r1) over positions
 * [k0, k1) (column 0 = position k0; columns from k1 - k0 to width stay 0): 1 where a row's blocks cover
 * the position.
 */
export function candidateMask(
  cand: Int32Array,
  kb: number,
  blockSize: number,
  [r0, r1]: readonly [number, number],
  [k0, k1]: readonly [number, number],
  width = k1 - k0,
): Uint8Array {
  const mask = new Uint8Array((r1 - r0) * width);
  for (let r = r0; r < r1; r++) {
    for (let j = 0; j < kb; j++) {
      const b = cand[r * kb + j] as number;
      if (b < 0) continue;
      const from = Math.max(k0, b * blockSize);
      const to = Math.min(k1, (b + 1) * blockSize);
      if (from < to) mask.fill(1, (r - r0) * width + from - k0, (r - r0) * width + to - k0);
    }
  }
  return mask;
}

/** The union of a span's candidate blocks and each row's own: what its pool is, before any per-position array. */
export interface PoolBlocks {
  /** The union's blocks, ascending. */
  readonly blocks: Int32Array;
  /** Per row, its candidate blocks as a sorted list (for the mask and completePicks). */
  readonly rowBlocks: readonly Int32Array[];
  /** Positions the union covers (its blocks, the last one cut at the visible entries). */
  readonly size: number;
  /** Columns of the pool: `size`, or 2 for a single position (graph-io: one key column takes another code path). */
  readonly columns: number;
  readonly nVis: number;
  readonly blockSize: number;
}

/**
 * Each row's sorted blocks and their sizes, kept per published candidate array: the Reindex layers of a
 * step read the same one (a 1M-token row sorts 2,048 blocks; once a step, not four times). Candidate
 * arrays are new for every candidate-source run and never written after they are published.
 */
const rowBlocksByCandidates = new WeakMap<Int32Array, { rows: number; kb: number; nVis: number; bs: number; own: Int32Array[]; ownSize: number[] }>();

function rowBlocksCached(cand: Int32Array, rows: number, kb: number, nVis: number, bs: number): { own: Int32Array[]; ownSize: number[] } {
  const hit = rowBlocksByCandidates.get(cand);
  if (hit !== undefined && hit.rows === rows && hit.kb === kb && hit.nVis === nVis && hit.bs === bs) return hit;
  const own = rowBlocksOf(cand, rows, kb, nVis, bs);
  const ownSize = own.map((bl) => {
    let size = 0;
    for (const b of bl) size += blockWidth(b, bs, nVis);
    return size;
  });
  const entry = { rows, kb, nVis, bs, own, ownSize };
  rowBlocksByCandidates.set(cand, entry);
  return entry;
}

/** The union of a span's candidate pools and what each row may pick from it. */
export interface CandidatePool extends PoolBlocks {
  /** Positions of the union's blocks, ascending; padded to `columns` (a second, never-allowed column). */
  readonly positions: Int32Array;
  /** [S, columns] 1 where the position is in the row's blocks and visible to it. */
  readonly allow: Uint8Array;
}

/** Per row, its candidate blocks that hold visible entries, ascending. */
export function rowBlocksOf(cand: Int32Array, S: number, kb: number, nVis: number, blockSize: number): Int32Array[] {
  const rowBlocks: Int32Array[] = [];
  for (let r = 0; r < S; r++) {
    const row = new Int32Array(kb);
    let m = 0;
    for (let j = 0; j < kb; j++) {
      const b = cand[r * kb + j] as number;
      if (b >= 0 && b * blockSize < nVis) row[m++] = b;
    }
    rowBlocks.push(row.subarray(0, m).sort());
  }
  return rowBlocks;
}

export function poolBlocks(cand: Int32Array, S: number, kb: number, nVis: number, blockSize: number): PoolBlocks {
  const rowBlocks = rowBlocksOf(cand, S, kb, nVis, blockSize);
  const all = new Int32Array(rowBlocks.reduce((a, r) => a + r.length, 0));
  let n = 0;
  for (const row of rowBlocks) {
    all.set(row, n);
    n += row.length;
  }
  const sorted = all.sort();
  let u = 0;
  for (let i = 0; i < n; i++) if (u === 0 || sorted[i] !== sorted[u - 1]) sorted[u++] = sorted[i] as number;
  const blocks = sorted.slice(0, u);
  let size = 0;
  for (const b of blocks) size += Math.min(nVis, (b + 1) * blockSize) - b * blockSize;
  return { blocks, rowBlocks, size, columns: size === 1 ? 2 : size, nVis, blockSize };
}

/** The pool's positions, ascending, padded to its columns. */
export function poolPositions(pool: PoolBlocks): Int32Array {
  const pos = new Int32Array(pool.columns);
  let u = 0;
  for (const b of pool.blocks) {
    const end = Math.min(pool.nVis, (b + 1) * pool.blockSize);
    for (let p = b * pool.blockSize; p < end; p++) pos[u++] = p;
  }
  if (pool.size === 1) pos[1] = pos[0] as number;
  return pos;
}

/**
 * Writes the rows' masks over the pool's columns into `out` (row r at out[(row0 + r) · stride + col0]):
 * 1 where the position is in the row's blocks and visible to it (the padding column stays 0).
 */
export function writePoolMask(pool: PoolBlocks, clen: Int32Array, out: Uint8Array, row0: number, stride: number, col0: number): void {
  poolRanges(pool, clen).forEach((rg, r) => {
    const at = (row0 + r) * stride + col0;
    for (let j = 0; j < rg.length; j += 2) out.fill(1, at + (rg[j] as number), at + (rg[j + 1] as number));
  });
}

export function candidatePool(cand: Int32Array, S: number, kb: number, nVis: number, blockSize: number, clen: Int32Array): CandidatePool {
  const pool = poolBlocks(cand, S, kb, nVis, blockSize);
  const allow = new Uint8Array(S * pool.columns);
  writePoolMask(pool, clen, allow, 0, pool.columns, 0);
  return { ...pool, positions: poolPositions(pool), allow };
}

/**
 * The rows' final top-k lists [S, kk], as the official scan gives them: the finite picks, then (while
 * fewer than kEff = min(kk, visible entries)) the lowest positions outside the row's allowed set, which
 * stay picks when below the row's visible length; ascending; -1 for unreachable picks and padding.
 */
export function completePicks(
  picks: Int32Array,
  S: number,
  kk: number,
  kEff: number,
  clen: Int32Array,
  pool: Pick<PoolBlocks, 'rowBlocks' | 'blockSize'>,
): Int32Array {
  const out = new Int32Array(S * kk).fill(-1);
  const kp = S === 0 ? 0 : picks.length / S;
  const bs = pool.blockSize;
  for (let r = 0; r < S; r++) {
    const chosen: number[] = [];
    for (let j = 0; j < kp; j++) {
      const p = picks[r * kp + j] as number;
      if (p >= 0) chosen.push(p);
    }
    const visible = clen[r] as number;
    const blocks = pool.rowBlocks[r] as Int32Array;
    const allowed = (p: number) => p < visible && binaryHas(blocks, Math.floor(p / bs));
    for (let p = 0; chosen.length < kEff; p++) if (!allowed(p)) chosen.push(p);
    chosen.sort((a, b) => a - b);
    for (let j = 0; j < chosen.length; j++) {
      const p = chosen[j] as number;
      out[r * kk + j] = p < visible ? p : -1;
    }
  }
  return out;
}

/** The first position in ascending `sorted` whose value is not below `x` (sorted.length if none). */
export function lowerBound(sorted: Int32Array, x: number): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if ((sorted[mid] as number) < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function binaryHas(sorted: Int32Array, x: number): boolean {
  const i = lowerBound(sorted, x);
  return i < sorted.length && sorted[i] === x;
}
