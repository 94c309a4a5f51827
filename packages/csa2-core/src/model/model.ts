/**
 * @module model/model
 * The DeepSeek-V4.1 forward pass on onnxruntime: per-layer ONNX graphs (model/layer-graphs) driven by
 * TypeScript that owns the caches, the layer plan, the attention index layout and chunking.
 *
 * Forward entry points (all positions absolute):
 *   prefillExact  — the whole prompt through all layers as one segment, as the official code does;
 *   step          — one decode step through all layers;
 *   encode        — tokens through the encoder layers plus the first decoder KV source's compressor,
 *                   chunked anywhere with results identical to one-shot encoding; re-runs (replays) the
 *                   last R cached tokens to rebuild window state when appending to an encoded prefix;
 *   decoderReplay — the decoder layers over the last R tokens, rebuilding their sliding windows.
 *
 * Attention index layout. The sparse-attention kernel walks each query's index list in blocks of 64
 * with a running max, so the column layout affects bf16 rounding. A "segment" [start, end) uses the
 * reference prefill layout: min(end-start, window) window columns (positions from max(start, t-window+1)
 * upward, -1 past t) then min(topk, end/ratio) compressed columns; a decode "step" uses the reference
 * ring layout (window slots oldest first) then min(topk, (p+1)/ratio) columns. The layout depends on the
 * segment, never on how it is chunked, which is what makes chunked encoding identical to one-shot.
 */
import type { ModelConfig } from '../config/model-config.js';
import type { LayerPlan, LayerPlanEntry } from '../config/layer-plan.js';
import { Csa2Error, InputError } from '../errors.js';
import {
  openGraphSession,
  resolveIntraOpThreads,
  f32,
  i32,
  i64,
  bool,
  type GraphSession,
  type HostTensor,
  type RuntimeOptions,
  DEFAULT_RUNTIME_OPTIONS,
} from '../runtime/ort-session.js';
import { ATTENTION_BLOCK, type NumericsMode } from './graph-ops.js';
import {
  attentionColumns,
  buildAttentionGraph,
  buildAttnInGraph,
  buildAttnOutGraph,
  buildCompressGraph,
  buildHeadGraph,
  buildIndexerGraph,
  buildMoeGraph,
  type GraphContext,
  type WeightSource,
} from './layer-graphs.js';
import { ropeFrequencies, ropeRows } from './rope.js';
import { Sequence, type KvSourceCache } from './sequence.js';
import { hcSplitSinkhorn, type HcSplitParams } from './hc-sinkhorn.js';
import { moeGate, type MoeGateParams } from './moe-gate.js';

export interface ModelOptions {
  /** 'bf16' follows the reference's bf16 execution; 'fp32' is plain float32. @defaultValue 'bf16' */
  readonly numerics: NumericsMode;
  readonly runtime: RuntimeOptions;
  /** Token rows per forward chunk (prefill, encode, replay). @defaultValue 256 */
  readonly chunkTokens: number;
  /**
   * Upper bound on the float32 values live in one attention graph run (one block's gathered keys and the
   * accumulators, (64 + 3·heads)·head_dim per query row); longer chunks run in row blocks. @defaultValue 2^24
   */
  readonly attentionBudgetValues: number;
}

export const DEFAULT_MODEL_OPTIONS: ModelOptions = {
  numerics: 'bf16',
  runtime: DEFAULT_RUNTIME_OPTIONS,
  chunkTokens: 256,
  attentionBudgetValues: 1 << 24,
};

/** The residual stream of some rows entering a layer: X [rows, n, d] and the collapse mix pre [rows, n]. */
export interface StreamRows {
  readonly start: number;
  readonly rows: number;
  readonly X: Float32Array;
  readonly pre: Float32Array;
}

type Layout = { readonly kind: 'segment'; readonly start: number; readonly end: number } | { readonly kind: 'step' };

/** What one layer's indexer published for the rows of the current chunk. */
interface SharedSlots {
  topk: Int32Array | null;
  kk: number;
  candidates: Uint8Array | null;
}

interface LayerSessions {
  attnIn: GraphSession;
  attnOut: GraphSession;
  /** The layer's attention sink logits [H] (input of the shared attention graph). */
  sink: Float32Array;
  moe: GraphSession;
  /** hc_split_sinkhorn parameters of the attention and FFN mixes. */
  hcAttn: HcSplitParams;
  hcFfn: HcSplitParams;
  gate: MoeGateParams;
  compress: GraphSession | null;
  indexer: GraphSession | null;
}

