/**
 * @module model/model
 * The DeepSeek-V4.1 model on onnxruntime: per-layer ONNX graphs (model/model-graphs) driven by
 * TypeScript that owns the caches, the layer plan, the attention index layout, chunking and batching.
 *
 * `forward(spans)` is the one compute entry point: a batch of spans from different sequences (decode
 * steps, exact-prefill, encode and decoder-replay chunks) in one pass through the layers (model/forward,
 * model/sequence/span). The single-sequence entry points below are built on it (all positions absolute):
 *   prefillExact  — the whole prompt through all layers as one segment, as the official code does;
 *   step          — one decode step through all layers;
 *   encode        — tokens through the encoder layers plus the first decoder KV source's compressor,
 *                   chunked anywhere with results identical to one-shot encoding; re-runs (replays) the
 *                   last R cached tokens to rebuild window state when appending to an encoded prefix;
 *   decoderReplay — the decoder layers over the last R tokens, rebuilding their sliding windows.
 */
import type { ModelConfig } from '../config/model-config.js';
import type { LayerPlan } from '../config/layer-plan.js';
import { Csa2Error, InputError } from '../errors.js';
import { DEFAULT_RUNTIME_OPTIONS, type RuntimeOptions } from '../runtime/ort-session.js';
import type { NumericsMode } from './graphs/graph-ops.js';
import type { WeightSource } from './graphs/context.js';
import { AttentionScratch } from './attention/attention.js';
import { forward, ropeTensors, type ForwardContext } from './forward.js';
import { poolKeyCacheOf, type PoolKeyCache } from './indexer/indexer-pool.js';
import { disposeModelGraphs, openModelGraphs, type IndexerScores, type ModelGraphs } from './model-graphs.js';
import { ropeFrequencies } from './attention/rope.js';
import { resolveScanThreads } from './indexer/scan-threads.js';
import { Sequence } from './sequence/sequence.js';
import type { ForwardObserver, LayerTimer, ProgressCallback, Span, SpanOutput, StreamRows } from './sequence/span.js';

/** Bounded replay: the decoder (and, on a stored prefix, the encoder) re-run the last R tokens (the report's 128). */
export const DEFAULT_REPLAY_TOKENS = 128;

export interface ModelOptions {
  /**
   * How encode chunks run: through the layers, one graph run per layer step with TypeScript between
   * ('layers': the exact reference path, the CPU's), or the whole encoder as one graph run per chunk
   * ('graph': model/encoder/graph-encoder, for the CUDA provider, where it moves only packed state across
   * the bus); `{ topk: true }` is 'graph' with the index lists shown to the observer (tests).
   * @defaultValue 'layers'
   */
  readonly encoder: 'layers' | 'graph' | { readonly topk: true };
  /**
   * Where the hyper-connections' Sinkhorn split runs: in TypeScript (model/hc/hc-sinkhorn; the CPU's
   * exact path, cheapest for decode steps) or inside the attnIn/attnOut graphs (GraphOps.hcSplitSinkhorn;
   * for the CUDA provider's prefill spans of thousands of rows). @defaultValue 'typescript'
   */
  readonly sinkhorn: 'typescript' | 'graph';
  /** 'bf16' follows the reference's bf16 execution; 'fp32' is plain float32. @defaultValue 'bf16' */
  readonly numerics: NumericsMode;
  readonly runtime: RuntimeOptions;
  /** Token rows per forward chunk of the single-sequence entry points (prefill, encode, replay). @defaultValue 256 */
  readonly chunkTokens: number;
  /**
   * Upper bound on the float32 values live in one attention graph run (per row one block of gathered keys
   * and ~3 [H, D] accumulators, plus the run's key table); bigger batches run in several. @defaultValue 2^24
   */
  readonly attentionBudgetValues: number;
  /** Upper bound on the scores one indexer run holds (rows × index heads × keys). @defaultValue 2^22 */
  readonly indexerBudgetValues: number;
  /**
   * Index keys one scan run unpacks and scores (a multiple of the candidate block size); longer scans
   * run chunk by chunk and merge the chunks' rankings, so their memory does not grow with the
   * context. @defaultValue 65536
   */
  readonly indexerKeyChunk: number;
  /**
   * Layers after the candidate source score only their candidate pool (true), or every visible entry
   * masked to it, as the official code does (false; the same lists, bit for bit, at a cost that grows
   * with the context). @defaultValue true
   */
  readonly indexerPool: boolean;
  /**
   * Where the indexer unpacks its keys, finishes the scores and picks: TypeScript around one shared
   * Gemm ('split', model/indexer/indexer-scores), or the ONNX graphs of every index layer ('graph': the FP4
   * unpack, scores, masks and TopK in the graph; the reference the split path is tested against, bit
   * for bit). @defaultValue 'split'
   */
  readonly indexerScores: IndexerScores;
  /**
   * Worker threads that take part of the long index scans (model/indexer/scan-threads; the split scorer's fused
   * kernel only): a count, or 'auto' = min(3, cores − 1). Each holds ~12 MB. The same lists, bit for
   * bit, with any count. @defaultValue 'auto'
   */
  readonly scanThreads: number | 'auto';
}

