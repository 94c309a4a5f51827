/**
 * @module model/attention/attention
 * One layer's sparse attention over a batch of spans (csa2 §2.4–2.5): each span's window rows and index
 * layout (model/sequence/span), then as few graph runs as the memory budget allows, each over the rows of one or
 * more spans with one key table that lays out, per span, the compressed entries its rows selected
 * (packed main-KV rows, gathered from the KV source's cache and unpacked by a WebAssembly loop) and its window
 * rows. The table holds only what the rows selected — at most topk entries a decode row, whatever the
 * context — so nothing O(context) is copied per step.
 */
import { Csa2Error } from '../../errors.js';
import type { ModelConfig } from '../../config/model-config.js';
import type { LayerPlanEntry } from '../../config/layer-plan.js';
import { f32, i32 } from '../../runtime/ort-session.js';
import { ATTENTION_BLOCK } from '../graphs/graph-ops.js';
import { attentionColumns } from '../graphs/context.js';
import type { ATTENTION } from '../graphs/signatures.js';
import type { TypedGraph } from '../graphs/graph-io.js';
import { MainKvUnpacker } from '../indexer/indexer-kernels.js';
import type { Selection, SelectionBlock, SpanState } from '../sequence/span.js';

/** A span's window keys: table rows [W, D] and, per row, its window columns as rows of that table. */
interface WindowPart {
  readonly rows: Float32Array;
  /** Window columns per query row. */
  readonly cols: number;
  /** [S, cols] rows of `rows`, -1 = no key. */
  readonly idx: Int32Array;
}

/**
 * Writes the span's new window rows into its layer ring and returns its window keys. A step reads the
 * ring (slots oldest first, the reference's decode layout); a segment chunk reads the ring's rows of the
 * segment before p0 followed by its own rows (the reference's prefill layout).
 */
function windowPart(st: SpanState, e: LayerPlanEntry, c: ModelConfig, kvw: Float32Array): WindowPart {
  const { seq, layout, p0, p1 } = st.span;
  const D = c.headDim;
  const win = c.windowSize;
  const S = st.rows;
  const ring = seq.windows[e.layer];
  if (ring === undefined) throw new Csa2Error('runtime', `no window ring for layer ${e.layer}`);
  if (layout.kind === 'step') {
    ring.write(p0, kvw);
    const idx = new Int32Array(win);
    const oldest = (p0 % win) + 1;
    for (let col = 0; col < win; col++) {
      const slot = (oldest + col) % win;
      idx[col] = (ring.positions[slot] as number) >= 0 ? slot : -1;
    }
    return { rows: ring.rows, cols: win, idx }; // read before this layer writes the ring again
  }
  const first = Math.max(layout.start, p0 - win + 1);
  const rows = new Float32Array((p1 - first) * D);
  for (let pos = first; pos < p0; pos++) {
    const row = ring.get(pos);
    if (row === null) throw new Csa2Error('runtime', `layer ${e.layer}: window row of position ${pos} is missing`);
    rows.set(row, (pos - first) * D);
  }
  rows.set(kvw, (p0 - first) * D);
  const cols = Math.min(layout.end - layout.start, win);
  const idx = new Int32Array(S * cols);
  for (let r = 0; r < S; r++) {
    const t = p0 + r;
    const lo = Math.max(layout.start, t - win + 1);
    for (let col = 0; col < cols; col++) {
      const pos = lo + col;
      idx[r * cols + col] = pos <= t ? pos - first : -1;
    }
  }
  for (let r = Math.max(0, S - win); r < S; r++) ring.write(p0 + r, kvw.subarray(r * D, (r + 1) * D));
  return { rows, cols, idx };
}

/** Rows [r0, r1) of one span in a run, with their window keys and (compressed layers) their selection block. */
interface RunMember {
  readonly st: SpanState;
  readonly batchRow: number;
  readonly r0: number;
  readonly r1: number;
  readonly window: WindowPart;
  readonly block: SelectionBlock | null;
}

