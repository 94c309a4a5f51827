/**
 * @module model/indexer
 * The indexer of an index-source layer for one span (csa2 §3.2–3.3): which compressed entries each row
 * attends to. It reads the index keys published last (`seq.indexKSlot`), and publishes its top-k list
 * (and, at the candidate source, the candidate blocks) in the span's shared slots for the Reuse layers.
 *
 * Hierarchical indexer. Layers after the candidate source pick their top-k inside each row's candidate
 * pool (≤ topBlocks × blockSize positions). By default they score only the pool: the keys of the union
 * of the span's candidate blocks are gathered (a decode step: ≤ 16,384 at the released config, whatever
 * the context) and each row is masked to its own blocks. The official code scores every entry and masks;
 * both give the same list bit for bit (`indexerPool: false` keeps that path, tests compare them):
 * - scores are the same per entry (the graph computes each one alike for any key count ≥ 2);
 * - ties go to the lower position in both (pool columns are in position order);
 * - where a row has fewer allowed entries than it must pick, the scan's top-k goes on into -inf
 *   scores, lowest position first, and keeps those below the row's visible length (entries outside
 *   its pool); `completePicks` reproduces that.
 */
import { Csa2Error } from '../errors.js';
import type { ModelConfig } from '../config/model-config.js';
import type { LayerPlanEntry } from '../config/layer-plan.js';
import { bool, i32, i64, u8, type TensorOf } from '../runtime/ort-session.js';
import type { LayerIndexer, ModelGraphs } from './model-graphs.js';
import type { ForwardObserver, SpanState } from './span.js';

export interface IndexerContext {
  readonly config: ModelConfig;
  readonly graphs: ModelGraphs;
  readonly observer: ForwardObserver | null;
  /**
   * Index keys per scan run (a multiple of the candidate block size): a scan unpacks and scores its
   * keys chunk by chunk and merges the chunks' rankings, so its memory does not grow with the context.
   */
  readonly indexerKeyChunk: number;
  /**
   * Upper bound on the scores one graph run holds (rows × index heads × keys); a span with more runs in
   * row blocks (each row's list does not depend on the others).
   */
  readonly indexerBudgetValues: number;
}