/** Observes forward progress (tokens done of total) for long encodes. */
export type ProgressCallback = (done: number, total: number) => void;

/**
 * Taps on intermediate results, for parity tests and debugging (no effect on the computation):
 * each block's output stream, each indexer's top-k list (entry positions, -1 = none) and the
 * candidate mask, per chunk of rows starting at position p0.
 */
export interface ForwardObserver {
  layerOutput?(layer: number, p0: number, rows: number, X: Float32Array, pre: Float32Array): void;
  topk?(layer: number, p0: number, rows: number, kk: number, topk: Int32Array): void;
  candidates?(layer: number, p0: number, rows: number, width: number, mask: Uint8Array): void;
  /** The FFN input rows (bf16 values) and the experts the gate chose, with their weights. */
  routing?(layer: number, p0: number, rows: number, ffnInput: Float32Array, experts: Int32Array, weights: Float32Array): void;
}

export class Csa2Model {
  /** Optional taps on intermediate results (tests, debugging). */
  observer: ForwardObserver | null = null;

  private constructor(
    readonly config: ModelConfig,
    readonly plan: LayerPlan,
    readonly options: ModelOptions,
    private readonly embed: Float32Array,
    private readonly layers: LayerSessions[],
    private readonly head: GraphSession,
    private readonly compressOnly: GraphSession | null,
    /** Sparse attention, one session per layer kind shared by all layers: [window-only, window + compressed]. */
    private readonly attention: readonly [GraphSession, GraphSession],
    private readonly freqsPlain: Float32Array,
    private readonly freqsCompress: Float32Array,
  ) {}

  /** Builds every graph from the weights and opens the sessions. */
  static async create(config: ModelConfig, plan: LayerPlan, weights: WeightSource, options: Partial<ModelOptions> = {}): Promise<Csa2Model> {
    const opts: ModelOptions = { ...DEFAULT_MODEL_OPTIONS, ...options };
    const ctx: GraphContext = { config, weights, mode: opts.numerics };
    const threads = resolveIntraOpThreads(opts.runtime, config.dim);
    const open = (name: string, bytes: Uint8Array) => openGraphSession(name, bytes, opts.runtime, threads);
    const layers: LayerSessions[] = [];
    for (const e of plan.entries) {
      layers.push({
        attnIn: await open(`attn_in_${e.layer}`, buildAttnInGraph(ctx, e)),
        attnOut: await open(`attn_out_${e.layer}`, buildAttnOutGraph(ctx, e)),
        sink: weights.get(`layers.${e.layer}.attn.attn_sink`),
        moe: await open(`moe_${e.layer}`, buildMoeGraph(ctx, e)),
        hcAttn: hcSplitParams(config, weights, e.layer, 'attn'),
        hcFfn: hcSplitParams(config, weights, e.layer, 'ffn'),
        gate: {
          scoreFunc: config.scoreFunc,
          gateTemp: config.gateTemp,
          normTopKProb: config.normTopKProb,
          routeScale: config.routeScale,
          k: config.numActivatedExperts,
          bias: weights.get(`layers.${e.layer}.ffn.gate.bias`),
        },
        compress: e.isKvSource ? await open(`compress_${e.layer}`, buildCompressGraph(ctx, e)) : null,
        indexer: e.isIndexSource ? await open(`indexer_${e.layer}`, buildIndexerGraph(ctx, e)) : null,
      });
    }
    const head = await open('head', buildHeadGraph(ctx));
    const attention = [await open('attention_window', buildAttentionGraph(ctx, false)), await open('attention_compressed', buildAttentionGraph(ctx, true))] as const;
    const dec = plan.decoderStart;
    const compressOnly =
      dec === null ? null : await open(`attn_in_${dec}_compress`, buildAttnInGraph(ctx, plan.entries[dec] as LayerPlanEntry, { compressOnly: true }));
    const ropeDim = config.ropeHeadDim;
    const freqsPlain = ropeFrequencies({ ropeDim, base: config.ropeTheta, yarn: null });
    const freqsCompress = ropeFrequencies({
      ropeDim,
      base: config.compressRopeTheta,
      yarn:
        config.originalSeqLen > 0
          ? { originalSeqLen: config.originalSeqLen, factor: config.ropeFactor, betaFast: config.betaFast, betaSlow: config.betaSlow }
          : null,
    });
    return new Csa2Model(config, plan, opts, weights.get('embed.weight'), layers, head, compressOnly, attention, freqsPlain, freqsCompress);
  }