function selectedEntries(topk: Int32Array, kk: number, r0: number, r1: number, scratch: AttentionScratch): Int32Array {
  if (r1 - r0 === 1) {
    // one row (a decode step): its list is ascending and unique already, -1s last
    const row = topk.subarray(r0 * kk, r1 * kk);
    let n = 0;
    while (n < kk && (row[n] as number) >= 0) n++;
    return row.slice(0, n);
  }
  // the union: each position once (a flag per position, cleared again after), then in ascending order
  const taken = scratch.flagsFor(topk, r0 * kk, r1 * kk);
  const out = new Int32Array((r1 - r0) * kk);
  let n = 0;
  for (let i = r0 * kk; i < r1 * kk; i++) {
    const j = topk[i] as number;
    if (j >= 0 && taken[j] === 0) {
      taken[j] = 1;
      out[n++] = j;
    }
  }
  for (let i = 0; i < n; i++) taken[out[i] as number] = 0;
  return out.slice(0, n).sort();
}

/** The model graphs an attention run reads (ModelGraphs has them): the sparse attention of each layer kind. */
export interface AttentionGraphs {
  readonly attentionWindow: TypedGraph<typeof ATTENTION>;
  readonly attentionCompressed: TypedGraph<typeof ATTENTION>;
  /** The same two graphs without an arena, for runs of more rows than RuntimeOptions.attentionArenaMaxRows; null when every run uses the sessions above. */
  readonly attentionNoArena: {
    readonly window: TypedGraph<typeof ATTENTION>;
    readonly compressed: TypedGraph<typeof ATTENTION>;
    readonly aboveRows: number;
  } | null;
}

export interface AttentionContext {
  readonly config: ModelConfig;
  readonly graphs: AttentionGraphs;
  /** Upper bound on the float32 values live in one run: per row one block of keys and ~3 [H, D] accumulators, plus the key table. */
  readonly attentionBudgetValues: number;
  /** The runs' key tables and index lists (one per model: forward calls are sequential). */
  readonly attentionScratch: AttentionScratch;
}

/**
 * The arrays an attention run builds, reused from run to run and layer to layer: the key table and the
 * index list (handed to onnxruntime as views; a run's views are dead when it returns), and two
 * per-position maps for a block's picks (their union, and each pick's column in the table). A
 * replay's tables hold the union of its rows' selections (~10 MB for 160 rows at tiny width): made
 * anew per layer, they were garbage that V8 collects only after tens of MB of external memory. They
 * grow to the largest run (bounded by the attention budget; the maps by the KV source's entries), and
 * `trim` drops the large ones that the last forward calls did not need.
 */
export class AttentionScratch {
  private table = new Float32Array(0);
  private idx = new Int32Array(0);
  /** Per entry position: a block's column of it (written for the block's entries before it is read). */
  private slots = new Int32Array(0);
  /** Per entry position: 1 while a union (selectedEntries) has taken it; all 0 between calls. */
  private flags = new Uint8Array(0);
  /** The latest fresh selections' unpacked entries (read by the layers that reuse them, replaced by the next fresh ones). */
  private values = new Float32Array(0);
  /** Where the latest selection values end (floats): the rest of `values` is free. */
  private valuesEnd = 0;
  private unpacker: MainKvUnpacker | null = null;
  /** The most of each array that the forward calls since the last trim asked for (elements). */
  private used = { table: 0, idx: 0, slots: 0, flags: 0, values: 0 };

  /** The WebAssembly unpack of selected main-KV rows (bit for bit graphs/packed-ops unpackMainKv). */
  mainKvUnpacker(D: number): MainKvUnpacker {
    if (this.unpacker === null || this.unpacker.D !== D) this.unpacker = new MainKvUnpacker(D);
    return this.unpacker;
  }

  /**
   * A [n] float32 view for a layer's fresh selections' unpacked entries (contents undefined). It is
   * the previous fresh selections' buffer: a layer's selections are fresh for every span of the forward
   * at once (index sources) or all reused (the layers after one), so when new ones are unpacked the old
   * ones are read no more.
   */
  selectionValues(n: number, room = 0): Float32Array {
    this.used.values = Math.max(this.used.values, n + room);
    if (this.values.length < n + room) this.values = new Float32Array(n + room);
    this.valuesEnd = n;
    return this.values.subarray(0, n);
  }

  /**
   * A run's key table in place: when the run's selected entries are the scratch's latest selection values
   * from float `start` to their end (the members' blocks, in order) and `windowValues` more fit after them,
   * the table is that part of the buffer — its entries need no copy, only the windows are written after
   * them. Null otherwise (the caller copies into `take`'s table).
   */
  tableAfterSelections(buffer: ArrayBufferLike, start: number, end: number, windowValues: number): Float32Array | null {
    if (buffer !== this.values.buffer || end !== this.valuesEnd || end + windowValues > this.values.length) return null;
    return this.values.subarray(start, end + windowValues);
  }