/** Csa2Model.scanThreads. */
export interface ScanThreadsState {
  readonly count: number;
  readonly usable: boolean;
  readonly failure: string | null;
  readonly tasks: number;
  readonly declined: number;
  readonly failed: number;
}

export const DEFAULT_MODEL_OPTIONS: ModelOptions = {
  numerics: 'bf16',
  runtime: DEFAULT_RUNTIME_OPTIONS,
  chunkTokens: 256,
  attentionBudgetValues: 1 << 24,
  indexerBudgetValues: 1 << 22,
  indexerKeyChunk: 65536,
  indexerPool: true,
  indexerScores: 'split',
  scanThreads: 'auto',
  sinkhorn: 'typescript',
  encoder: 'layers',
};

export class Csa2Model {
  /** Optional taps on intermediate results (tests, debugging). */
  observer: ForwardObserver | null = null;
  /** Optional per-layer-kind timing of forward calls (benchmarks). */
  timer: LayerTimer | null = null;
  private readonly attentionScratch = new AttentionScratch();

  private constructor(
    readonly config: ModelConfig,
    readonly plan: LayerPlan,
    readonly options: ModelOptions,
    private readonly embed: Float32Array,
    private readonly graphs: ModelGraphs,
    private readonly freqsPlain: Float32Array,
    private readonly freqsCompress: Float32Array,
  ) {}

  /** Builds every graph from the weights and opens the sessions. */
  static async create(config: ModelConfig, plan: LayerPlan, weights: WeightSource, options: Partial<ModelOptions> = {}): Promise<Csa2Model> {
    const opts: ModelOptions = { ...DEFAULT_MODEL_OPTIONS, ...options };
    for (const k of ['chunkTokens', 'attentionBudgetValues', 'indexerBudgetValues', 'indexerKeyChunk'] as const) {
      if (!(Number.isInteger(opts[k]) && opts[k] >= 1)) throw new Csa2Error('config-invalid', `model option ${k} must be a positive integer, got ${opts[k]}`);
    }
    const enc = opts.encoder;
    if (!(enc === 'layers' || enc === 'graph' || (typeof enc === 'object' && enc !== null && enc.topk === true))) {
      throw new Csa2Error('config-invalid', `model option encoder must be 'layers' or 'graph', got ${JSON.stringify(enc)}`);
    }
    const bs = Math.max(1, config.candidateBlockSize);
    if (opts.indexerKeyChunk % bs !== 0 || opts.indexerKeyChunk < 2) {
      throw new Csa2Error(
        'config-invalid',
        `model option indexerKeyChunk (${opts.indexerKeyChunk}) must be a multiple of candidate_block_size (${bs}) and at least 2`,
      );
    }
    const graphs = await openModelGraphs(config, plan, weights, {
      numerics: opts.numerics,
      runtime: opts.runtime,
      sinkhornInGraph: opts.sinkhorn === 'graph',
      indexerPool: opts.indexerPool,
      indexerScores: opts.indexerScores,
      scanThreads: resolveScanThreads(opts.scanThreads),
      encoderGraph: opts.encoder === 'layers' ? false : opts.encoder === 'graph' ? true : { topk: true },
      encoderChunkTokens: opts.chunkTokens,
    });
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
    return new Csa2Model(config, plan, opts, weights.get('embed.weight'), graphs, freqsPlain, freqsCompress);
  }

