/**
 * @module model/encoder/graph-encoder
 * The encoder as one graph run per chunk (model/graphs/encoder-graph): the second implementation of the
 * encode span, beside the layered path (model/forward → model/block), chosen by ModelOptions.encoder. The
 * layered path is the exact reference on the CPU; this one is for the CUDA provider, where the layered
 * path's per-layer graph runs and TypeScript steps move ~0.4 MB per token across the PCIe bus and keep
 * the GPU idle in between. Here a chunk's run takes the KV sources' packed rows and the window rows
 * before the chunk, and gives back the chunk's packed rows, the window rows after it and the stream of
 * the rows the caller keeps; the sequence is left as the layered path leaves it (caches, open groups,
 * window rings, the published index-K slot).
 *
 * A span runs here when it is an encode chunk (layers [0, decoderStart) from the embedding, then the
 * decoder's first KV source) that starts on a compressor group boundary and finds no open group; any
 * other span (decode steps, decoder replay, a chunk after an odd-length one) takes the layered path.
 */
import type { ModelConfig } from '../../config/model-config.js';
import type { LayerPlan, LayerPlanEntry } from '../../config/layer-plan.js';
import { Csa2Error } from '../../errors.js';
import { f32, i64, u8, type HostTensor, type RuntimeOptions } from '../../runtime/ort-session.js';
import { ropeRows } from '../attention/rope.js';
import { buildEncoderGraph, type EncoderGraphShape } from '../graphs/encoder-graph.js';
import type { GraphContext } from '../graphs/context.js';
import { TypedGraph, type GraphSignature, type Io } from '../graphs/graph-io.js';
import type { ForwardObserver, Span, SpanOutput } from '../sequence/span.js';

type EncoderSignature = GraphSignature<Io, Io, Io, Io>;

/** Rows of the graph for chunks of `chunkTokens`: a whole number of every compress ratio's groups, at least two of the largest. */
export function encoderGraphRows(plan: LayerPlan, chunkTokens: number): number {
  const ratios = plan.entries.map((e) => e.compressRatio).filter((m) => m > 0);
  const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));
  const lcm = ratios.reduce((acc, m) => (acc * m) / gcd(acc, m), 1);
  const most = Math.max(1, ...ratios);
  return Math.max(Math.ceil(chunkTokens / lcm) * lcm, Math.ceil((2 * most) / lcm) * lcm);
}

export class GraphEncoder {
  private constructor(
    private readonly config: ModelConfig,
    private readonly plan: LayerPlan,
    private readonly graph: TypedGraph<EncoderSignature>,
    readonly shape: EncoderGraphShape,
    /** The graph's rows: longer spans run in several chunks, shorter ones padded. */
    readonly rows: number,
  ) {}

  /**
   * Builds and opens the encoder graph for chunks of up to `chunkTokens` rows (encoderGraphRows);
   * `topk` adds the index sources' lists as outputs (tests).
   */
  static async open(
    ctx: GraphContext,
    plan: LayerPlan,
    runtime: RuntimeOptions,
    threads: number,
    opts: { readonly chunkTokens: number; readonly topk?: boolean },
  ): Promise<GraphEncoder> {
    const rows = encoderGraphRows(plan, opts.chunkTokens);
    const built = buildEncoderGraph(ctx, plan, { rows, topk: opts.topk === true });
    const signature: EncoderSignature = { inputs: built.signature.inputs, outputs: built.signature.outputs };
    const graph = await TypedGraph.open('encoder', built.bytes, signature, runtime, threads);
    return new GraphEncoder(ctx.config, plan, graph, built.shape, rows);
  }

  dispose(): Promise<void> {
    return this.graph.dispose();
  }

  /** Why `span` takes the layered path (null: it runs here). */
  declines(span: Span): string | null {
    const dec = this.plan.decoderStart;
    if (span.layout.kind !== 'segment') return 'not a segment';
    if (span.l0 !== 0 || span.l1 !== dec || span.compressAtEnd !== true || span.input !== null) return 'not an encode chunk';
    if (span.logits === true || span.allLogits === true) return 'asks for logits';
    if (span.knownSources != null || span.captureSources != null) return 'shares candidate picks';
    for (const s of [...this.shape.sources, this.shape.decoderSource]) {
      if (s.ratio > 1 && span.p0 % s.ratio !== 0) return `starts inside a group of layer ${s.layer}`;
      if (span.p1 - span.p0 < s.ratio) return `completes no group of layer ${s.layer}`;
      const cache = span.seq.cache(s.layer);
      if (cache.pendingGroup !== -1) return `layer ${s.layer} has an open group`;
      if (cache.entries < Math.floor(span.p0 / s.ratio)) return `layer ${s.layer} lacks entries before the chunk`;
    }
    return null;
  }