  async dispose(): Promise<void> {
    for (const l of this.layers) {
      for (const s of [l.attnIn, l.attnOut, l.moe, l.compress, l.indexer]) if (s !== null) await s.dispose();
    }
    await this.head.dispose();
    if (this.compressOnly !== null) await this.compressOnly.dispose();
    for (const s of this.attention) await s.dispose();
  }

  createSequence(): Sequence {
    const c = this.config;
    return new Sequence({
      numLayers: c.numLayers,
      window: c.windowSize,
      headDim: c.headDim,
      indexHeadDim: c.indexHeadDim,
      kvSources: this.plan.entries.filter((e) => e.isKvSource).map((e) => ({ layer: e.layer, ratio: e.compressRatio })),
    });
  }

  /** First decoder layer (the causal encoder–decoder split), or an error for schedules without one. */
  get decoderStart(): number {
    const d = this.plan.decoderStart;
    if (d === null) throw new Csa2Error('unsupported-feature', 'this layer schedule has no encoder–decoder split (no trailing ratio-1 layers led by a KV source)');
    return d;
  }

  private checkTokens(ids: readonly number[], seq: Sequence, what: string): void {
    if (ids.length === 0) throw new InputError(`${what}: no tokens`);
    const V = this.config.vocabSize;
    ids.forEach((id, i) => {
      if (!Number.isInteger(id) || id < 0 || id >= V) throw new InputError(`${what}: token id ${id} at index ${i} is outside the vocabulary [0, ${V})`);
    });
    if (seq.length + ids.length > this.config.maxSeqLen) {
      throw new InputError(`${what}: ${seq.length + ids.length} tokens exceed max_seq_len ${this.config.maxSeqLen}`);
    }
  }

  // ---------------------------------------------------------------- entry points

  /**
   * Runs one full chunk of placeholder tokens through every session (exact prefill, a decode step and,
   * with an encoder–decoder split, an encode) on throwaway sequences. A session's first run at a given
   * size grows its memory arena and touches the weights for the first time: at dim 1024 the first
   * 256-token chunk took ~3× as long as later ones. Serving processes call this before reporting ready
   * so that the first request does not pay for it. Returns the time taken in ms.
   */
  async warmUp(): Promise<number> {
    const t0 = performance.now();
    const n = Math.max(1, Math.min(this.options.chunkTokens, this.config.maxSeqLen - 1));
    const ids = Array.from({ length: n }, (_, i) => i % this.config.vocabSize);
    const seq = this.createSequence();
    await this.prefillExact(seq, ids);
    await this.step(seq, 0);
    if (this.plan.decoderStart !== null) await this.encode(this.createSequence(), ids, { replayTokens: 0, keepRows: 1 });
    return performance.now() - t0;
  }

  /** Exact prefill: the whole prompt through every layer as one segment (the official code's prefill). */
  async prefillExact(seq: Sequence, ids: readonly number[], onProgress?: ProgressCallback): Promise<Float32Array> {
    if (seq.length !== 0) throw new InputError('prefillExact needs an empty sequence');
    this.checkTokens(ids, seq, 'prompt');
    seq.tokens.push(...ids);
    const out = await this.runSegment(seq, { start: 0, end: ids.length }, [0, this.config.numLayers], null, 1, onProgress);
    return this.logits(out);
  }

  /** One decode step at position seq.length through all layers; returns the next-token logits. */
  async step(seq: Sequence, id: number): Promise<Float32Array> {
    this.checkTokens([id], seq, 'decode token');
    const p = seq.length;
    seq.tokens.push(id);
    const input = this.embedRows([id], p);
    const out = await this.runChunk(seq, { kind: 'step' }, p, p + 1, [0, this.config.numLayers], input, null);
    return this.logits(out);
  }

