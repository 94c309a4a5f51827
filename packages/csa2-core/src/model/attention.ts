/**
 * @module model/attention
 * One layer's sparse attention over a batch of spans (csa2 §2.4–2.5): each span's window rows and index
 * layout (model/span), then as few graph runs as the memory budget allows, each over the rows of one or
 * more spans with one key table that lays out, per span, the compressed entries its rows selected
 * (packed main-KV rows, gathered from the KV source's cache and unpacked in the graph) and its window
 * rows. The table holds only what the rows selected — at most topk entries a decode row, whatever the
 * context — so nothing O(context) is copied per step.
 */
import { Csa2Error } from '../errors.js';
import type { ModelConfig } from '../config/model-config.js';
import type { LayerPlanEntry } from '../config/layer-plan.js';
import { f32, i32, u8 } from '../runtime/ort-session.js';
import { ATTENTION_BLOCK } from './graph-ops.js';
import { attentionColumns } from './graphs/context.js';
import type { ModelGraphs } from './model-graphs.js';
import type { SpanState } from './span.js';

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

/** Rows [r0, r1) of one span in a run, with the entries they selected (ascending, unique). */
interface RunMember {
  readonly st: SpanState;
  readonly batchRow: number;
  readonly r0: number;
  readonly r1: number;
  readonly window: WindowPart;
  readonly entries: Int32Array;
}

function selectedEntries(topk: Int32Array, kk: number, r0: number, r1: number): Int32Array {
  const set = new Set<number>();
  for (let i = r0 * kk; i < r1 * kk; i++) {
    const j = topk[i] as number;
    if (j >= 0) set.add(j);
  }
  return Int32Array.from(set).sort();
}

function indexOf(sorted: Int32Array, x: number): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if ((sorted[mid] as number) < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

export interface AttentionContext {
  readonly config: ModelConfig;
  readonly graphs: ModelGraphs;
  /** Upper bound on the float32 values live in one run: per row one block of keys and ~3 [H, D] accumulators, plus the key table. */
  readonly attentionBudgetValues: number;
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

  // the runs: whole spans while they fit, a span too big alone in row blocks of its own
  const runs: RunMember[][] = [];
  let current: RunMember[] = [];
  let currentValues = 0;
  for (const { st, offset } of spans) {
    const window = windowPart(st, e, c, kvw.subarray(offset * D, (offset + st.rows) * D));
    const topk = m > 0 ? st.shared.topk : null;
    if (m > 0 && topk === null) throw new Csa2Error('runtime', `layer ${e.layer}: no top-k list for the span at ${st.span.p0}`);
    const kk = st.shared.kk;
    const all: RunMember = { st, batchRow: offset, r0: 0, r1: st.rows, window, entries: topk !== null ? selectedEntries(topk, kk, 0, st.rows) : new Int32Array(0) };
    const values = st.rows * perRow + (all.entries.length + window.rows.length / D) * D;
    if (values <= ctx.attentionBudgetValues) {
      if (current.length > 0 && currentValues + values > ctx.attentionBudgetValues) {
        runs.push(current);
        current = [];
        currentValues = 0;
      }
      current.push(all);
      currentValues += values;
      continue;
    }
    const blockRows = Math.max(1, Math.floor((st.rows * ctx.attentionBudgetValues) / values));
    for (let r0 = 0; r0 < st.rows; r0 += blockRows) {
      const r1 = Math.min(st.rows, r0 + blockRows);
      const entries = topk !== null ? selectedEntries(topk, kk, r0, r1) : new Int32Array(0);
      runs.push([{ st, batchRow: offset + r0, r0, r1, window, entries }]);
    }
  }
  if (current.length > 0) runs.push(current);

  const att = new Float32Array(R * H * D);
  for (const run of runs) {
    const first = run[0] as RunMember;
    const rows = run.reduce((s, mbr) => s + (mbr.r1 - mbr.r0), 0);
    const Ut = run.reduce((s, mbr) => s + mbr.entries.length, 0);
    const Wt = run.reduce((s, mbr) => s + mbr.window.rows.length / D, 0);
    const idx = new Int32Array(rows * C).fill(-1);
    const win = new Float32Array(Wt * D);
    const packedRowBytes = D / 2 + D / 16;
    const Up = Math.max(1, Ut); // the packed input has at least one row (a zero row nothing points to)
    const packed = new Uint8Array(Up * packedRowBytes);
    let row = 0;
    let uOff = 0;
    let wOff = 0;
    for (const mbr of run) {
      const w = mbr.window;
      win.set(w.rows, wOff * D);
      const base = m > 0 ? Up : 0; // window rows follow the packed entries in the table
      const topk = mbr.st.shared.topk;
      const kk = mbr.st.shared.kk;
      if (m > 0) mbr.st.span.seq.cache(e.kvSource as number).mainKv.gather(mbr.entries, packed, uOff);
      for (let r = mbr.r0; r < mbr.r1; r++, row++) {
        const o = row * C;
        const wr = w.idx.length === w.cols ? 0 : r; // a step has one window list
        for (let col = 0; col < w.cols; col++) {
          const j = w.idx[wr * w.cols + col] as number;
          idx[o + col] = j >= 0 ? base + wOff + j : -1;
        }
        if (topk !== null) {
          for (let k = 0; k < kk; k++) {
            const j = topk[r * kk + k] as number;
            idx[o + w.cols + k] = j >= 0 ? uOff + indexOf(mbr.entries, j) : -1;
          }
        }
      }
      uOff += mbr.entries.length;
      wOff += w.rows.length / D;
    }
    const qRows = q.subarray(first.batchRow * H * D, (first.batchRow + rows) * H * D);
    const common = { q: f32(qRows, [rows, H, D]), idx: i32(idx, [rows, C]), sink: f32(sink, [H]) };
    const out =
      m > 0
        ? await ctx.graphs.attentionCompressed.run({ ...common, packed: u8(packed, [Up, packedRowBytes]), win: f32(win, [Wt, D]) })
        : await ctx.graphs.attentionWindow.run({ ...common, kv: f32(win, [Wt, D]) });
    att.set(out.att.data, first.batchRow * H * D);
  }
  return att;
}
