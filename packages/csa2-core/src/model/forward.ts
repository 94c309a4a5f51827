/**
 * @module model/forward
 * One forward call over a batch of spans (model/sequence/span): the layers run in order; at each layer the
 * spans that run it form a LayerBatch (their rows concatenated, re-laid out only where a span enters
 * or leaves), which model/block runs. After the layers: the encode spans' compressor step into the
 * first decoder KV source (one graph run for all), then the head over the last row of every span that
 * asked for logits (one run).
 *
 * Batch invariance. A span's results do not depend on the other spans of its call: the weight graphs
 * compute every row alike whatever the row count (onnxruntime's MatMul gives the same bits for a row in
 * 1 or 256 rows), the attention and the indexers work per row against the span's own caches, and the
 * TypeScript steps are per row. Tests check it bit for bit.
 */
import { Csa2Error, InputError } from '../errors.js';
import type { ModelConfig } from '../config/model-config.js';
import type { LayerPlan, LayerPlanEntry } from '../config/layer-plan.js';
import { f32, type TensorOf } from '../runtime/ort-session.js';
import { compressSpans, runBlock, type BlockContext, type LayerBatch } from './block.js';
import { ropeRows } from './attention/rope.js';
import type { LayerTimer, Span, SpanOutput, SpanState } from './sequence/span.js';

export interface ForwardContext extends BlockContext {
  readonly timer: LayerTimer | null;
  readonly plan: LayerPlan;
  /** Token embedding [V, d]. */
  readonly embed: Float32Array;
  readonly freqsPlain: Float32Array;
  readonly freqsCompress: Float32Array;
}

function ropeTensors(freqs: Float32Array, positions: ArrayLike<number>): { cos: TensorOf<'float32'>; sin: TensorOf<'float32'> } {
  const { cos, sin } = ropeRows(freqs, positions);
  const dims = [positions.length, freqs.length];
  return { cos: f32(cos, dims), sin: f32(sin, dims) };
}

/** The layer-0 input of rows [p0, p1): the tokens' embedding rows copied into n streams, pre = e0. */
function embedRows(config: ModelConfig, embed: Float32Array, ids: ArrayLike<number>): { X: Float32Array; pre: Float32Array } {
  const { hcMult: n, dim: d, vocabSize: V } = config;
  const X = new Float32Array(ids.length * n * d);
  const pre = new Float32Array(ids.length * n);
  for (let r = 0; r < ids.length; r++) {
    const id = ids[r] as number;
    if (!(id >= 0 && id < V)) throw new InputError(`token id ${id} is outside the vocabulary [0, ${V})`);
    const row = embed.subarray(id * d, (id + 1) * d);
    for (let j = 0; j < n; j++) X.set(row, (r * n + j) * d);
    pre[r * n] = 1;
  }
  return { X, pre };
}

function checkSpans(config: ModelConfig, spans: readonly Span[]): void {
  const seen = new Set<object>();
  spans.forEach((s, i) => {
    const where = `span ${i}`;
    if (!(Number.isInteger(s.p0) && Number.isInteger(s.p1) && 0 <= s.p0 && s.p0 < s.p1))
      throw new Csa2Error('runtime', `${where}: rows [${s.p0}, ${s.p1}) are empty or not integers`);
    if (s.p1 > s.seq.length) throw new Csa2Error('runtime', `${where}: rows end at ${s.p1}, the sequence holds ${s.seq.length} tokens`);
    if (!(0 <= s.l0 && s.l0 < s.l1 && s.l1 <= config.numLayers))
      throw new Csa2Error('runtime', `${where}: layers [${s.l0}, ${s.l1}) are not within [0, ${config.numLayers})`);
    if (s.input === null && s.l0 !== 0) throw new Csa2Error('runtime', `${where}: a span that starts at layer ${s.l0} needs its input stream`);
    if (s.input !== null && (s.input.start > s.p0 || s.input.start + s.input.rows < s.p1)) {
      throw new Csa2Error('runtime', `${where}: input stream rows [${s.input.start}, ${s.input.start + s.input.rows}) do not cover [${s.p0}, ${s.p1})`);
    }
    if (s.layout.kind === 'step' && s.p1 !== s.p0 + 1) throw new Csa2Error('runtime', `${where}: a step span has one row`);
    if (s.layout.kind === 'segment' && (s.p0 < s.layout.start || s.p1 > s.layout.end))
      throw new Csa2Error('runtime', `${where}: rows [${s.p0}, ${s.p1}) outside segment [${s.layout.start}, ${s.layout.end})`);
    if (seen.has(s.seq)) throw new Csa2Error('runtime', `${where}: one sequence may have only one span in a forward call`);
    seen.add(s.seq);
  });
}

