/**
 * @module model/graphs/encoder-graph
 * The whole encoder over one prefill chunk as one graph: the encoder layers [0, decoderStart) and the
 * first decoder KV source's compressor, with the compressors, the index scoring and top-k, the sliding
 * windows and the sparse attention inside the graph. One run moves only packed state: in, the KV
 * sources' packed cache rows before the chunk and the window rows before it; out, the chunk's packed
 * cache rows, the window rows the next chunk needs, and the stream of the rows the caller keeps. This is
 * the encoder the CUDA provider runs (model/encoder), where every value that crosses a graph boundary
 * crosses the PCIe bus.
 *
 * The layers' equations are the per-layer graphs' own emitters (emitAttnIn, emitCompress, emitAttnOut,
 * emitExpert, headSummedScores, GraphOps.sparseAttention). What this module adds is what the layered path
 * does in TypeScript, in the same way:
 *   - the compressor's groups of m rows (a chunk starts on a group boundary; an open last group's rows
 *     come out as `pkv_l` / `pscore_l`);
 *   - each index source's list: the best min(kk, N) visible entries by score (ties to the lower
 *     position), in ascending position order, -1 past the row's visible entries (model/indexer/indexer-scan);
 *   - the attention index layout of a segment (model/sequence/span): min(segment, window) window columns
 *     from max(start, t − window + 1) upward, then the row's list, then -1;
 *   - the MoE routing (model/ffn/moe-gate) and the expert sum: every expert runs on every row with weight 0
 *     where the row is not routed to it, which adds exact zeros, so each row's sum is the routed rows'
 *     sum in the same ascending expert order.
 *
 * Inputs (S = the graph's fixed row count, of which the first `rows` are the chunk's, from position p0
 * of the segment [seg_start, seg_end); P_l entries cached before the chunk, P_l ≥ p0/m and at most the
 * chunk's last row's visible count):
 *   ids [S] int64 (padded); cos_p, sin_p / cos_c, sin_c [S, rd/2] the plain / compress RoPE rows of the chunk;
 *   rows, p0, seg_start, seg_end [1] int64; wtail [L, W−1, D] the window rows of positions
 *   [p0 − W + 1, p0) of every encoder layer (rows before seg_start are never read);
 *   kv_l [P_l, D/2 + D/16], ik_l [P_l, dI/2 + dI/32] uint8 for every encoder KV source l;
 *   what the caller computes for the arguments kernels read in host memory ([1] int64 unless said):
 *   keep_from (the first kept row), tail_from = rows − 1 and tail_to = tail_from + W, per KV source
 *   new_from_l = P_l − p0/m, entries_l (scalar: P_l + ⌊S/m⌋ − new_from_l) and, for m > 1, open_from_l
 *   = ⌊rows/m⌋·m, per index source k_l = min(kk, entries), kk = min(index_topk, ⌊seg_end/m⌋).
 * Outputs:
 *   kvnew_l, iknew_l [⌊S/m⌋, ·] uint8 the groups' packed rows (entries p0/m …; those of the first
 *   ⌊rows/m⌋ are the chunk's) of every encoder KV source and of the decoder's first; pkv_l, pscore_l
 *   [rows mod m, D] (m > 1) the open group's rows; wtail_out [L, W, D] the window rows of positions
 *   [p1 − W, p1); X_keep [rows − keep_from, n, d] and pre_keep [·, n] the kept rows' decoder-input
 *   stream; with `topk`, topk_l [S, k] int32 the lists of every encoder index source (tests and the GPU
 *   numerics checks).
 */
import { GraphBuilder } from '../../onnx/graph-builder.js';
import type { LayerPlan, LayerPlanEntry } from '../../config/layer-plan.js';
import { Csa2Error } from '../../errors.js';
import { GraphOps, bf16Bytes } from './graph-ops.js';
import { attentionColumns, type GraphContext } from './context.js';
import { emitAttnIn, emitAttnOut } from './attention-sublayer-graphs.js';
import { emitCompress } from './compress-graph.js';
import { emitExpert } from './ffn-graphs.js';
import { headSummedScores } from './indexer-graphs.js';
import { unpackIndexK, unpackMainKv } from './packed-ops.js';
import type { TensorType } from '../../runtime/ort-session.js';