  /**
   * Runs an encode span (declines(span) === null) in chunks of the graph's rows; the stream of rows
   * [max(p0, keepFrom), p1) comes back.
   */
  async run(span: Span, freqsPlain: Float32Array, freqsCompress: Float32Array, observer: ForwardObserver | null = null): Promise<SpanOutput> {
    const { hcMult: n, dim: d } = this.config;
    const keepFrom = Math.min(Math.max(span.keepFrom ?? span.p0, span.p0), span.p1 - 1);
    const X = new Float32Array((span.p1 - keepFrom) * n * d);
    const pre = new Float32Array((span.p1 - keepFrom) * n);
    for (let q0 = span.p0; q0 < span.p1; q0 += this.rows) {
      const q1 = Math.min(span.p1, q0 + this.rows);
      const from = Math.max(q0, keepFrom);
      const kept = await this.runChunk(span, q0, q1, Math.min(from, q1 - 1), freqsPlain, freqsCompress, observer);
      if (from < q1) {
        X.set(kept.X, (from - keepFrom) * n * d);
        pre.set(kept.pre, (from - keepFrom) * n);
      }
    }
    return { stream: { start: keepFrom, rows: span.p1 - keepFrom, X, pre }, logits: null, rowLogits: null };
  }

  /** One graph run over rows [p0, p1) of the span (at most `rows`, padded to them); the stream of rows [keepFrom, p1). */
  private async runChunk(
    span: Span,
    p0: number,
    p1: number,
    keepFrom: number,
    freqsPlain: Float32Array,
    freqsCompress: Float32Array,
    observer: ForwardObserver | null,
  ): Promise<{ X: Float32Array; pre: Float32Array }> {
    const c = this.config;
    const { seq } = span;
    if (span.layout.kind !== 'segment') throw new Csa2Error('runtime', 'the encoder graph runs segment chunks only');
    const { start, end } = span.layout;
    const S = p1 - p0;
    const R = this.rows;
    const { hcMult: n, dim: d, headDim: D, windowSize: W } = c;
    const L = this.shape.layers;
    const keep = p1 - keepFrom;

    // rows past p1 (padding: token 0 at the next positions) are computed and dropped
    const positions = Int32Array.from({ length: R }, (_, r) => p0 + r);
    const plain = ropeRows(freqsPlain, positions);
    const comp = ropeRows(freqsCompress, positions);
    const half = c.ropeHeadDim / 2;
    const ids = seq.tokens.view(p0, p1);
    const idsBig = new BigInt64Array(R);
    for (let r = 0; r < S; r++) idsBig[r] = BigInt(ids[r] as number);

    // the window rows before the chunk (positions [p0 - W + 1, p0) within the segment)
    const wtail = new Float32Array(L * (W - 1) * D);
    for (let l = 0; l < L; l++) {
      const ring = seq.windows[l];
      if (ring === undefined) throw new Csa2Error('runtime', `no window ring for layer ${l}`);
      for (let i = 0; i < W - 1; i++) {
        const pos = p0 - (W - 1) + i;
        if (pos < start) continue;
        const row = ring.get(pos);
        if (row === null) throw new Csa2Error('runtime', `layer ${l}: window row of position ${pos} is missing`);
        wtail.set(row, (l * (W - 1) + i) * D);
      }
    }
    const scalar = (v: number) => i64(BigInt64Array.of(BigInt(v)), [1]);
    const feeds: Record<string, HostTensor> = {
      ids: i64(idsBig, [R]),
      cos_p: f32(plain.cos, [R, half]),
      sin_p: f32(plain.sin, [R, half]),
      cos_c: f32(comp.cos, [R, half]),
      sin_c: f32(comp.sin, [R, half]),
      rows: scalar(S),
      p0: scalar(p0),
      seg_start: scalar(start),
      seg_end: scalar(end),
      keep_from: scalar(keepFrom - p0),
      tail_from: scalar(S - 1),
      tail_to: scalar(S - 1 + W),
      wtail: f32(wtail, [L, W - 1, D]),
    };
    // the KV sources' cached entries (those the chunk's rows may see), and where the chunk's own begin
    const entries = new Map<number, number>();
    for (const s of this.shape.sources) {
      const cache = seq.cache(s.layer);
      const P = Math.min(cache.entries, Math.floor(p1 / s.ratio));
      const from = P - p0 / s.ratio;
      feeds[`kv_${s.layer}`] = u8(cache.mainKv.range(0, P), [P, cache.mainKv.rowBytes]);
      feeds[`ik_${s.layer}`] = u8(cache.indexK.range(0, P), [P, cache.indexK.rowBytes]);
      feeds[`new_from_${s.layer}`] = scalar(from);
      entries.set(s.layer, P + Math.floor(R / s.ratio) - from);
      feeds[`entries_${s.layer}`] = i64(BigInt64Array.of(BigInt(entries.get(s.layer) as number)), []);
    }
    for (const s of [...this.shape.sources, this.shape.decoderSource]) {
      if (s.ratio > 1) feeds[`open_from_${s.layer}`] = scalar(Math.floor(S / s.ratio) * s.ratio);
    }
    for (const layer of this.shape.indexSources) {
      const e = this.plan.entries[layer] as LayerPlanEntry;
      const kk = Math.min(c.indexTopK, Math.floor(end / e.compressRatio));
      feeds[`k_${layer}`] = scalar(Math.min(kk, entries.get(e.kvSource as number) as number));
    }
    const out = (await this.graph.run(feeds)) as Readonly<Record<string, HostTensor>>;
    const get = (name: string): HostTensor => {
      const t = out[name];
      if (t === undefined) throw new Csa2Error('runtime', `graph encoder: no output ${name}`);
      return t;
    };

    // the caches as the layered path leaves them: new entries appended, the open group, the index-K slot
    for (const s of [...this.shape.sources, this.shape.decoderSource]) {
      const cache = seq.cache(s.layer);
      const m = s.ratio;
      const g0 = p0 / m;
      const G = Math.floor(S / m);
      const from = cache.entries - g0;
      if (from < G) {
        const kv = get(`kvnew_${s.layer}`).data as Uint8Array;
        const ik = get(`iknew_${s.layer}`).data as Uint8Array;
        cache.mainKv.append(kv.subarray(from * cache.mainKv.rowBytes, G * cache.mainKv.rowBytes));
        cache.indexK.append(ik.subarray(from * cache.indexK.rowBytes, G * cache.indexK.rowBytes));
      }
      const open = S - G * m;
      if (open > 0 && g0 + G >= cache.entries) {
        cache.pendingGroup = g0 + G;
        cache.pendingCount = open;
        cache.pendingKv.set((get(`pkv_${s.layer}`).data as Float32Array).subarray(0, open * D));
        cache.pendingScore.set((get(`pscore_${s.layer}`).data as Float32Array).subarray(0, open * D));
      }
    }
    seq.indexKSlot = this.shape.decoderSource.layer;

    // a graph opened with `topk` shows its lists to the observer as the layered path does: [S, kk], -1 past
    if (observer?.topk !== undefined) {
      for (const layer of this.shape.indexSources) {
        const t = out[`topk_${layer}`];
        if (t === undefined) continue;
        const m = (this.plan.entries[layer] as LayerPlanEntry).compressRatio;
        const kk = Math.min(c.indexTopK, Math.floor(end / m));
        const k = Math.min(kk, t.dims[1] as number);
        const lists = new Int32Array(S * kk).fill(-1);
        const width = t.dims[1] as number;
        for (let r = 0; r < S; r++) lists.set((t.data as Int32Array).subarray(r * width, r * width + k), r * kk);
        observer.topk(layer, p0, S, kk, lists);
      }
    }

    // the window rings: the rows of positions [p1 - W, p1) within the segment (the layered path's last W)
    const tails = get('wtail_out').data as Float32Array;
    for (let l = 0; l < L; l++) {
      const ring = seq.windows[l];
      if (ring === undefined) continue;
      for (let i = 0; i < W; i++) {
        const pos = p1 - W + i;
        if (pos >= Math.max(start, p0 - (W - 1))) ring.write(pos, tails.subarray((l * W + i) * D, (l * W + i + 1) * D));
      }
    }
    const X = get('X_keep').data as Float32Array;
    const pre = get('pre_keep').data as Float32Array;
    if (X.length !== keep * n * d || pre.length !== keep * n)
      throw new Csa2Error('runtime', `graph encoder: kept stream of ${X.length / (n * d)} rows, ${keep} asked`);
    return { X, pre };
  }
}