  /**
   * Encodes `ids` appended to the sequence through the encoder layers plus the first decoder KV source's
   * compressor. When the sequence already holds encoded tokens, the last `replayTokens` of them are run
   * again first (their global KV is reused, not recomputed) to rebuild sliding-window and compressor
   * state — encoder bounded replay. Returns the decoder-input stream of the last `keepRows` positions.
   */
  async encode(
    seq: Sequence,
    ids: readonly number[],
    opts: { replayTokens: number; keepRows: number; onProgress?: ProgressCallback },
  ): Promise<StreamRows> {
    if (ids.length > 0) this.checkTokens(ids, seq, 'encode');
    const dec = this.decoderStart;
    const prior = seq.length;
    seq.tokens.push(...ids);
    const start = Math.max(0, prior - Math.max(1, opts.replayTokens));
    const out = await this.runSegment(seq, { start, end: seq.length }, [0, dec], null, opts.keepRows, opts.onProgress, dec);
    return out;
  }

  /**
   * Runs the decoder layers over stream rows (normally the last R positions) as one segment, rebuilding
   * their windows; returns the logits after the last row.
   */
  async decoderReplay(seq: Sequence, stream: StreamRows): Promise<Float32Array> {
    const dec = this.decoderStart;
    if (stream.start + stream.rows !== seq.length) {
      throw new Csa2Error('runtime', `decoderReplay: stream rows end at ${stream.start + stream.rows}, sequence has ${seq.length} tokens`);
    }
    const out = await this.runSegment(seq, { start: stream.start, end: seq.length }, [dec, this.config.numLayers], stream, 1);
    return this.logits(out);
  }

  // ---------------------------------------------------------------- internals

  private async logits(last: StreamRows): Promise<Float32Array> {
    const { hcMult: n, dim: d } = this.config;
    const r = last.rows - 1;
    const X = last.X.subarray(r * n * d, (r + 1) * n * d);
    const pre = last.pre.subarray(r * n, (r + 1) * n);
    const out = await this.head.run({ X: f32(X, [1, n, d]), pre: f32(pre, [1, n]) });
    return (out['logits'] as HostTensor).data as Float32Array;
  }

  /** Layer-0 input for tokens at positions [start, start+ids.length): embedding rows copied into n streams. */
  private embedRows(ids: readonly number[], start: number): StreamRows {
    const { hcMult: n, dim: d } = this.config;
    const X = new Float32Array(ids.length * n * d);
    const pre = new Float32Array(ids.length * n);
    ids.forEach((id, r) => {
      const row = this.embed.subarray(id * d, (id + 1) * d);
      for (let j = 0; j < n; j++) X.set(row, (r * n + j) * d);
      pre[r * n] = 1;
    });
    return { start, rows: ids.length, X, pre };
  }

  /**
   * Runs rows [seg.start, seg.end) through layers [l0, l1) in chunks. `input` is the stream entering l0
   * (null: embed the tokens). `compressLayer` additionally extends that layer's KV-source cache from the
   * output stream (encode mode). Returns the output stream of the last `keepRows` rows.
   */
  private async runSegment(
    seq: Sequence,
    seg: { start: number; end: number },
    [l0, l1]: [number, number],
    input: StreamRows | null,
    keepRows: number,
    onProgress?: ProgressCallback,
    compressLayer?: number,
  ): Promise<StreamRows> {
    const { hcMult: n, dim: d } = this.config;
    const layout: Layout = { kind: 'segment', start: seg.start, end: seg.end };
    const total = seg.end - seg.start;
    const keep = Math.min(Math.max(keepRows, 1), total);
    const keepStart = seg.end - keep;
    const keptX = new Float32Array(keep * n * d);
    const keptPre = new Float32Array(keep * n);
    for (let p0 = seg.start; p0 < seg.end; p0 += this.options.chunkTokens) {
      const p1 = Math.min(seg.end, p0 + this.options.chunkTokens);
      let rows: StreamRows;
      if (input === null) rows = this.embedRows(seq.tokens.slice(p0, p1), p0);
      else {
        const a = p0 - input.start;
        rows = { start: p0, rows: p1 - p0, X: input.X.subarray(a * n * d, (a + p1 - p0) * n * d), pre: input.pre.subarray(a * n, (a + p1 - p0) * n) };
      }
      const out = await this.runChunk(seq, layout, p0, p1, [l0, l1], rows, compressLayer ?? null);
      // keep the tail rows the caller asked for
      const from = Math.max(p0, keepStart);
      if (from < p1) {
        keptX.set(out.X.subarray((from - p0) * n * d, (p1 - p0) * n * d), (from - keepStart) * n * d);
        keptPre.set(out.pre.subarray((from - p0) * n, (p1 - p0) * n), (from - keepStart) * n);
      }
      onProgress?.(p1 - seg.start, total);
    }
    return { start: keepStart, rows: keep, X: keptX, pre: keptPre };
  }

