/**
 * @module model/block
 * One block (layer) of the DeepSeek-V4.1 forward pass over the rows of a batch of spans (csa2 §3.4):
 *
 *   attnIn     (all rows)   hc mixes, q, window KV, compressor inputs, index q/weights
 *   compressor (per span, one graph run)   completed groups → packed cache rows; publish index K
 *   indexer    (spans share runs where cheap)   top-k entries (Full / Reindex), candidate blocks
 *   attention  (runs over spans)   window ∪ selected entries, one softmax with the sink
 *   attnOut    (all rows)   output projection, hc_post, FFN mixes and input, gate logits
 *   ffn        (all rows)   MoE routing and experts, hc_post → the next stream
 *
 * Reuse layers take the latest index source's top-k from the span's shared slots; the order (KV source
 * compresses before anyone attends, the indexer reads the latent-derived keys) is the reference's.
 */
import type { ModelConfig } from '../config/model-config.js';
import type { LayerPlanEntry } from '../config/layer-plan.js';
import { f32, type TensorOf } from '../runtime/ort-session.js';
import { runAttention, type AttentionContext } from './attention/attention.js';
import { compressGroups, feedCompressor, type CompletedGroups, type CompressorRows } from './attention/compressor.js';
import { runFfn } from './ffn/ffn.js';
import { splitMixes } from './hc/hc-sinkhorn.js';
import { runIndexers } from './indexer/indexer.js';
import type { IndexerContext } from './indexer/indexer-job.js';
import type { LayerGraphs, ModelGraphs } from './model-graphs.js';
import type { BlockStep, ForwardObserver, LayerTimer, SpanLayout, SpanState } from './sequence/span.js';

export interface BlockContext extends AttentionContext, IndexerContext {
  readonly config: ModelConfig;
  readonly graphs: ModelGraphs;
  readonly observer: ForwardObserver | null;
  readonly timer?: LayerTimer | null;
  /** cos/sin rows of the compress-table RoPE at the given positions (compressed entries). */
  compressRope(positions: ArrayLike<number>): { cos: TensorOf<'float32'>; sin: TensorOf<'float32'> };
}

/** The rows of the spans that run one layer, concatenated in span order. */
export interface LayerBatch {
  readonly spans: ReadonlyArray<{ readonly st: SpanState; readonly offset: number }>;
  readonly rows: number;
  /** The stream entering the layer [rows, n, d] and its collapse mix [rows, n]. */
  X: Float32Array;
  pre: Float32Array;
  /** RoPE rows of the batch's positions for the layer's table (plain for ratio 0, compress otherwise). */
  rope(e: LayerPlanEntry): { cos: TensorOf<'float32'>; sin: TensorOf<'float32'> };
}

/** The compressor inputs of one span's rows, from the (batch-wide) attnIn or compress-only outputs. */
export function spanCompressorRows(
  out: { latent?: TensorOf<'float32'>; ckv?: TensorOf<'float32'>; cscore?: TensorOf<'float32'> },
  offset: number,
  rows: number,
  D: number,
): CompressorRows {
  const cut = (t: TensorOf<'float32'> | undefined) => t?.data.subarray(offset * D, (offset + rows) * D);
  const latent = cut(out.latent);
  const ckv = cut(out.ckv);
  const cscore = cut(out.cscore);
  return { ...(latent !== undefined ? { latent } : {}), ...(ckv !== undefined ? { ckv } : {}), ...(cscore !== undefined ? { cscore } : {}) };
}

/**
 * The reference publishes a KV source's index-K cache when its compressor returns a latent: in a
 * prefill segment whenever the call has at least one full group (equivalently, always, for the readers
 * that run), in a decode step only when the step completes a group.
 */
export function publishIndexK(st: SpanState, e: LayerPlanEntry, layout: SpanLayout): void {
  if (layout.kind === 'segment' || (st.span.p0 + 1) % e.compressRatio === 0) st.span.seq.indexKSlot = e.layer;
}