export interface EncoderGraphShape {
  /** Encoder layers [0, decoderStart). */
  readonly layers: number;
  /** The encoder's KV sources (layer, ratio), then the decoder's first. */
  readonly sources: ReadonlyArray<{ readonly layer: number; readonly ratio: number }>;
  readonly decoderSource: { readonly layer: number; readonly ratio: number };
  /** The encoder's index sources (topk_l outputs when built with them). */
  readonly indexSources: readonly number[];
}

export interface EncoderGraph {
  readonly bytes: Uint8Array;
  readonly shape: EncoderGraphShape;
  readonly signature: {
    readonly inputs: Readonly<Record<string, TensorType>>;
    readonly outputs: Readonly<Record<string, TensorType>>;
  };
}

/** Why the plan has no one-graph encoder (null: it has one). */
function encoderGraphUnsupported(plan: LayerPlan): string | null {
  const dec = plan.decoderStart;
  if (dec === null) return 'the layer schedule has no encoder–decoder split';
  for (const e of plan.entries.slice(0, dec)) {
    if (e.usesCandidates || e.isCandidateSource) return `encoder layer ${e.layer} takes part in the candidate pool`;
    if (e.compressRatio > 0 && (e.kvSource === null || (e.indexSource === null && !e.isIndexSource)))
      return `encoder layer ${e.layer} has no KV or index source`;
  }
  return null;
}

