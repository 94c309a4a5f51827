/**
 * @module model/sequence
 * The state one sequence carries between forward calls: its token ids, every layer's sliding-window
 * ring, and each KV source's global cache (main-KV rows, index-K rows) plus the compressor's partial
 * group. Rows are kept dequantized as float32 (their values are exactly the reference's bf16 values);
 * the packed FP4 forms are produced on demand for artifacts (cache/artifact codec).
 */

/** A float32 row store that grows by doubling. */
export class RowStore {
  private buf: Float32Array;
  private n = 0;

  constructor(readonly width: number, initialRows = 64) {
    this.buf = new Float32Array(width * Math.max(1, initialRows));
  }

  get rows(): number {
    return this.n;
  }

  append(rows: Float32Array): void {
    const count = rows.length / this.width;
    if (!Number.isInteger(count)) throw new Error(`RowStore.append: ${rows.length} values is not a multiple of ${this.width}`);
    this.reserve(this.n + count);
    this.buf.set(rows, this.n * this.width);
    this.n += count;
  }

  /**
   * The stored rows followed by `extra` rows, as one view, without copying the stored ones: `extra` is
   * written into the spare capacity after them (grown if needed). The extra rows are not part of the
   * store; the next append or withTrailing overwrites them. Valid until then.
   */
  withTrailing(extra: Float32Array): Float32Array {
    const count = extra.length / this.width;
    if (!Number.isInteger(count)) throw new Error(`RowStore.withTrailing: ${extra.length} values is not a multiple of ${this.width}`);
    this.reserve(this.n + count);
    this.buf.set(extra, this.n * this.width);
    return this.buf.subarray(0, (this.n + count) * this.width);
  }

  private reserve(rows: number): void {
    const need = rows * this.width;
    if (need <= this.buf.length) return;
    let cap = this.buf.length;
    while (cap < need) cap *= 2;
    const next = new Float32Array(cap);
    next.set(this.buf.subarray(0, this.n * this.width));
    this.buf = next;
  }

  /** A view of rows [0, count) (no copy; valid until the next append). */
  view(count = this.n): Float32Array {
    return this.buf.subarray(0, count * this.width);
  }

  row(i: number): Float32Array {
    return this.buf.subarray(i * this.width, (i + 1) * this.width);
  }

  truncate(count: number): void {
    this.n = Math.min(this.n, count);
  }
}

/** One layer's sliding-window ring: slot `p % window` holds position p's KV row (-1 = empty). */
export class WindowRing {
  readonly rows: Float32Array;
  readonly positions: Int32Array;

  constructor(readonly window: number, readonly width: number) {
    this.rows = new Float32Array(window * width);
    this.positions = new Int32Array(window).fill(-1);
  }

  write(position: number, row: Float32Array): void {
    const slot = position % this.window;
    this.rows.set(row, slot * this.width);
    this.positions[slot] = position;
  }

  /** The row of `position` if the ring still holds it. */
  get(position: number): Float32Array | null {
    const slot = position % this.window;
    if (this.positions[slot] !== position) return null;
    return this.rows.subarray(slot * this.width, (slot + 1) * this.width);
  }
}

/** A KV-source layer's global cache and its compressor's open group. */
export class KvSourceCache {
  /** Main-KV rows (RoPE'd, FP4/E4M3 dequantized), one per compressed entry. */
  readonly mainKv: RowStore;
  /** Index-K rows (RoPE'd, MXFP4 dequantized). */
  readonly indexK: RowStore;
  /** Group index of the open (partial) group, -1 when none. */
  pendingGroup = -1;
  pendingCount = 0;
  readonly pendingKv: Float32Array;
  readonly pendingScore: Float32Array;

  constructor(readonly layer: number, readonly ratio: number, headDim: number, indexHeadDim: number) {
    this.mainKv = new RowStore(headDim);
    this.indexK = new RowStore(indexHeadDim);
    this.pendingKv = new Float32Array(ratio * headDim);
    this.pendingScore = new Float32Array(ratio * headDim);
  }

  /** Number of completed compressed entries. */
  get entries(): number {
    return this.mainKv.rows;
  }
}

export class Sequence {
  readonly tokens: number[] = [];
  readonly windows: WindowRing[];
  readonly caches: Map<number, KvSourceCache>;
  /**
   * The KV source whose index-K cache the indexers read (the official code's `shared_attn.index_k`
   * slot). A source publishes it only when its compressor emits an entry, and the slot outlives the
   * forward call: in a decode step where a ratio-2 source's group is still open, its indexer scores
   * against whichever index-K cache was published last (the last ratio-1 source's, from the previous
   * step). Reproducing this is what makes decode match the reference.
   */
  indexKSlot: number | null = null;

  constructor(opts: { numLayers: number; window: number; headDim: number; indexHeadDim: number; kvSources: ReadonlyArray<{ layer: number; ratio: number }> }) {
    this.windows = Array.from({ length: opts.numLayers }, () => new WindowRing(opts.window, opts.headDim));
    this.caches = new Map(opts.kvSources.map((s) => [s.layer, new KvSourceCache(s.layer, s.ratio, opts.headDim, opts.indexHeadDim)]));
  }

  get length(): number {
    return this.tokens.length;
  }

  cache(layer: number): KvSourceCache {
    const c = this.caches.get(layer);
    if (c === undefined) throw new Error(`layer ${layer} is not a KV source`);
    return c;
  }
}