  /** The flags (all 0), covering every position in topk[from, to). */
  flagsFor(topk: Int32Array, from: number, to: number): Uint8Array {
    let most = -1;
    for (let i = from; i < to; i++) most = Math.max(most, topk[i] as number);
    this.used.flags = Math.max(this.used.flags, most + 1);
    if (this.flags.length <= most) this.flags = new Uint8Array(Math.max(most + 1, this.flags.length * 2));
    return this.flags;
  }

  /** Slots covering positions up to the last of `entries` (ascending), each entry's column written: slots[entries[i]] = i. */
  slotsOf(entries: Int32Array): Int32Array {
    const most = entries.length > 0 ? (entries[entries.length - 1] as number) : -1;
    this.used.slots = Math.max(this.used.slots, most + 1);
    if (this.slots.length <= most) this.slots = new Int32Array(Math.max(most + 1, this.slots.length * 2));
    const slots = this.slots;
    for (let i = 0; i < entries.length; i++) slots[entries[i] as number] = i;
    return slots;
  }

  /**
   * Called after each forward: drops an array that is above `keepValues` elements and more than twice
   * what the calls since the last trim used, so that a replay's or a long prompt's tables and position
   * maps are not kept for the decode steps after it, while a steady batch of decode rows (32 rows of the
   * dim-1024 model: a 42 MB table) keeps its arrays from step to step.
   */
  trim(keepValues = 1 << 18): void {
    const u = this.used;
    const drop = (length: number, used: number) => length > keepValues && length > 2 * used;
    if (drop(this.table.length, u.table)) this.table = new Float32Array(0);
    if (drop(this.idx.length, u.idx)) this.idx = new Int32Array(0);
    if (drop(this.slots.length, u.slots)) this.slots = new Int32Array(0);
    if (drop(this.flags.length, u.flags)) this.flags = new Uint8Array(0);
    if (drop(this.values.length, u.values)) this.values = new Float32Array(0);
    this.used = { table: 0, idx: 0, slots: 0, flags: 0, values: 0 };
  }

  /** A [n] float32 view (contents undefined) and a [m] int32 view filled with -1. */
  take(n: number, m: number): { table: Float32Array; idx: Int32Array } {
    this.used.table = Math.max(this.used.table, n);
    this.used.idx = Math.max(this.used.idx, m);
    if (this.table.length < n) this.table = new Float32Array(n);
    if (this.idx.length < m) this.idx = new Int32Array(m);
    const idx = this.idx.subarray(0, m);
    idx.fill(-1);
    return { table: this.table.subarray(0, n), idx };
  }
}

/**
 * The span's selection for this layer: reused when the layer reads the same KV source and top-k list
 * as the one that built it (an index source's Reuse layers), else made anew in row blocks whose rows
 * and selected entries fit the budget (a decode row: one block of at most topk entries). New blocks
 * have no values yet.
 */
function selectionFor(ctx: AttentionContext, e: LayerPlanEntry, st: SpanState, windowRows: number, perRow: number): { selection: Selection; fresh: boolean } {
  const shared = st.shared;
  const topk = shared.topk;
  if (topk === null) throw new Csa2Error('runtime', `layer ${e.layer}: no top-k list for the span at ${st.span.p0}`);
  const kvLayer = e.kvSource as number;
  const old = shared.selection;
  if (old !== null && old.topk === topk && old.kvLayer === kvLayer) return { selection: old, fresh: false };
  const D = ctx.config.headDim;
  const kk = shared.kk;
  const whole = selectedEntries(topk, kk, 0, st.rows, ctx.attentionScratch);
  const values = st.rows * perRow + (whole.length + windowRows) * D;
  const blocks: SelectionBlock[] = [];
  if (values <= ctx.attentionBudgetValues) blocks.push({ r0: 0, r1: st.rows, entries: whole, values: new Float32Array(0) });
  else {
    const blockRows = Math.max(1, Math.floor((st.rows * ctx.attentionBudgetValues) / values));
    for (let r0 = 0; r0 < st.rows; r0 += blockRows) {
      const r1 = Math.min(st.rows, r0 + blockRows);
      blocks.push({ r0, r1, entries: selectedEntries(topk, kk, r0, r1, ctx.attentionScratch), values: new Float32Array(0) });
    }
  }
  const selection = { kvLayer, topk, blocks };
  shared.selection = selection;
  return { selection, fresh: true };
}

