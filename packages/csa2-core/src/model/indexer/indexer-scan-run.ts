/**
 * @module model/indexer/indexer-scan-run
 * What a scan's scoring run needs besides the scorer itself, with no onnxruntime behind it, so that
 * the scan threads (model/indexer/scan-worker) load it too: the run sizes, the per-row push into bounded
 * heaps (pushRow), the key chunks and scoreBlock, which scores a block of rows against a range of
 * packed keys with any RunScorer (the model's IndexScorer on the main thread, the fused kernel alone
 * in a scan thread).
 */
import type { BoundedHeaps } from './indexer-ranking.js';

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

/** Scores left after the heap fills from which pushRow asks for the keys above its worst (fewer: it reads them all). */
export const ABOVE_MIN_KEYS = 256;

const f32Box = new Float32Array(1);
const u32Box = new Uint32Array(f32Box.buffer);

/** The least float32 above x (x itself for +Infinity and NaN): `≥ nextUpF32(x)` is `> x` for float32 values. */
export function nextUpF32(x: number): number {
  if (Number.isNaN(x) || x === Infinity) return x;
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
    if (v !== -Infinity && !Number.isNaN(v)) topk.push(row, v, first + n);
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
    if (v !== -Infinity && !Number.isNaN(v)) heaps.push(row, v, u + shift);
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

/** Keys per run for `rows` rows of `heads` heads: rows × heads × keys within PRODUCTS_PER_RUN and the budget, whole blocks, at least one. */
export function keysPerRunFor(rows: number, heads: number, blockSize: number, budgetValues: number): number {
  const perRow = Math.max(2, rows * heads);
  const keys = Math.min(KEYS_PER_RUN, Math.floor(Math.min(PRODUCTS_PER_RUN, budgetValues) / perRow));
  return Math.max(1, Math.floor(keys / blockSize)) * blockSize;
}

/** Rows per run: rows × heads ≤ ROWS_TIMES_HEADS_PER_RUN (a run then still takes ≥ 512 keys). */
export function rowsPerRunFor(heads: number): number {
  return Math.max(1, Math.floor(ROWS_TIMES_HEADS_PER_RUN / heads));
}

/**
 * Chunks [k0, k1) of `n` keys, `chunk` keys each (a multiple of the candidate block size), with a
 * chunk boundary at `split` too (a multiple of the block size); a single leftover key joins the
 * chunk before it.
 */
export function keyChunks(n: number, chunk: number, split = n): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  for (const [a, b] of split > 0 && split < n
    ? [
        [0, split],
        [split, n],
      ]
    : [[0, n]]) {
    const first = out.length;
    for (let k0 = a as number; k0 < (b as number); k0 += chunk) out.push([k0, Math.min(b as number, k0 + chunk)]);
    const last = out[out.length - 1];
    if (out.length - first > 1 && last !== undefined && last[1] - last[0] === 1) {
      out.pop();
      (out[out.length - 1] as [number, number])[1] = b as number;
    }
  }
  return out;
}

/** The newest visible candidate block of a row of causal length n (-1: none). */
export function pinOf(n: number, bs: number): number {
  return n > 0 ? Math.floor((n - 1) / bs) : -1;
}

/** What scoreBlock asks of a scorer (model/indexer/indexer-scores' IndexScorer has these; so has the scan threads' fused-only one). */
export interface RunScorer {
  keysPerRun(rows: number, blockSize: number, budgetValues: number): number;
  loadKeys(packed: Uint8Array, count: number): void;
  run(q: ScoreRows, from: number, count: number): Promise<void> | void;
  scoreRow(r: number, count: number): Float32Array;
  above(r: number, from: number, count: number, threshold: number): Int32Array | null;
  blockMax(r: number, blocks: number, blockSize: number): Float32Array | null;
}

/** A row of a scoring block: the heaps its scores go to (its top-k; at the candidate source its blocks), its row there and its causal length. */
export interface BlockRow {
  readonly topk: BoundedHeaps;
  readonly blocks: BoundedHeaps | null;
  readonly r: number;
  readonly clen: number;
}

/**
 * Scores a block of rows (their queries stacked in `q`, in `rows` order) against the packed keys
 * [k0, k0 + count) (`packed` holds exactly those; k0 a multiple of the block size): the keys in runs
 * of whole blocks within the budget (a single leftover key joins the run before it), each row's
 * visible scores pushed into its own heaps.
 */
export async function scoreBlock(
  scorer: RunScorer,
  blockSize: number,
  budgetValues: number,
  packed: Uint8Array,
  rowBytes: number,
  k0: number,
  count: number,
  q: ScoreRows,
  rows: readonly BlockRow[],
): Promise<void> {
  const bs = blockSize;
  let most = -Infinity;
  for (const x of rows) most = Math.max(most, x.clen - k0);
  for (const [t0, t1] of keyChunks(count, scorer.keysPerRun(rows.length, bs, budgetValues))) {
    if (t0 >= most) break; // no row sees these keys
    scorer.loadKeys(packed.subarray(t0 * rowBytes, t1 * rowBytes), t1 - t0);
    await scorer.run(q, 0, t1 - t0);
    rows.forEach((x, i) => {
      const visible = Math.min(t1, x.clen - k0) - t0;
      if (visible > 0) {
        const blocks = x.blocks === null ? null : { heaps: x.blocks, blockSize: bs, pin: pinOf(x.clen, bs) };
        pushRow(
          scorer.scoreRow(i, visible),
          visible,
          k0 + t0,
          x.r,
          x.topk,
          blocks,
          (from, threshold) => scorer.above(i, from, visible, threshold),
          (n) => scorer.blockMax(i, n, bs),
        );
      }
    });
  }
}