  async dispose(): Promise<void> {
    await disposeModelGraphs(this.graphs);
  }

  /**
   * The scan threads (ModelOptions.scanThreads): how many, whether scans still use them (none failed;
   * `failure` says why not), and the tasks they ran, declined and lost; null without any (0, or the
   * graph scorer).
   */
  get scanThreads(): ScanThreadsState | null {
    const t = this.graphs.indexScorer?.threads ?? null;
    if (t === null) return null;
    return { count: t.count, usable: t.usable, failure: t.failed?.message ?? null, ...t.stats };
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

  /** The split indexer's runs by path (the fused kernel, the Gemm); null with indexerScores 'graph'. */
  get indexScorerRuns(): { readonly fused: number; readonly gemm: number } | null {
    return this.graphs.indexScorer?.runs ?? null;
  }

  /** Bytes of gathered pool keys the split indexer holds (model/indexer/indexer-pool POOL_KEY_CACHE_BYTES): 0 between forward calls. */
  get poolKeyBytes(): number {
    return this.poolKeys()?.heldBytes ?? 0;
  }

  /** The split indexer's pool key cache (null with the graph scorer). */
  private poolKeys(): PoolKeyCache | null {
    const scorer = this.graphs.indexScorer;
    return scorer === null ? null : poolKeyCacheOf(scorer);
  }

  /**
   * The rows of the cells encode segments are cut into from their start, so that they run the same
   * chunks however steps are budgeted: the one-graph encoder's rows (ModelOptions.encoder 'graph'); on
   * another provider than the CPU the layered path's chunk (its products' shapes, and so their bits,
   * follow the chunks); null on the CPU's layered path, whose bits do not depend on the chunks.
   */
  get encodeGrid(): number | null {
    const graph = this.graphs.encoder?.rows;
    if (graph !== undefined) return graph;
    return this.options.runtime.executionProvider === 'cpu' ? null : this.options.chunkTokens;
  }

  /**
   * The name of this model's encoder in artifact layouts (entered into every chunk key): what its bits
   * depend on. See encoderLayoutName.
   */
  get encoderName(): string {
    return encoderLayoutName(this.options.runtime.executionProvider, this.graphs.encoder !== null ? 'graph' : 'layers', this.encodeGrid);
  }

  /** First decoder layer (the causal encoder–decoder split), or an error for schedules without one. */
  get decoderStart(): number {
    const d = this.plan.decoderStart;
    if (d === null)
      throw new Csa2Error('unsupported-feature', 'this layer schedule has no encoder–decoder split (no trailing ratio-1 layers led by a KV source)');
    return d;
  }

  /** Checks ids for the vocabulary and the context before they are appended to `seq`. */
  checkTokens(ids: ArrayLike<number>, seq: Sequence, what: string): void {
    if (ids.length === 0) throw new InputError(`${what}: no tokens`);
    const V = this.config.vocabSize;
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i] as number;
      if (!Number.isInteger(id) || id < 0 || id >= V) throw new InputError(`${what}: token id ${id} at index ${i} is outside the vocabulary [0, ${V})`);
    }
    if (seq.length + ids.length > this.config.maxSeqLen) {
      throw new InputError(`${what}: ${seq.length + ids.length} tokens exceed max_seq_len ${this.config.maxSeqLen}`);
    }
  }

  /** Runs a batch of spans from distinct sequences in one forward call (model/forward). */
  async forward(spans: readonly Span[]): Promise<SpanOutput[]> {
    try {
      return await forward(this.context(), spans);
    } finally {
      this.attentionScratch.trim();
      // the gathered pool keys are of this call's rows (see POOL_KEY_CACHE_BYTES)
      this.poolKeys()?.clear();
    }
  }

  private context(): ForwardContext {
    const o = this.options;
    return {
      config: this.config,
      plan: this.plan,
      graphs: this.graphs,
      observer: this.observer,
      timer: this.timer,
      attentionBudgetValues: o.attentionBudgetValues,
      attentionScratch: this.attentionScratch,
      indexerBudgetValues: o.indexerBudgetValues,
      indexerKeyChunk: o.indexerKeyChunk,
      embed: this.embed,
      freqsPlain: this.freqsPlain,
      freqsCompress: this.freqsCompress,
      compressRope: (positions) => ropeTensors(this.freqsCompress, positions),
    };
  }

  // ---------------------------------------------------------------- single-sequence entry points

  /**
   * Runs one full chunk of placeholder tokens through every session (exact prefill, a decode step and,
   * with an encoder–decoder split, an encode) on throwaway sequences. A session's first run at a given
   * size grows its memory arena and touches the weights for the first time: at dim 1024 the first
   * 256-token chunk took ~3× as long as later ones. Serving processes call this before reporting ready
   * so that the first request does not pay for it. Returns the time taken in ms.
   */
  async warmUp(): Promise<number> {
    const t0 = performance.now();
    // the scan threads first: their memory counts in a warm process's size, and their start is paid here
    await this.graphs.indexScorer?.warmThreads();
    const n = Math.max(1, Math.min(this.options.chunkTokens, this.config.maxSeqLen - 1));
    const ids = Int32Array.from({ length: n }, (_, i) => i % this.config.vocabSize);
    const seq = this.createSequence();
    await this.prefillExact(seq, ids);
    await this.step(seq, 0);
    if (this.plan.decoderStart !== null) await this.encode(this.createSequence(), ids, { replayTokens: 0, keepRows: 1 });
    return performance.now() - t0;
  }

  /** Exact prefill: the whole prompt through every layer as one segment (the official code's prefill). */
  async prefillExact(seq: Sequence, ids: ArrayLike<number>, onProgress?: ProgressCallback): Promise<Float32Array> {
    if (seq.length !== 0) throw new InputError('prefillExact needs an empty sequence');
    this.checkTokens(ids, seq, 'prompt');
    seq.tokens.append(ids);
    const out = await this.runSegment(seq, { start: 0, end: ids.length }, [0, this.config.numLayers], null, 1, { onProgress, logits: true });
    return out.logits as Float32Array;
  }

  /** One decode step at position seq.length through all layers; returns the next-token logits. */
  async step(seq: Sequence, id: number): Promise<Float32Array> {
    this.checkTokens([id], seq, 'decode token');
    const p = seq.length;
    seq.tokens.push(id);
    const [out] = await this.forward([{ seq, layout: { kind: 'step' }, p0: p, p1: p + 1, l0: 0, l1: this.config.numLayers, input: null, logits: true }]);
    return out?.logits as Float32Array;
  }

  /**
   * Encodes `ids` appended to the sequence through the encoder layers plus the first decoder KV source's
   * compressor. When the sequence already holds encoded tokens, the last `replayTokens` of them are run
   * again first (their global KV is reused, not recomputed) to rebuild sliding-window and compressor
   * state — encoder bounded replay. Returns the decoder-input stream of the last `keepRows` positions.
   */
  async encode(seq: Sequence, ids: ArrayLike<number>, opts: { replayTokens: number; keepRows: number; onProgress?: ProgressCallback }): Promise<StreamRows> {
    if (ids.length > 0) this.checkTokens(ids, seq, 'encode');
    const dec = this.decoderStart;
    const prior = seq.length;
    seq.tokens.append(ids);
    const start = Math.max(0, prior - Math.max(1, opts.replayTokens));
    const out = await this.runSegment(seq, { start, end: seq.length }, [0, dec], null, opts.keepRows, { onProgress: opts.onProgress, compressAtEnd: true });
    return out.stream;
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
    const out = await this.runSegment(seq, { start: stream.start, end: seq.length }, [dec, this.config.numLayers], stream, 1, { logits: true });
    return out.logits as Float32Array;
  }

  /**
   * Runs rows [seg.start, seg.end) through layers [l0, l1) in chunks of `chunkTokens`. `input` is the
   * stream entering l0 (null: embed the tokens). Returns the output stream of the last `keepRows` rows
   * and, when asked, the logits after the last row.
   */
  private async runSegment(
    seq: Sequence,
    seg: { start: number; end: number },
    [l0, l1]: [number, number],
    input: StreamRows | null,
    keepRows: number,
    opts: { onProgress?: ProgressCallback | undefined; compressAtEnd?: boolean; logits?: boolean },
  ): Promise<{ stream: StreamRows; logits: Float32Array | null }> {
    const { hcMult: n, dim: d } = this.config;
    const total = seg.end - seg.start;
    const keep = Math.min(Math.max(keepRows, 1), total);
    const keepStart = seg.end - keep;
    const keptX = new Float32Array(keep * n * d);
    const keptPre = new Float32Array(keep * n);
    let logits: Float32Array | null = null;
    for (let p0 = seg.start; p0 < seg.end; p0 += this.options.chunkTokens) {
      const p1 = Math.min(seg.end, p0 + this.options.chunkTokens);
      const last = p1 === seg.end;
      const [out] = await this.forward([
        {
          seq,
          layout: { kind: 'segment', start: seg.start, end: seg.end },
          p0,
          p1,
          l0,
          l1,
          input,
          compressAtEnd: opts.compressAtEnd === true,
          logits: last && opts.logits === true,
          keepFrom: Math.min(p1, Math.max(p0, keepStart)),
        },
      ]);
      if (out === undefined) throw new Csa2Error('runtime', 'forward returned no output');
      const from = Math.max(p0, keepStart);
      if (from < p1) {
        const s0 = out.stream.start;
        if (s0 > from) throw new Csa2Error('runtime', `forward kept rows from ${s0}, ${from} asked`);
        keptX.set(out.stream.X.subarray((from - s0) * n * d, (p1 - s0) * n * d), (from - keepStart) * n * d);
        keptPre.set(out.stream.pre.subarray((from - s0) * n, (p1 - s0) * n), (from - keepStart) * n);
      }
      if (last) logits = out.logits;
      opts.onProgress?.(p1 - seg.start, total);
    }
    return { stream: { start: keepStart, rows: keep, X: keptX, pre: keptPre }, logits };
  }
}

export type { ForwardObserver, LayerTimer, ProgressCallback, StreamRows } from './sequence/span.js';

/**
 * An encoder's name in artifact layouts: '' for the reference (the CPU provider, whose encoder gives the
 * same bits on either path and in any chunks); elsewhere the provider, the path and the grid's rows
 * ('cuda-g4096': the one-graph encoder in 4,096-row runs; 'cuda-l4096': the layered path in 4,096-row
 * chunks), since each of them changes the last bits of the chunks it writes, and a chunk's bytes must
 * be a function of its key.
 */
export function encoderLayoutName(provider: string, path: 'graph' | 'layers', gridRows: number | null): string {
  if (provider === 'cpu') return '';
  if (gridRows === null || !(Number.isInteger(gridRows) && gridRows > 0))
    throw new Csa2Error('runtime', `encoder name: a ${provider} encoder needs its grid's rows, got ${String(gridRows)}`);
  return `${provider}-${path === 'graph' ? 'g' : 'l'}${gridRows}`;
}
