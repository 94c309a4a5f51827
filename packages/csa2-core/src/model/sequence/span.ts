/**
 * @module model/sequence/span
 * What one forward call runs: a batch of spans, each the rows [p0, p1) of one sequence through the
 * layers [l0, l1). Decode steps (one row, all layers), exact-prefill chunks (all layers), encode chunks
 * (the encoder layers, then the first decoder KV source's compressor) and decoder-replay chunks (the
 * decoder layers, from a stream the encoder produced) can share a call: at each layer the rows of every
 * span that runs it are concatenated for the weight-heavy graphs, and each span's attention work runs
 * against its own sequence's caches (model/forward).
 *
 * Attention index layout. The sparse-attention kernel walks each query's index list in blocks of 64
 * with a running max, so the column layout affects bf16 rounding. A "segment" [start, end) uses the
 * reference prefill layout: min(end-start, window) window columns (positions from max(start, t-window+1)
 * upward, -1 past t) then min(topk, end/ratio) compressed columns; a decode "step" uses the reference
 * ring layout (window slots oldest first) then min(topk, (p+1)/ratio) columns. The layout depends on the
 * segment, never on how it is chunked or batched.
 */
import type { Sequence } from './sequence.js';

/** The residual stream of some rows entering a layer: X [rows, n, d] and the collapse mix pre [rows, n]. */
export interface StreamRows {
  readonly start: number;
  readonly rows: number;
  readonly X: Float32Array;
  readonly pre: Float32Array;
}

export type SpanLayout = { readonly kind: 'segment'; readonly start: number; readonly end: number } | { readonly kind: 'step' };

export interface Span {
  readonly seq: Sequence;
  readonly layout: SpanLayout;
  /** Rows [p0, p1): absolute positions; the sequence already holds their token ids. */
  readonly p0: number;
  readonly p1: number;
  /** Layers [l0, l1). */
  readonly l0: number;
  readonly l1: number;
  /** The stream entering l0 for rows [p0, p1); null: embed the tokens (l0 must be 0). */
  readonly input: StreamRows | null;
  /** Extend layer l1's KV-source cache from the output stream (encode mode: l1 is the decoder start). */
  readonly compressAtEnd?: boolean;
  /**
   * The caller reads the output stream from this position on (an encode chunk whose rows are not kept):
   * SpanOutput.stream may then start there. Absent: the stream covers every row.
   */
  readonly keepFrom?: number;
  /** Compute the next-token logits after the last row. */
  readonly logits?: boolean;
  /** Compute the next-token logits after every row (prompt logprobs); SpanOutput.rowLogits. */
  readonly allLogits?: boolean;
  /**
   * The candidate source's picks of some rows, known already (a document's encoder tail, kept from an
   * earlier question): rows of the span that it covers with the same kk and kb take them instead of
   * scanning (a row's picks depend on its own query and causal length only). Split indexer only.
   */
  readonly knownSources?: SourceSelections | null;
  /** Receives the candidate source's picks of the span's rows (to be known by later spans). */
  readonly captureSources?: ((s: SourceSelections) => void) | null;
}

/** The candidate source's top-k lists and candidate blocks of rows [start, start + rows). */
export interface SourceSelections {
  readonly start: number;
  readonly rows: number;
  readonly kk: number;
  readonly kb: number;
  /** [rows, kk] entry positions, ascending, -1 = none. */
  readonly topk: Int32Array;
  /** [rows, kb] candidate blocks in rank order, -1 = none. */
  readonly candidates: Int32Array;
}

export interface SpanOutput {
  /** The stream after layer l1 - 1, rows [p0, p1) (from the span's keepFrom on, where it has one). */
  readonly stream: StreamRows;
  /** Next-token logits after row p1 - 1, when asked for. */
  readonly logits: Float32Array | null;
  /** [rows, vocab]: the logits after each row, when asked for (allLogits). */
  readonly rowLogits?: Float32Array | null;
}

/** Observes forward progress (tokens done of total) for long encodes. */
export type ProgressCallback = (done: number, total: number) => void;

/**
 * Taps on intermediate results, for parity tests and debugging (no effect on the computation):
 * each block's output stream, each indexer's top-k list (entry positions, -1 = none) and the
 * candidate mask, per span of rows starting at position p0.
 */
export interface ForwardObserver {
  layerOutput?(layer: number, p0: number, rows: number, X: Float32Array, pre: Float32Array): void;
  topk?(layer: number, p0: number, rows: number, kk: number, topk: Int32Array): void;
  candidates?(layer: number, p0: number, rows: number, width: number, mask: Uint8Array): void;
  /** The FFN input rows (bf16 values) and the experts the gate chose, with their weights. */
  routing?(layer: number, p0: number, rows: number, ffnInput: Float32Array, experts: Int32Array, weights: Float32Array): void;
}

/** Receives the time of each layer run of a forward call, by layer mode (benchmarks' per-kind breakdown). */
export interface LayerTimer {
  layer(mode: 'swa' | 'full' | 'reindex' | 'reuse', ms: number): void;
  /** The encode spans' compressor step into the decoder start, and the head. */
  other(what: 'compress-at-end' | 'head' | 'encoder-graph', ms: number): void;
  /** Optional: each step of a block (model/block), summed over its spans. */
  step?(what: BlockStep, ms: number): void;
}

/** The steps of one block, in order (model/block). */
export type BlockStep = 'attn-in' | 'compress' | 'indexer' | 'attention' | 'sinkhorn' | 'attn-out' | 'ffn';

/** What one span's index-source layer published for its rows in this call (the `shared_attn` slots). */
export interface SharedSlots {
  /** [rows, kk] entry positions, ascending, -1 = none. */
  topk: Int32Array | null;
  kk: number;
  /** [rows, kb] candidate blocks kept by the candidate source (-1 = none). */
  candidates: Int32Array | null;
  kb: number;
  /**
   * The compressed entries `topk` selects, unpacked (model/attention/attention), for the layers that share that
   * list and KV source (an index source and the Reuse layers after it): built once, read by each.
   */
  selection: Selection | null;
}

/** Rows [r0, r1) of a span and the compressed entries they select: ascending, unique, and their values. */
export interface SelectionBlock {
  readonly r0: number;
  readonly r1: number;
  readonly entries: Int32Array;
  /** [entries, D] the unpacked main-KV rows (filled by one unpack run for every span of the layer). */
  values: Float32Array;
}

/** A span's unpacked selection for one (KV source, top-k list), in row blocks that fit the attention budget. */
export interface Selection {
  readonly kvLayer: number;
  readonly topk: Int32Array;
  readonly blocks: readonly SelectionBlock[];
}

/** A span in the middle of a forward call: its current stream and the slots its layers share. */
export interface SpanState {
  readonly span: Span;
  readonly rows: number;
  X: Float32Array;
  pre: Float32Array;
  readonly shared: SharedSlots;
}