  /** Rows [p0, p1) through layers [l0, l1). */
  private async runChunk(
    seq: Sequence,
    layout: Layout,
    p0: number,
    p1: number,
    [l0, l1]: [number, number],
    input: StreamRows,
    compressLayer: number | null,
  ): Promise<StreamRows> {
    const shared: SharedSlots = { topk: null, kk: 0, candidates: null };
    // the chunk's RoPE rows, computed once per table (plain, compress) and shared by every layer
    const positions = Int32Array.from({ length: p1 - p0 }, (_, i) => p0 + i);
    const ropes = new Map<boolean, { cos: HostTensor; sin: HostTensor }>();
    const ropeOf = (e: LayerPlanEntry) => {
      const key = e.compressRatio > 0;
      let r = ropes.get(key);
      if (r === undefined) ropes.set(key, (r = this.ropeFor(e, positions)));
      return r;
    };
    let X = input.X;
    let pre = input.pre;
    for (let l = l0; l < l1; l++) {
      const e = this.plan.entries[l] as LayerPlanEntry;
      const out = await this.runLayer(seq, e, layout, p0, p1, X, pre, shared, ropeOf(e));
      X = out.X;
      pre = out.pre;
      this.observer?.layerOutput?.(l, p0, p1 - p0, X, pre);
    }
    if (compressLayer !== null) {
      const e = this.plan.entries[compressLayer] as LayerPlanEntry;
      const S = p1 - p0;
      const { hcMult: n, dim: d } = this.config;
      const res = await (this.compressOnly as GraphSession).run({ X: f32(X, [S, n, d]), pre: f32(pre, [S, n]) });
      await this.compressRows(seq, e, p0, p1, res);
      this.publishIndexK(seq, e, { kind: 'segment', start: p0, end: p1 }, p0);
    }
    return { start: p0, rows: p1 - p0, X, pre };
  }

  private ropeFor(e: LayerPlanEntry, positions: ArrayLike<number>): { cos: HostTensor; sin: HostTensor } {
    const freqs = e.compressRatio > 0 ? this.freqsCompress : this.freqsPlain;
    const { cos, sin } = ropeRows(freqs, positions);
    const dims = [positions.length, freqs.length];
    return { cos: f32(cos, dims), sin: f32(sin, dims) };
  }