/** Unpacks the entries of every fresh selection block (all spans of the layer) in one graph run. */
async function unpackSelections(
  ctx: AttentionContext,
  e: LayerPlanEntry,
  fresh: ReadonlyArray<{ st: SpanState; selection: Selection }>,
  othersReused: boolean,
  windowValues: number,
): Promise<void> {
  const D = ctx.config.headDim;
  const R = D / 2 + D / 16;
  let U = 0;
  for (const f of fresh) for (const b of f.selection.blocks) U += b.entries.length;
  if (U === 0) return;
  const packed = new Uint8Array(U * R);
  let row = 0;
  for (const { st, selection } of fresh) {
    const cache = st.span.seq.cache(selection.kvLayer).mainKv;
    for (const b of selection.blocks) {
      cache.gather(b.entries, packed, row);
      row += b.entries.length;
    }
  }
  // a copy out of the unpacker's memory: selections live on through the Reuse layers after this one (in
  // the scratch's buffer, unless a span of this layer still reads an older selection: then a new array);
  // the scratch's buffer keeps room for the spans' window rows after them (see tableAfterSelections)
  const kv = othersReused ? new Float32Array(U * D) : ctx.attentionScratch.selectionValues(U * D, windowValues);
  kv.set(ctx.attentionScratch.mainKvUnpacker(D).unpack(packed, U));
  row = 0;
  for (const { selection } of fresh) {
    for (const b of selection.blocks) {
      b.values = kv.subarray(row * D, (row + b.entries.length) * D);
      row += b.entries.length;
    }
  }
  if (row !== U) throw new Csa2Error('runtime', `layer ${e.layer}: unpacked ${row} of ${U} selected entries`);
}

/** How many attention runs with selected entries read their key table in place (tableInPlace) and how many had it copied; how many runs went to the sessions without an arena (ModelGraphs.attentionNoArena). For tests: that each path ran. */
export const attentionTableStats = { inPlace: 0, copied: 0, noArena: 0 };

/** The run's key table in place after its members' selected entries (AttentionScratch.tableAfterSelections), or null. */
function tableInPlace(scratch: AttentionScratch, run: readonly RunMember[], Ut: number, windowValues: number): Float32Array | null {
  if (Ut === 0) return null;
  let buffer: ArrayBufferLike | null = null;
  let start = 0;
  let next = 0;
  for (const m of run) {
    const v = m.block?.values;
    if (v === undefined) return null;
    if (buffer === null) {
      buffer = v.buffer;
      start = v.byteOffset / 4;
      next = start;
    }
    if (v.buffer !== buffer || v.byteOffset / 4 !== next) return null;
    next += v.length;
  }
  return buffer === null ? null : scratch.tableAfterSelections(buffer, start, next, windowValues);
}

/**
 * The attention of layer `e` for the batch's rows: q [R, H, D] and kvw [R, D] (attnIn outputs, batch row
 * order), spans with their batch row offsets. Returns att [R, H, D].
 */