/** The encoder's layers as one graph for one chunk (see the module comment). */
export function buildEncoderGraph(ctxIn: GraphContext, plan: LayerPlan, opts: { readonly rows: number; readonly topk?: boolean }): EncoderGraph {
  const why = encoderGraphUnsupported(plan);
  if (why !== null) throw new Csa2Error('unsupported-feature', `no one-graph encoder: ${why}`);
  const dec = plan.decoderStart as number;
  const ctx: GraphContext = { ...ctxIn, sinkhornInGraph: true };
  const c = ctx.config;
  const w = ctx.weights;
  const g = new GraphBuilder('encoder');
  const o = new GraphOps(g, ctx.mode, ctx.bf16Gemm === true);
  const { hcMult: n, dim: d, headDim: D, ropeHeadDim: rd, numHeads: H, windowSize: W, indexHeadDim: dI } = c;
  const R = D / 2 + D / 16;
  const r = dI / 2 + dI / 32;
  const inputs: Record<string, TensorType> = {};
  const outputs: Record<string, TensorType> = {};
  const input = (name: string, type: TensorType, dims: ReadonlyArray<number | string>): string => {
    if (inputs[name] === undefined) g.input(name, type, dims);
    inputs[name] = type;
    return name;
  };
  const output = (value: string, name: string, type: TensorType, dims: ReadonlyArray<number | string>): void => {
    outputs[name] = type;
    g.output(value, name, type, dims);
  };
  const i64 = (v: number) => g.const('int64', [v], [1]);
  const i64s = (v: number) => g.const('int64', [v], []);

  const rows = opts.rows;
  if (!(Number.isInteger(rows) && rows >= 2 * Math.max(...plan.entries.map((e) => e.compressRatio))))
    throw new Csa2Error('config-invalid', `encoder graph: ${rows} rows a chunk is fewer than two groups of the largest compress ratio`);
  const ids = input('ids', 'int64', [rows]);
  const cosP = input('cos_p', 'float32', [rows, rd / 2]);
  const sinP = input('sin_p', 'float32', [rows, rd / 2]);
  const cosC = input('cos_c', 'float32', [rows, rd / 2]);
  const sinC = input('sin_c', 'float32', [rows, rd / 2]);
  const real = input('rows', 'int64', [1]);
  // where the outputs are cut (each [1] int64, computed by the caller: a Slice's bounds, a Range's end and
  // a TopK's k read host memory, so values computed in the graph for them would be placed on the CPU)
  const keepFrom = input('keep_from', 'int64', [1]);
  const tailFrom = input('tail_from', 'int64', [1]);
  const tailTo = input('tail_to', 'int64', [1]);
  const p0 = input('p0', 'int64', [1]);
  const segStart = input('seg_start', 'int64', [1]);
  const segEnd = input('seg_end', 'int64', [1]);
  const wtail = input('wtail', 'float32', [dec, W - 1, D]);
  // the graph's rows are fixed (every shape but the caches' is then known, which onnxruntime's memory
  // planner needs: with symbolic row counts its planning time grew with the square of the ~17,000 nodes,
  // 75 s for the served model's encoder against 2 s); a shorter chunk is padded after its `rows` real
  // rows, which nothing before them sees (causal), and the outputs are cut at them
  const S = g.const('int64', [rows], [1]);

  // per-row positions t = p0 + r [S, 1]
  const rowsCol = g.const(
    'int64',
    Array.from({ length: rows }, (_, i) => i),
    [rows, 1],
  );
  const t = g.add(rowsCol, p0);
  const wcols = g.min(g.sub(segEnd, segStart), i64(W)); // [1]

  // layer 0's stream: the token's embedding in every one of the n streams, pre = e0
  const embed = w.get('embed.weight');
  const bf16Exact = holdsBf16(embed);
  const table0 = bf16Exact ? g.initializer('embed', 'bfloat16', [c.vocabSize, d], bf16Bytes(embed)) : g.weight('embed', embed, [c.vocabSize, d]);
  let x0 = g.gather(table0, ids);
  if (bf16Exact) x0 = g.cast(x0, 'float32');
  const streamShape = g.concat([S, g.const('int64', [n, d])], 0);
  let X = g.op('Expand', [g.unsqueeze(x0, [1]), streamShape]);
  let pre = g.op('Expand', [
    g.const(
      'float32',
      Array.from({ length: n }, (_, j) => (j === 0 ? 1 : 0)),
      [1, n],
    ),
    g.concat([S, i64(n)], 0),
  ]);

  /** Rows [from, to) of x along axis 0, as tensors [1]. */
  const rowSlice = (x: string, from: string, to: string, step?: string): string =>
    g.op('Slice', step === undefined ? [x, from, to, i64(0)] : [x, from, to, i64(0), step]);

  // the KV sources' packed entries visible to the chunk (cached ones, then the chunk's new ones)
  const packedAll = new Map<number, { kv: string; ik: string; mainTable: string | null }>();
  const topkOf = new Map<number, string>();

  /** A KV source's compressor over the chunk: its groups → packed rows (outputs), its entries for the chunk's layers. */
  const compressChunk = (e: LayerPlanEntry, v: { latent?: string; ckv?: string; cscore?: string }, cached: { kv: string; ik: string } | null): void => {
    const m = e.compressRatio;
    const G = i64(Math.floor(rows / m));
    const Gm = i64(Math.floor(rows / m) * m);
    let packed: { ckv: string; ik: string };
    if (m === 1) packed = emitCompress(o, ctx, e, { latent: v.latent as string }, cosC, sinC);
    else {
      const grouped = (x: string) => g.reshape(rowSlice(x, i64(0), Gm), [-1, m, D]);
      const gcos = rowSlice(cosC, i64(0), Gm, i64(m));
      const gsin = rowSlice(sinC, i64(0), Gm, i64(m));
      packed = emitCompress(o, ctx, e, { gkv: grouped(v.ckv as string), gscore: grouped(v.cscore as string) }, gcos, gsin);
      const openFrom = input(`open_from_${e.layer}`, 'int64', [1]); // ⌊rows/m⌋·m
      output(rowSlice(v.ckv as string, openFrom, real), `pkv_${e.layer}`, 'float32', [`open${e.layer}`, D]);
      output(rowSlice(v.cscore as string, openFrom, real), `pscore_${e.layer}`, 'float32', [`open${e.layer}`, D]);
    }
    output(packed.ckv, `kvnew_${e.layer}`, 'uint8', [Math.floor(rows / m), R]);
    output(packed.ik, `iknew_${e.layer}`, 'uint8', [Math.floor(rows / m), r]);
    if (cached === null) return;
    // entries before the chunk's first group are cached; of the chunk's, those from `from` = P − p0/m on
    const from = input(`new_from_${e.layer}`, 'int64', [1]);
    packedAll.set(e.layer, {
      kv: g.concat([cached.kv, rowSlice(packed.ckv, from, G)], 0),
      ik: g.concat([cached.ik, rowSlice(packed.ik, from, G)], 0),
      mainTable: null,
    });
  };

  /** An index source's lists [S, k]: ascending positions, -1 past the row's visible entries. */
  const indexerLists = (e: LayerPlanEntry, iq: string, iw: string): string => {
    const m = e.compressRatio;
    const src = packedAll.get(e.kvSource as number);
    if (src === undefined) throw new Csa2Error('runtime', `encoder graph: layer ${e.layer} reads KV source ${e.kvSource}, not built yet`);
    const K = unpackIndexK(g, src.ik, dI); // [N, dI]
    const N = input(`entries_${e.kvSource}`, 'int64', []); // N: the cached entries and the chunk's past them
    const k = input(`k_${e.layer}`, 'int64', [1]); // min(kk, N), kk = min(index_topk, ⌊seg_end/m⌋)
    const scores = headSummedScores(o, o.matmulBf(iq, g.transpose(K, [1, 0])), iw); // [S, N]
    const clen = g.div(g.add(t, i64(1)), i64(m)); // [S, 1] entries visible to the row
    const coords = g.unsqueeze(g.op('Range', [i64s(0), N, i64s(1)]), [0]); // [1, N]
    const masked = g.where(g.less(coords, clen), scores, g.scalar(-Infinity));
    const [, picks] = g.node('TopK', [masked, k], { axis: -1, largest: 1, sorted: 1 }, 2) as [string, string];
    // ascending positions (exact in float32 below 2^24 entries)
    const [asc] = g.node('TopK', [g.cast(picks, 'float32'), k], { axis: -1, largest: 0, sorted: 1 }, 2) as [string, string];
    const ascending = g.cast(asc, 'int64');
    return g.where(g.greaterOrEqual(ascending, clen), g.const('int64', [-1], []), ascending);
  };

  /** The attention index lists [S, C] into the key table (compressed entries first, then the window rows). */
  const attentionIndex = (m: number, entries: string | null, lists: string | null): string => {
    const C = attentionColumns(c, m);
    const cols = g.const(
      'int64',
      Array.from({ length: C }, (_, j) => j),
      [1, C],
    );
    const lo = g.max(segStart, g.sub(t, i64(W - 1))); // [S, 1]
    const pos = g.add(lo, cols); // [S, C]
    const windowCol = g.less(cols, wcols);
    const valid = g.op('And', [windowCol, g.op('LessOrEqual', [pos, t])]);
    const firstRow = g.sub(p0, i64(W - 1));
    const windowRow = entries === null ? g.sub(pos, firstRow) : g.add(g.sub(pos, firstRow), entries);
    const none = g.const('int64', [-1], []);
    if (lists === null) return g.where(valid, windowRow, none);
    const padded = g.concat([lists, g.op('Expand', [g.const('int64', [-1], [1, 1]), g.concat([S, i64(C)], 0)])], 1);
    const at = g.op('Expand', [g.max(g.sub(cols, wcols), i64(0)), g.concat([S, i64(C)], 0)]);
    const picked = g.op('GatherElements', [padded, at], { axis: 1 });
    return g.where(windowCol, g.where(valid, windowRow, none), picked);
  };

  const tails: string[] = [];
  for (const e of plan.entries.slice(0, dec)) {
    g.withScope(`l${e.layer}.`, () => {
      const m = e.compressRatio;
      const [cos, sin] = m > 0 ? [cosC, sinC] : [cosP, sinP];
      const a = emitAttnIn(o, ctx, e, { X, pre, rope: () => ({ cos, sin }) });
      const mixes = a.mixes;
      if (mixes === null || 'mix' in mixes || a.q === null || a.kvw === null)
        throw new Csa2Error('runtime', `encoder graph: layer ${e.layer} attnIn is incomplete`);

      // 1. the KV source compresses the chunk's groups before anyone attends
      if (e.isKvSource) {
        const kvIn = input(`kv_${e.layer}`, 'uint8', [`P${e.layer}`, R]);
        const ikIn = input(`ik_${e.layer}`, 'uint8', [`P${e.layer}`, r]);
        compressChunk(e, a, { kv: kvIn, ik: ikIn });
      }
      // 2. the top-k list: own indexer, or the latest index source's
      let lists: string | null = null;
      if (m > 0) {
        if (e.isIndexSource) {
          if (a.iq === undefined || a.iw === undefined) throw new Csa2Error('runtime', `encoder graph: layer ${e.layer} has no index queries`);
          lists = indexerLists(e, a.iq, a.iw);
          topkOf.set(e.layer, lists);
          if (opts.topk === true) output(g.cast(lists, 'int32'), `topk_${e.layer}`, 'int32', [rows, `k${e.layer}`]);
        } else {
          lists = topkOf.get(e.indexSource as number) ?? null;
          if (lists === null) throw new Csa2Error('runtime', `encoder graph: layer ${e.layer} reads index source ${e.indexSource}, not built yet`);
        }
      }
      // 3. the key table: the KV source's entries unpacked (once per source), then the window rows
      const tail = g.squeeze(g.slice(wtail, [0], [e.layer], [e.layer + 1]), [0]); // [W-1, D]
      const windowRows = g.concat([tail, a.kvw as string], 0); // positions [p0 - W + 1, p1)
      // windowRows' rows of positions [p1 − W, p1): [tail_from, tail_to) = [rows − 1, rows − 1 + W)
      tails.push(g.unsqueeze(rowSlice(windowRows, tailFrom, tailTo), [0]));
      let table = windowRows;
      let entries: string | null = null;
      if (m > 0) {
        const src = packedAll.get(e.kvSource as number);
        if (src === undefined) throw new Csa2Error('runtime', `encoder graph: layer ${e.layer} reads KV source ${e.kvSource}, not built yet`);
        if (src.mainTable === null) src.mainTable = unpackMainKv(g, src.kv, D);
        table = g.concat([src.mainTable, windowRows], 0);
        entries = input(`entries_${e.kvSource}`, 'int64', []);
      }
      const idx = attentionIndex(m, entries, lists);
      const sink = g.weight('sink', w.get(`layers.${e.layer}.attn.attn_sink`), [H]);
      const att = o.sparseAttention(a.q as string, table, idx, sink, D ** -0.5, attentionColumns(c, m));

      // 4. the rest of the sublayer, then the MoE
      const out = emitAttnOut(o, ctx, e, { att, X, aPre: mixes.pre, aPost: mixes.post, aComb: mixes.comb, cos, sin });
      if ('mix' in out.mixes) throw new Csa2Error('runtime', `encoder graph: layer ${e.layer} FFN mixes were not split`);
      X = moe(o, ctx, e, out.xf, out.X1, out.gateLogits, out.mixes.post, out.mixes.comb);
      pre = out.mixes.pre;
    });
  }

  // the decoder's first KV source, from the encoder output
  const ed = plan.entries[dec] as LayerPlanEntry;
  g.withScope(`l${ed.layer}.`, () => {
    const v = emitAttnIn(o, ctx, ed, { X, pre, rope: () => ({ cos: cosC, sin: sinC }) }, { compressOnly: true });
    compressChunk(ed, v, null);
  });

  output(g.concat(tails, 0), 'wtail_out', 'float32', [dec, W, D]);
  output(rowSlice(X, keepFrom, real), 'X_keep', 'float32', ['keep', n, d]);
  output(rowSlice(pre, keepFrom, real), 'pre_keep', 'float32', ['keep', n]);

  const shape: EncoderGraphShape = {
    layers: dec,
    sources: plan.entries
      .slice(0, dec)
      .filter((e) => e.isKvSource)
      .map((e) => ({ layer: e.layer, ratio: e.compressRatio })),
    decoderSource: { layer: ed.layer, ratio: ed.compressRatio },
    indexSources: plan.entries
      .slice(0, dec)
      .filter((e) => e.isIndexSource)
      .map((e) => e.layer),
  };
  // nothing in the graph computes what a kernel reads in host memory: on an accelerator every node stays on it
  const host = g.hostArgsComputed();
  if (host.length > 0) throw new Csa2Error('runtime', `encoder graph computes host-side arguments: ${host.slice(0, 5).join('; ')}`);
  return { bytes: g.toBytes(), shape, signature: { inputs, outputs } };
}