  private async runLayer(
    seq: Sequence,
    e: LayerPlanEntry,
    layout: Layout,
    p0: number,
    p1: number,
    X: Float32Array,
    pre: Float32Array,
    shared: SharedSlots,
    rope: { cos: HostTensor; sin: HostTensor },
  ): Promise<{ X: Float32Array; pre: Float32Array }> {
    const c = this.config;
    const { hcMult: n, dim: d, headDim: D } = c;
    const S = p1 - p0;
    const sessions = this.layers[e.layer] as LayerSessions;
    const a = await sessions.attnIn.run({ X: f32(X, [S, n, d]), pre: f32(pre, [S, n]), cos: rope.cos, sin: rope.sin });

    // 1. the KV source compresses this chunk's completed groups before anyone attends (csa2 §3.4)
    if (e.isKvSource) {
      await this.compressRows(seq, e, p0, p1, a);
      this.publishIndexK(seq, e, layout, p0);
    }

    // 2. top-k compressed positions: own indexer (Full/Reindex) or the latest source's list (Reuse)
    const m = e.compressRatio;
    if (e.isIndexSource) await this.runIndexer(seq, e, layout, p0, p1, a, shared);

    // 3. window rows + index layout
    const ring = seq.windows[e.layer];
    if (ring === undefined) throw new Error(`no window ring for layer ${e.layer}`);
    const kvw = (a['kvw'] as HostTensor).data as Float32Array;
    const C = attentionColumns(c, m);
    let wkv: Float32Array;
    let Wc: number;
    let widx: Int32Array;
    if (layout.kind === 'step') {
      ring.write(p0, kvw);
      wkv = ring.rows;
      Wc = c.windowSize;
      widx = new Int32Array(Wc);
      const oldest = (p0 % Wc) + 1;
      for (let col = 0; col < Wc; col++) {
        const slot = (oldest + col) % Wc;
        widx[col] = (ring.positions[slot] as number) >= 0 ? slot : -1;
      }
    } else {
      const win = c.windowSize;
      const first = Math.max(layout.start, p0 - win + 1);
      wkv = new Float32Array((p1 - first) * D);
      for (let pos = first; pos < p0; pos++) {
        const row = ring.get(pos);
        if (row === null) throw new Csa2Error('runtime', `layer ${e.layer}: window row of position ${pos} is missing`);
        wkv.set(row, (pos - first) * D);
      }
      wkv.set(kvw, (p0 - first) * D);
      Wc = Math.min(layout.end - layout.start, win);
      widx = new Int32Array(S * Wc);
      for (let r = 0; r < S; r++) {
        const t = p0 + r;
        const lo = Math.max(layout.start, t - win + 1);
        for (let col = 0; col < Wc; col++) {
          const pos = lo + col;
          widx[r * Wc + col] = pos <= t ? pos - first : -1;
        }
      }
      for (let r = Math.max(0, S - win); r < S; r++) ring.write(p0 + r, kvw.subarray(r * D, (r + 1) * D));
    }
    if (Wc > C) throw new Error(`window columns ${Wc} exceed attention columns ${C}`);
    if (m === 0 && Wc < C) {
      // the attention graph walks C columns in blocks of 64; a window-only layer pads its list with -1
      // (no key) columns, which leave the blocked softmax bit-identical (p = 0 adds exact zeros)
      const padded = new Int32Array(S * C).fill(-1);
      for (let r = 0; r < S; r++) padded.set(widx.subarray(r * Wc, (r + 1) * Wc), r * C);
      widx = padded;
      Wc = C;
    }

    // one key table per chunk: [compressed entries of the KV source | window rows]; idx holds the
    // reference's column order (window columns, then the top-k entries) as rows of that table
    let kv = wkv;
    let idx = widx;
    if (m > 0) {
      const src = seq.cache(e.kvSource as number);
      const Nc = src.entries;
      kv = src.mainKv.withTrailing(wkv);
      idx = new Int32Array(S * C).fill(-1);
      const kk = shared.kk;
      const topk = shared.topk as Int32Array;
      for (let r = 0; r < S; r++) {
        const o = r * C;
        for (let col = 0; col < Wc; col++) {
          const w = widx[r * Wc + col] as number;
          idx[o + col] = w >= 0 ? Nc + w : -1;
        }
        for (let j = 0; j < kk; j++) idx[o + Wc + j] = topk[r * kk + j] as number;
      }
    }
    const feeds: Record<string, HostTensor> = {
      q: a['q'] as HostTensor,
      kv: f32(kv, [kv.length / D, D]),
      sink: f32(sessions.sink, [c.numHeads]),
    };
    const aMix = hcSplitSinkhorn((a['a_mix'] as HostTensor).data as Float32Array, sessions.hcAttn);
    const att = await this.runAttention(this.attention[m > 0 ? 1 : 0], feeds, S, C, idx);
    const attn = await sessions.attnOut.run({
      att,
      X: f32(X, [S, n, d]),
      a_pre: f32(aMix.pre, [S, n]),
      a_post: f32(aMix.post, [S, n]),
      a_comb: f32(aMix.comb, [S, n, n]),
      cos: rope.cos,
      sin: rope.sin,
    });

    // 4. MoE: group rows by expert (ascending expert id, rows ascending), then experts + shared + hc_post
    const { experts, weights } = moeGate((attn['gate_logits'] as HostTensor).data as Float32Array, sessions.gate);
    this.observer?.routing?.(e.layer, p0, S, (attn['xf'] as HostTensor).data as Float32Array, experts, weights);
    const k = c.numActivatedExperts;
    const E = c.numRoutedExperts;
    const rowsOf: number[][] = Array.from({ length: E }, () => []);
    const wOf: number[][] = Array.from({ length: E }, () => []);
    for (let r = 0; r < S; r++) {
      for (let j = 0; j < k; j++) {
        const ex = experts[r * k + j] as number;
        (rowsOf[ex] as number[]).push(r);
        (wOf[ex] as number[]).push(weights[r * k + j] as number);
      }
    }
    const fMix = hcSplitSinkhorn((attn['f_mix'] as HostTensor).data as Float32Array, sessions.hcFfn);
    const moeFeeds: Record<string, HostTensor> = {
      xf: attn['xf'] as HostTensor,
      X1: attn['X1'] as HostTensor,
      f_post: f32(fMix.post, [S, n]),
      f_comb: f32(fMix.comb, [S, n, n]),
    };
    for (let ex = 0; ex < E; ex++) {
      const rws = rowsOf[ex] as number[];
      // rows ascending within an expert: sort (a token appears at most once per expert)
      const order = rws.map((_, i) => i).sort((x, y) => (rws[x] as number) - (rws[y] as number));
      moeFeeds[`rows_${ex}`] = i64(BigInt64Array.from(order.map((i) => BigInt(rws[i] as number))), [rws.length]);
      moeFeeds[`w_${ex}`] = f32(Float32Array.from(order.map((i) => (wOf[ex] as number[])[i] as number)), [rws.length, 1]);
    }
    const moe = await sessions.moe.run(moeFeeds);
    return { X: (moe['X2'] as HostTensor).data as Float32Array, pre: fMix.pre };
  }