/** Runs one span's indexer for rows [p0, p1); iq [S, hI, dI] and iw [S, hI] are the span's rows of attnIn. */
export async function runIndexer(ctx: IndexerContext, indexer: LayerIndexer, e: LayerPlanEntry, st: SpanState, iq: Float32Array, iw: Float32Array): Promise<void> {
  const c = ctx.config;
  const { seq, layout, p0, p1 } = st.span;
  const shared = st.shared;
  const m = e.compressRatio;
  const S = st.rows;
  const callEnd = layout.kind === 'step' ? p0 + 1 : layout.end;
  const kk = Math.min(c.indexTopK, Math.floor(callEnd / m));
  shared.kk = kk;
  if (kk === 0) {
    shared.topk = new Int32Array(0);
    return;
  }
  if (seq.indexKSlot === null) throw new Csa2Error('runtime', `layer ${e.layer}: no index keys were published`);
  const src = seq.cache(seq.indexKSlot);
  const nVis = Math.floor(p1 / m);
  if (src.entries < nVis) throw new Csa2Error('runtime', `layer ${e.layer}: index keys of layer ${src.layer} cover ${src.entries} entries, ${nVis} needed`);
  const clen = Int32Array.from({ length: S }, (_, r) => Math.floor((p0 + r + 1) / m));
  const { indexNumHeads: hI, indexHeadDim: dI } = c;
  const rowBytes = src.indexK.rowBytes;
  const bs = c.candidateBlockSize;
  const kkT = i32(Int32Array.of(kk), [1]);
  const rowsOf = (r0: number, r1: number) => ({
    iq: { type: 'float32' as const, data: iq.subarray(r0 * hI * dI, r1 * hI * dI), dims: [r1 - r0, hI, dI] },
    iw: { type: 'float32' as const, data: iw.subarray(r0 * hI, r1 * hI), dims: [r1 - r0, hI] },
  });

  if (indexer.kind === 'scan') {
    const mask = indexer.maskedToCandidates ? candidateMask(requireCandidates(shared.candidates, e), S, shared.kb, nVis, bs) : null;
    const kEff = Math.min(kk, nVis);
    const ranks = new ChunkRanks(S);
    const blockRanks = e.isCandidateSource ? new ChunkRanks(S) : null;
    for (const [k0, k1] of keyChunks(nVis, ctx.indexerKeyChunk)) {
      const N = k1 - k0;
      const { K } = await ctx.graphs.unpackIndexK.run({ packed: u8(src.indexK.range(k0, N), [N, rowBytes]) });
      const step = Math.max(1, Math.floor(ctx.indexerBudgetValues / Math.max(1, hI * N)));
      for (let r0 = 0; r0 < S; r0 += step) {
        const r1 = Math.min(S, r0 + step);
        let candIn;
        if (mask !== null) {
          const part = new Uint8Array((r1 - r0) * N);
          for (let r = r0; r < r1; r++) part.set(mask.subarray(r * nVis + k0, r * nVis + k1), (r - r0) * N);
          candIn = bool(part, [r1 - r0, N]);
        }
        const out = await indexer.graph.run({
          ...rowsOf(r0, r1),
          K,
          base: i64(BigInt64Array.of(BigInt(k0)), [1]),
          clen: i32(clen.subarray(r0, r1), [r1 - r0, 1]),
          kk: kkT,
          ...(candIn !== undefined ? { cand_in: candIn } : {}),
        });
        ranks.add(r0, out.topv, out.topi);
        if (blockRanks !== null) {
          if (out.blockv === undefined || out.blocki === undefined) throw new Csa2Error('runtime', `layer ${e.layer}: the candidate source published no candidate blocks`);
          blockRanks.add(r0, out.blockv, out.blocki);
        }
      }
    }
    shared.topk = topkFromRanks(ranks, S, kk, kEff, clen);
    if (blockRanks !== null) {
      shared.kb = Math.min(c.candidateTopKBlocks, Math.ceil(nVis / bs));
      shared.candidates = blocksFromRanks(blockRanks, S, shared.kb);
      ctx.observer?.candidates?.(e.layer, p0, S, nVis, candidateMask(shared.candidates, S, shared.kb, nVis, bs));
    }
  } else {
    const cand = requireCandidates(shared.candidates, e);
    const topk = new Int32Array(S * kk);
    // row blocks whose pool masks stay within the budget (a decode step: one row, ≤ topBlocks × blockSize keys)
    const blocks: Array<[number, number]> = [[0, S]];
    while (blocks.length > 0) {
      const [r0, r1] = blocks.pop() as [number, number];
      const pool = candidatePool(cand.subarray(r0 * shared.kb, r1 * shared.kb), r1 - r0, shared.kb, nVis, bs, clen.subarray(r0, r1));
      const U = pool.positions.length;
      if (r1 - r0 > 1 && (r1 - r0) * U * hI > ctx.indexerBudgetValues) {
        const mid = (r0 + r1) >> 1;
        blocks.push([mid, r1], [r0, mid]);
        continue;
      }
      let picks: Int32Array = new Int32Array(0);
      if (U > 0) {
        const out = await indexer.graph.run({ ...rowsOf(r0, r1), K: u8(src.indexK.gather(pool.positions), [U, rowBytes]), allow: bool(pool.allow, [r1 - r0, U]), kk: kkT });
        picks = poolPicks(out.pick.data, out.finite.data, pool.positions);
      }
      topk.set(completePicks(picks, r1 - r0, kk, Math.min(kk, nVis), clen.subarray(r0, r1), pool), r0 * kk);
    }
    shared.topk = topk;
  }
  ctx.observer?.topk?.(e.layer, p0, S, kk, shared.topk);
}

/**
 * Chunks [k0, k1) of `n` keys, `chunk` keys each (a multiple of the candidate block size), the last
 * one taking a single leftover key (a one-column product takes another code path in onnxruntime,
 * whose sums differ in the last bit).
 */
export function keyChunks(n: number, chunk: number): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  for (let k0 = 0; k0 < n; k0 += chunk) out.push([k0, Math.min(n, k0 + chunk)]);
  const last = out[out.length - 1];
  if (out.length > 1 && last !== undefined && last[1] - last[0] === 1) {
    out.pop();
    (out[out.length - 1] as [number, number])[1] = n;
  }
  return out;
}

/** Per row, the (score, position) pairs the chunks ranked, to be merged. */
class ChunkRanks {
  readonly values: number[][];
  readonly ids: number[][];
  constructor(rows: number) {
    this.values = Array.from({ length: rows }, () => []);
    this.ids = Array.from({ length: rows }, () => []);
  }
  add(r0: number, v: TensorOf<'float32'>, i: TensorOf<'int32'>): void {
    const k = v.dims[1] as number;
    const rows = v.dims[0] as number;
    for (let r = 0; r < rows; r++) {
      const vs = this.values[r0 + r] as number[];
      const is = this.ids[r0 + r] as number[];
      for (let j = 0; j < k; j++) {
        vs.push(v.data[r * k + j] as number);
        is.push(i.data[r * k + j] as number);
      }
    }
  }
  /** Row r's pairs ranked as one TopK over all keys would rank them: by score, ties to the lower id. */
  ranked(r: number): number[] {
    const vs = this.values[r] as number[];
    const is = this.ids[r] as number[];
    const order = vs.map((_, j) => j);
    order.sort((a, b) => (vs[b] as number) - (vs[a] as number) || (is[a] as number) - (is[b] as number));
    return order;
  }
}