/** True when every value is a bf16 value (its low 16 bits are zero): the table then travels as bf16, exactly. */
function holdsBf16(values: Float32Array): boolean {
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  for (let i = 0; i < bits.length; i++) if (((bits[i] as number) & 0xffff) !== 0) return false;
  return true;
}

/**
 * The MoE of one layer in the graph: the gate (model/ffn/moe-gate's arithmetic: score function, top-k
 * by score + bias with ties to the lower expert, weights from the unbiased scores, normalized, times
 * route_scale), every routed expert over every row with its weight (0 where not routed), the shared
 * expert, hc_post → the next stream.
 */
function moe(o: GraphOps, ctx: GraphContext, e: LayerPlanEntry, xf: string, X1: string, logits: string, post: string, comb: string): string {
  const { config: c, weights: w } = ctx;
  const g = o.g;
  const E = c.numRoutedExperts;
  const k = c.numActivatedExperts;
  let x = c.gateTemp === 1 ? logits : g.div(logits, g.scalar(Math.fround(c.gateTemp)));
  // the TypeScript gate's float32 arithmetic (exp and log1p in float64, rounded once)
  let scores: string;
  if (c.scoreFunc === 'sqrtsoftplus') scores = g.sqrt(o.softplusF32(x));
  else if (c.scoreFunc === 'sigmoid') scores = o.sigmoidF32(x);
  else {
    x = o.expF32(g.sub(x, g.reduceMax(x, [-1], true)));
    scores = g.div(x, g.reduceSum(x, [-1], true));
  }
  const biased = g.add(scores, g.weight('gate_bias', w.get(`layers.${e.layer}.ffn.gate.bias`), [E]));
  const [, chosen] = g.node('TopK', [biased, g.const('int64', [k], [1])], { axis: -1, largest: 1, sorted: 1 }, 2) as [string, string];
  let weights = g.op('GatherElements', [scores, chosen], { axis: 1 }); // [S, k]
  if (c.normTopKProb && k > 1) weights = g.div(weights, g.add(g.reduceSum(weights, [-1], true), g.scalar(Math.fround(1e-20))));
  weights = g.mul(weights, g.scalar(Math.fround(c.routeScale)));
  const p = `layers.${e.layer}.ffn`;
  let y = '';
  for (let ex = 0; ex < E; ex++) {
    const wEx = g.reduceSum(g.where(g.equal(chosen, g.const('int64', [ex], [])), weights, g.scalar(0)), [-1], true); // [S, 1]
    const out = emitExpert(o, ctx, xf, `${p}.experts.${ex}`, wEx);
    y = ex === 0 ? out : g.add(y, out);
  }
  y = o.bf(g.add(y, emitExpert(o, ctx, xf, `${p}.shared_experts`, null)));
  return o.hcPost(y, X1, post, comb);
}