  /** The shared attention graph over row blocks small enough for the attention memory budget; `att` [S, H, D]. */
  private async runAttention(session: GraphSession, feeds: Record<string, HostTensor>, S: number, C: number, idx: Int32Array): Promise<HostTensor> {
    const { numHeads: H, headDim: D } = this.config;
    // live per row while one block runs: its gathered keys [64, D] and ~3 [H, D] accumulators
    const block = Math.max(1, Math.floor(this.options.attentionBudgetValues / ((ATTENTION_BLOCK + 3 * H) * D)));
    if (block >= S) return (await session.run({ ...feeds, idx: i32(idx, [S, C]) }))['att'] as HostTensor;
    const q = (feeds['q'] as HostTensor).data as Float32Array;
    const att = new Float32Array(S * H * D);
    for (let r0 = 0; r0 < S; r0 += block) {
      const r1 = Math.min(S, r0 + block);
      const out = await session.run({ ...feeds, q: f32(q.subarray(r0 * H * D, r1 * H * D), [r1 - r0, H, D]), idx: i32(idx.subarray(r0 * C, r1 * C), [r1 - r0, C]) });
      att.set((out['att'] as HostTensor).data as Float32Array, r0 * H * D);
    }
    return f32(att, [S, H, D]);
  }

  /** Feeds this chunk's compressor inputs into the KV source's groups; completed groups become cache rows. */
  private async compressRows(seq: Sequence, e: LayerPlanEntry, p0: number, p1: number, a: Record<string, HostTensor>): Promise<void> {
    const cache = seq.cache(e.layer);
    const m = e.compressRatio;
    const D = this.config.headDim;
    const firstNew = Math.max(p0, cache.entries * m); // rows of groups already cached are not recomputed
    if (firstNew >= p1) return;
    const groups: number[] = [];
    const kvParts: Float32Array[] = [];
    const scoreParts: Float32Array[] = [];
    if (m === 1) {
      const latent = (a['latent'] as HostTensor).data as Float32Array;
      for (let t = firstNew; t < p1; t++) groups.push(t);
      kvParts.push(latent.subarray((firstNew - p0) * D, (p1 - p0) * D));
    } else {
      const ckv = (a['ckv'] as HostTensor).data as Float32Array;
      const cscore = (a['cscore'] as HostTensor).data as Float32Array;
      for (let t = firstNew; t < p1; t++) {
        const grp = Math.floor(t / m);
        const slot = t % m;
        if (slot === 0) {
          cache.pendingGroup = grp;
          cache.pendingCount = 0;
        }
        if (cache.pendingGroup !== grp || cache.pendingCount !== slot) {
          throw new Csa2Error('runtime', `layer ${e.layer}: compressor group ${grp} is missing its first ${slot} row(s) (replay must start at a group boundary)`);
        }
        cache.pendingKv.set(ckv.subarray((t - p0) * D, (t - p0 + 1) * D), slot * D);
        cache.pendingScore.set(cscore.subarray((t - p0) * D, (t - p0 + 1) * D), slot * D);
        cache.pendingCount++;
        if (cache.pendingCount === m) {
          groups.push(grp);
          kvParts.push(cache.pendingKv.slice());
          scoreParts.push(cache.pendingScore.slice());
          cache.pendingGroup = -1;
          cache.pendingCount = 0;
        }
      }
    }
    if (groups.length === 0) return;
    if (groups[0] !== cache.entries) throw new Csa2Error('runtime', `layer ${e.layer}: compressed entry ${groups[0]} does not follow ${cache.entries}`);
    const G = groups.length;
    const rope = this.ropeFor(e, groups.map((j) => j * m));
    const feeds: Record<string, HostTensor> = { cos: rope.cos, sin: rope.sin };
    if (m === 1) feeds['latent'] = f32(concat(kvParts), [G, D]);
    else {
      feeds['gkv'] = f32(concat(kvParts), [G, m, D]);
      feeds['gscore'] = f32(concat(scoreParts), [G, m, D]);
    }
    const out = await (this.layers[e.layer] as LayerSessions).compress!.run(feeds);
    cache.mainKv.append((out['ckv'] as HostTensor).data as Float32Array);
    cache.indexK.append((out['ik'] as HostTensor).data as Float32Array);
  }