/**
 * Runs the spans (of distinct sequences) in one forward call. With a graph encoder (ModelOptions.encoder
 * 'graph'), the encode chunks it takes run there, one graph run each, and the rest through the layers.
 */
export async function forward(ctx: ForwardContext, spans: readonly Span[]): Promise<SpanOutput[]> {
  checkSpans(ctx.config, spans);
  const enc = ctx.graphs.encoder;
  const viaGraph = enc === null ? [] : spans.map((s) => enc.declines(s) === null);
  if (enc === null || !viaGraph.some(Boolean)) return forwardLayers(ctx, spans);
  const layered = await forwardLayers(
    ctx,
    spans.filter((_, i) => !viaGraph[i]),
  );
  const out: SpanOutput[] = [];
  let next = 0;
  for (let i = 0; i < spans.length; i++) {
    if (!viaGraph[i]) {
      out.push(layered[next++] as SpanOutput);
      continue;
    }
    const t0 = performance.now();
    out.push(await enc.run(spans[i] as Span, ctx.freqsPlain, ctx.freqsCompress, ctx.observer));
    ctx.timer?.other('encoder-graph', performance.now() - t0);
  }
  return out;
}

/** Runs the spans through the layers (model/block), batched layer by layer. */
async function forwardLayers(ctx: ForwardContext, spans: readonly Span[]): Promise<SpanOutput[]> {
  const c = ctx.config;
  if (spans.length === 0) return [];
  const { hcMult: n, dim: d } = c;
  const states: SpanState[] = spans.map((span) => {
    const rows = span.p1 - span.p0;
    let X: Float32Array;
    let pre: Float32Array;
    if (span.input === null) ({ X, pre } = embedRows(c, ctx.embed, span.seq.tokens.view(span.p0, span.p1)));
    else {
      const a = span.p0 - span.input.start;
      X = span.input.X.subarray(a * n * d, (a + rows) * n * d);
      pre = span.input.pre.subarray(a * n, (a + rows) * n);
    }
    return { span, rows, X, pre, shared: { topk: null, kk: 0, candidates: null, kb: 0, selection: null } };
  });

  const lMin = Math.min(...spans.map((s) => s.l0));
  const lMax = Math.max(...spans.map((s) => s.l1));
  let batch: LayerBatch | null = null;
  let activeKey = '';
  const release = (b: LayerBatch) => {
    for (const { st, offset } of b.spans) {
      st.X = b.X.subarray(offset * n * d, (offset + st.rows) * n * d);
      st.pre = b.pre.subarray(offset * n, (offset + st.rows) * n);
    }
  };
  for (let l = lMin; l < lMax; l++) {
    const active = states.filter((st) => st.span.l0 <= l && l < st.span.l1);
    const key = active.map((st) => states.indexOf(st)).join(',');
    if (key !== activeKey) {
      if (batch !== null) release(batch);
      batch = layerBatch(ctx, active);
      activeKey = key;
    }
    if (batch === null || batch.spans.length === 0) continue;
    const lg = ctx.graphs.layers[l] as (typeof ctx.graphs.layers)[number];
    const t0 = ctx.timer === null ? 0 : performance.now();
    await runBlock(ctx, lg, batch);
    ctx.timer?.layer(lg.entry.mode, performance.now() - t0);
  }
  if (batch !== null) release(batch);

  // encode spans: the first decoder KV source's cache from the encoder output (one run for all)
  const toCompress = states.filter((st) => st.span.compressAtEnd === true);
  if (toCompress.length > 0) {
    const dec = ctx.plan.decoderStart;
    const graph = ctx.graphs.compressOnly;
    if (dec === null || graph === null) throw new Csa2Error('unsupported-feature', 'this layer schedule has no encoder–decoder split');
    for (const st of toCompress)
      if (st.span.l1 !== dec) throw new Csa2Error('runtime', `an encode span must end at the decoder start (layer ${dec}), not ${st.span.l1}`);
    const t0 = performance.now();
    const b = concatStates(toCompress, n, d);
    const out = await graph.run({ X: f32(b.X, [b.rows, n, d]), pre: f32(b.pre, [b.rows, n]) });
    await compressSpans(ctx, ctx.graphs.layers[dec] as (typeof ctx.graphs.layers)[number], b.spans, out, (st) =>
      st.span.layout.kind === 'step' ? st.span.layout : { kind: 'segment', start: st.span.p0, end: st.span.p1 },
    );
    ctx.timer?.other('compress-at-end', performance.now() - t0);
  }

  // logits of the last row of the spans that ask for them, and of every row of those that ask for
  // all (one head run: the head is row-wise, so a row's logits do not depend on the others)
  const wantLogits = states.filter((st) => st.span.logits === true || st.span.allLogits === true);
  const logits = new Map<SpanState, Float32Array>();
  const rowLogits = new Map<SpanState, Float32Array>();
  if (wantLogits.length > 0) {
    const firstRow = (st: SpanState) => (st.span.allLogits === true ? 0 : st.rows - 1);
    const B = wantLogits.reduce((b, st) => b + st.rows - firstRow(st), 0);
    const X = new Float32Array(B * n * d);
    const pre = new Float32Array(B * n);
    let at = 0;
    for (const st of wantLogits) {
      const r0 = firstRow(st);
      X.set(st.X.subarray(r0 * n * d, st.rows * n * d), at * n * d);
      pre.set(st.pre.subarray(r0 * n, st.rows * n), at * n);
      at += st.rows - r0;
    }
    const t0 = performance.now();
    const out = await ctx.graphs.head.run({ X: f32(X, [B, n, d]), pre: f32(pre, [B, n]) });
    ctx.timer?.other('head', performance.now() - t0);
    const V = c.vocabSize;
    at = 0;
    for (const st of wantLogits) {
      const k = st.rows - firstRow(st);
      const last = at + k - 1;
      if (st.span.logits === true) logits.set(st, out.logits.data.slice(last * V, (last + 1) * V));
      if (st.span.allLogits === true) rowLogits.set(st, out.logits.data.slice(at * V, (at + k) * V));
      at += k;
    }
  }
  return states.map((st) => ({
    stream: { start: st.span.p0, rows: st.rows, X: st.X, pre: st.pre },
    logits: logits.get(st) ?? null,
    rowLogits: rowLogits.get(st) ?? null,
  }));
}