/** Compresses the spans' rows into layer e's cache (one graph run for all) and publishes its index keys. */
export async function compressSpans(
  ctx: BlockContext,
  lg: LayerGraphs,
  spans: ReadonlyArray<{ readonly st: SpanState; readonly offset: number }>,
  out: { latent?: TensorOf<'float32'>; ckv?: TensorOf<'float32'>; cscore?: TensorOf<'float32'> },
  layoutOf: (st: SpanState) => SpanLayout,
): Promise<void> {
  const e = lg.entry;
  const D = ctx.config.headDim;
  const parts: CompletedGroups[] = [];
  for (const { st, offset } of spans) {
    const done = feedCompressor(st.span.seq.cache(e.layer), e, st.span.p0, st.span.p1, spanCompressorRows(out, offset, st.rows, D));
    if (done !== null) parts.push(done);
  }
  if (lg.compress === null) throw new Error(`layer ${e.layer} is a KV source without a compress graph`);
  await compressGroups(lg.compress, e, parts, (positions) => ctx.compressRope(positions));
  for (const { st } of spans) publishIndexK(st, e, layoutOf(st));
}

/** Runs layer `lg` over the batch; replaces batch.X / batch.pre with the layer's output. */
export async function runBlock(ctx: BlockContext, lg: LayerGraphs, batch: LayerBatch): Promise<void> {
  const step = ctx.timer?.step?.bind(ctx.timer);
  let t = step === undefined ? 0 : performance.now();
  const lap = (what: BlockStep): void => {
    if (step === undefined) return;
    const now = performance.now();
    step(what, now - t);
    t = now;
  };
  const c = ctx.config;
  const e = lg.entry;
  const { hcMult: n, dim: d } = c;
  const R = batch.rows;
  const rope = batch.rope(e);
  const X = f32(batch.X, [R, n, d]);
  const a = await lg.attnIn.run({ X, pre: f32(batch.pre, [R, n]), cos: rope.cos, sin: rope.sin });
  lap('attn-in');

  // 1. the KV source compresses this call's completed groups before anyone attends (csa2 §3.4)
  if (e.isKvSource) await compressSpans(ctx, lg, batch.spans, a, (st) => st.span.layout);
  lap('compress');

  // 2. top-k compressed positions: own indexer (Full/Reindex) or the latest source's list (Reuse)
  if (lg.indexer !== null) {
    const iq = a.iq?.data;
    const iw = a.iw?.data;
    if (iq === undefined || iw === undefined) throw new Error(`layer ${e.layer}: attnIn has no index queries`);
    await runIndexers(ctx, lg.indexer, e, batch.spans, iq, iw);
  }
  lap('indexer');

  // 3. sparse attention, then the rest of the sublayer
  const att = await runAttention(ctx, e, lg.sink, batch.spans, a.q.data, a.kvw.data);
  lap('attention');
  const aMix = splitMixes(a.a_pre, a.a_post, a.a_comb, a.a_mix, lg.hcAttn, `attn_in_${e.layer}`);
  lap('sinkhorn');
  const attn = await lg.attnOut.run({
    att: f32(att, [R, c.numHeads, c.headDim]),
    X,
    a_pre: f32(aMix.pre, [R, n]),
    a_post: f32(aMix.post, [R, n]),
    a_comb: f32(aMix.comb, [R, n, n]),
    cos: rope.cos,
    sin: rope.sin,
  });

  lap('attn-out');
  // 4. MoE
  const ffn = await runFfn(c, lg, R, attn);
  lap('ffn');
  const obs = ctx.observer;
  if (obs !== null) {
    const k = c.numActivatedExperts;
    for (const { st, offset } of batch.spans) {
      const p0 = st.span.p0;
      const S = st.rows;
      obs.routing?.(
        e.layer,
        p0,
        S,
        attn.xf.data.subarray(offset * d, (offset + S) * d),
        ffn.routing.experts.subarray(offset * k, (offset + S) * k),
        ffn.routing.weights.subarray(offset * k, (offset + S) * k),
      );
      obs.layerOutput?.(e.layer, p0, S, ffn.X.subarray(offset * n * d, (offset + S) * n * d), ffn.pre.subarray(offset * n, (offset + S) * n));
    }
  }
  batch.X = ffn.X;
  batch.pre = ffn.pre;
}