  /**
   * The reference publishes a KV source's index-K cache when its compressor returns a latent: in a
   * prefill segment whenever the call has at least one full group (equivalently, always, for the
   * readers that run), in a decode step only when the step completes a group.
   */
  private publishIndexK(seq: Sequence, e: LayerPlanEntry, layout: Layout, p0: number): void {
    if (layout.kind === 'segment' || (p0 + 1) % e.compressRatio === 0) seq.indexKSlot = e.layer;
  }

  private async runIndexer(seq: Sequence, e: LayerPlanEntry, layout: Layout, p0: number, p1: number, a: Record<string, HostTensor>, shared: SharedSlots): Promise<void> {
    const c = this.config;
    const m = e.compressRatio;
    const S = p1 - p0;
    const callEnd = layout.kind === 'step' ? p0 + 1 : layout.end;
    const kk = Math.min(c.indexTopK, Math.floor(callEnd / m));
    shared.kk = kk;
    if (kk === 0) {
      shared.topk = new Int32Array(0);
      return;
    }
    if (seq.indexKSlot === null) throw new Csa2Error('runtime', `layer ${e.layer}: no index keys were published`);
    const src: KvSourceCache = seq.cache(seq.indexKSlot);
    const nVis = Math.floor(p1 / m);
    if (src.entries < nVis) {
      throw new Csa2Error('runtime', `layer ${e.layer}: index keys of layer ${src.layer} cover ${src.entries} entries, ${nVis} needed`);
    }
    const clen = Int32Array.from({ length: S }, (_, r) => Math.floor((p0 + r + 1) / m));
    const feeds: Record<string, HostTensor> = {
      iq: a['iq'] as HostTensor,
      iw: a['iw'] as HostTensor,
      K: f32(src.indexK.view(nVis), [nVis, c.indexHeadDim]),
      clen: i32(clen, [S, 1]),
      kk: i32(Int32Array.of(kk), [1]),
    };
    if (e.usesCandidates) {
      if (shared.candidates === null) throw new Csa2Error('runtime', `layer ${e.layer}: no candidate blocks were published`);
      feeds['cand_in'] = bool(shared.candidates, [S, nVis]);
    }
    const out = await (this.layers[e.layer] as LayerSessions).indexer!.run(feeds);
    shared.topk = (out['topk'] as HostTensor).data as Int32Array;
    this.observer?.topk?.(e.layer, p0, S, kk, shared.topk);
    if (e.isCandidateSource) {
      shared.candidates = (out['cand'] as HostTensor).data as Uint8Array;
      this.observer?.candidates?.(e.layer, p0, S, nVis, shared.candidates);
    }
  }
}

function hcSplitParams(c: ModelConfig, w: WeightSource, layer: number, which: 'attn' | 'ffn'): HcSplitParams {
  return {
    n: c.hcMult,
    iters: c.hcSinkhornIters,
    eps: c.hcEps,
    scale: w.get(`layers.${layer}.hc_${which}_scale`),
    base: w.get(`layers.${layer}.hc_${which}_base`),
  };
}

function concat(parts: readonly Float32Array[]): Float32Array {
  const n = parts.reduce((s, p) => s + p.length, 0);
  const out = new Float32Array(n);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}