/** The merged top-kEff per row → ascending positions, unreachable ones (≥ clen) -1, padded to kk. */
function topkFromRanks(ranks: ChunkRanks, S: number, kk: number, kEff: number, clen: Int32Array): Int32Array {
  const out = new Int32Array(S * kk).fill(-1);
  for (let r = 0; r < S; r++) {
    const ids = ranks.ids[r] as number[];
    const picks = ranks.ranked(r).slice(0, kEff).map((j) => ids[j] as number);
    picks.sort((a, b) => a - b);
    const visible = clen[r] as number;
    picks.forEach((p, j) => (out[r * kk + j] = p < visible ? p : -1));
  }
  return out;
}

/** The merged best kb candidate blocks per row; blocks whose maximum is -inf (nothing reachable) → -1. */
function blocksFromRanks(ranks: ChunkRanks, S: number, kb: number): Int32Array {
  const out = new Int32Array(S * kb).fill(-1);
  for (let r = 0; r < S; r++) {
    const vs = ranks.values[r] as number[];
    const ids = ranks.ids[r] as number[];
    ranks
      .ranked(r)
      .slice(0, kb)
      .forEach((j, k) => {
        if ((vs[j] as number) > -Infinity) out[r * kb + k] = ids[j] as number;
      });
  }
  return out;
}

function requireCandidates(cand: Int32Array | null, e: LayerPlanEntry): Int32Array {
  if (cand === null) throw new Csa2Error('runtime', `layer ${e.layer}: no candidate blocks were published`);
  return cand;
}

/** Candidate blocks [S, kb] (-1 = none) → the mask [S, width] of the positions they cover. */
export function candidateMask(cand: Int32Array, S: number, kb: number, width: number, blockSize: number): Uint8Array {
  const mask = new Uint8Array(S * width);
  for (let r = 0; r < S; r++) {
    for (let j = 0; j < kb; j++) {
      const b = cand[r * kb + j] as number;
      if (b < 0) continue;
      const end = Math.min(width, (b + 1) * blockSize);
      for (let p = b * blockSize; p < end; p++) mask[r * width + p] = 1;
    }
  }
  return mask;
}

/** The union of a span's candidate pools and what each row may pick from it. */
export interface CandidatePool {
  /** Positions of the union's blocks, ascending; padded to ≥ 2 columns (graph-io: one key column takes another code path). */
  readonly positions: Int32Array;
  /** [S, positions] 1 where the position is in the row's blocks and visible to it. */
  readonly allow: Uint8Array;
  /** Per row, its candidate blocks as a sorted list (for completePicks). */
  readonly rowBlocks: readonly Int32Array[];
  readonly blockSize: number;
}

export function candidatePool(cand: Int32Array, S: number, kb: number, nVis: number, blockSize: number, clen: Int32Array): CandidatePool {
  const rowBlocks: Int32Array[] = [];
  const all = new Set<number>();
  for (let r = 0; r < S; r++) {
    const row: number[] = [];
    for (let j = 0; j < kb; j++) {
      const b = cand[r * kb + j] as number;
      if (b >= 0 && b * blockSize < nVis) {
        row.push(b);
        all.add(b);
      }
    }
    rowBlocks.push(Int32Array.from(row).sort());
  }
  const blocks = Int32Array.from(all).sort();
  const pos: number[] = [];
  const blockOf: number[] = []; // union-block index of each position
  blocks.forEach((b, i) => {
    const end = Math.min(nVis, (b + 1) * blockSize);
    for (let p = b * blockSize; p < end; p++) {
      pos.push(p);
      blockOf.push(i);
    }
  });
  const real = pos.length;
  if (real === 1) pos.push(pos[0] as number); // a second, never-allowed column (see `positions`)
  const U = pos.length;
  const allow = new Uint8Array(S * U);
  const inRow = new Uint8Array(blocks.length);
  for (let r = 0; r < S; r++) {
    inRow.fill(0);
    for (const b of rowBlocks[r] as Int32Array) inRow[lowerBound(blocks, b)] = 1;
    const visible = clen[r] as number;
    for (let u = 0; u < real; u++) allow[r * U + u] = inRow[blockOf[u] as number] === 1 && (pos[u] as number) < visible ? 1 : 0;
  }
  return { positions: Int32Array.from(pos), allow, rowBlocks, blockSize };
}

/** Pool columns picked per row (by rank) → positions [S, k'], -1 where the pick's score was -inf. */
function poolPicks(pick: Int32Array, finite: Uint8Array, positions: Int32Array): Int32Array {
  const out = new Int32Array(pick.length);
  for (let i = 0; i < pick.length; i++) out[i] = finite[i] === 1 ? (positions[pick[i] as number] as number) : -1;
  return out;
}

/**
 * The rows' final top-k lists [S, kk], as the official scan gives them: the finite picks, then (while
 * fewer than kEff = min(kk, visible entries)) the lowest positions outside the row's allowed set, which
 * stay picks when below the row's visible length; ascending; -1 for unreachable picks and padding.
 */
export function completePicks(picks: Int32Array, S: number, kk: number, kEff: number, clen: Int32Array, pool: CandidatePool): Int32Array {
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

function lowerBound(sorted: Int32Array, x: number): number {
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