function concatStates(
  states: readonly SpanState[],
  n: number,
  d: number,
): { spans: Array<{ st: SpanState; offset: number }>; rows: number; X: Float32Array; pre: Float32Array } {
  const rows = states.reduce((s, st) => s + st.rows, 0);
  if (states.length === 1) {
    const st = states[0] as SpanState;
    return { spans: [{ st, offset: 0 }], rows, X: st.X, pre: st.pre };
  }
  const X = new Float32Array(rows * n * d);
  const pre = new Float32Array(rows * n);
  const spans: Array<{ st: SpanState; offset: number }> = [];
  let offset = 0;
  for (const st of states) {
    X.set(st.X, offset * n * d);
    pre.set(st.pre, offset * n);
    spans.push({ st, offset });
    offset += st.rows;
  }
  return { spans, rows, X, pre };
}

function layerBatch(ctx: ForwardContext, active: readonly SpanState[]): LayerBatch {
  const { hcMult: n, dim: d } = ctx.config;
  const b = concatStates(active, n, d);
  const positions = new Int32Array(b.rows);
  for (const { st, offset } of b.spans) for (let r = 0; r < st.rows; r++) positions[offset + r] = st.span.p0 + r;
  const ropes = new Map<boolean, { cos: TensorOf<'float32'>; sin: TensorOf<'float32'> }>();
  return {
    ...b,
    rope(e: LayerPlanEntry) {
      const compressed = e.compressRatio > 0;
      let r = ropes.get(compressed);
      if (r === undefined) ropes.set(compressed, (r = ropeTensors(compressed ? ctx.freqsCompress : ctx.freqsPlain, positions)));
      return r;
    },
  };
}

export { ropeTensors };