export async function runAttention(
  ctx: AttentionContext,
  e: LayerPlanEntry,
  sink: Float32Array,
  spans: ReadonlyArray<{ readonly st: SpanState; readonly offset: number }>,
  q: Float32Array,
  kvw: Float32Array,
): Promise<Float32Array> {
  const c = ctx.config;
  const { numHeads: H, headDim: D } = c;
  const m = e.compressRatio;
  const C = attentionColumns(c, m);
  const R = spans.reduce((s, a) => s + a.st.rows, 0);
  const perRow = (ATTENTION_BLOCK + 3 * H) * D;

  // window keys and selections; the selections' entries unpacked in one run
  const parts: Array<{ st: SpanState; offset: number; window: WindowPart; selection: Selection | null }> = [];
  const fresh: Array<{ st: SpanState; selection: Selection }> = [];
  let reused = 0;
  for (const { st, offset } of spans) {
    const window = windowPart(st, e, c, kvw.subarray(offset * D, (offset + st.rows) * D));
    let selection: Selection | null = null;
    if (m > 0) {
      const s = selectionFor(ctx, e, st, window.rows.length / D, perRow);
      selection = s.selection;
      if (s.fresh) fresh.push({ st, selection });
      else reused++;
    }
    parts.push({ st, offset, window, selection });
  }
  const windowValues = parts.reduce((a, p) => a + p.window.rows.length, 0);
  if (fresh.length > 0) await unpackSelections(ctx, e, fresh, reused > 0, windowValues);

  // the runs: consecutive spans while they fit the budget; a span in several blocks, one run per block
  const runs: RunMember[][] = [];
  let current: RunMember[] = [];
  let currentValues = 0;
  for (const { st, offset, window, selection } of parts) {
    const blocks = selection?.blocks ?? [null];
    if (blocks.length > 1) {
      if (current.length > 0) runs.push(current);
      current = [];
      currentValues = 0;
      for (const b of blocks)
        runs.push([{ st, batchRow: offset + (b as SelectionBlock).r0, r0: (b as SelectionBlock).r0, r1: (b as SelectionBlock).r1, window, block: b }]);
      continue;
    }
    const block = blocks[0] ?? null;
    const values = st.rows * perRow + ((block?.entries.length ?? 0) + window.rows.length / D) * D;
    if (current.length > 0 && currentValues + values > ctx.attentionBudgetValues) {
      runs.push(current);
      current = [];
      currentValues = 0;
    }
    current.push({ st, batchRow: offset, r0: 0, r1: st.rows, window, block });
    currentValues += values;
  }
  if (current.length > 0) runs.push(current);

  const att = new Float32Array(R * H * D);
  for (const run of runs) {
    const first = run[0] as RunMember;
    const rows = run.reduce((s, mbr) => s + (mbr.r1 - mbr.r0), 0);
    const Ut = run.reduce((s, mbr) => s + (mbr.block?.entries.length ?? 0), 0);
    const Wt = run.reduce((s, mbr) => s + mbr.window.rows.length / D, 0);
    // the table: every member's selected entries, then every member's window rows (in place after the
    // entries when they lie in the scratch's selection values in member order: a decode batch's one run)
    const inPlace = tableInPlace(ctx.attentionScratch, run, Ut, Wt * D);
    if (inPlace !== null) attentionTableStats.inPlace++;
    else if (Ut > 0) attentionTableStats.copied++;
    const { table, idx } =
      inPlace !== null ? { table: inPlace, idx: ctx.attentionScratch.take(0, rows * C).idx } : ctx.attentionScratch.take((Ut + Wt) * D, rows * C);
    let row = 0;
    let uOff = 0;
    let wOff = Ut;
    for (const mbr of run) {
      const w = mbr.window;
      table.set(w.rows, wOff * D);
      const block = mbr.block;
      if (block !== null && inPlace === null) table.set(block.values, uOff * D);
      const slots = block !== null && block.r1 - block.r0 > 1 ? ctx.attentionScratch.slotsOf(block.entries) : null;
      const topk = mbr.st.shared.topk;
      const kk = mbr.st.shared.kk;
      for (let r = mbr.r0; r < mbr.r1; r++, row++) {
        const o = row * C;
        const wr = w.idx.length === w.cols ? 0 : r; // a step has one window list
        for (let col = 0; col < w.cols; col++) {
          const j = w.idx[wr * w.cols + col] as number;
          idx[o + col] = j >= 0 ? wOff + j : -1;
        }
        if (block !== null && topk !== null) {
          // a one-row block's entries are its own list: pick k is entry k; else each pick's column in the block
          const own = block.r1 - block.r0 === 1;
          for (let k = 0; k < kk; k++) {
            const j = topk[r * kk + k] as number;
            idx[o + w.cols + k] = j >= 0 ? uOff + (own ? k : ((slots as Int32Array)[j] as number)) : -1;
          }
        }
      }
      uOff += block?.entries.length ?? 0;
      wOff += w.rows.length / D;
    }
    const qRows = q.subarray(first.batchRow * H * D, (first.batchRow + rows) * H * D);
    const noArena = ctx.graphs.attentionNoArena;
    const big = noArena !== null && rows > noArena.aboveRows;
    if (big) attentionTableStats.noArena++;
    const sessions = big ? noArena : { window: ctx.graphs.attentionWindow, compressed: ctx.graphs.attentionCompressed };
    const graph = m > 0 ? sessions.compressed : sessions.window;
    const out = await graph.run({ q: f32(qRows, [rows, H, D]), kv: f32(table, [Ut + Wt, D]), idx: i32(idx, [rows, C]), sink: f32(sink, [H]) });
    att.set(out.att.data, first.batchRow * H * D);
  }
  return att;
}
