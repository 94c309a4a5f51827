/**
 * @module model/sequence/sequence
 * The state one sequence carries between forward calls: its token ids, every layer's sliding-window
 * ring, and each KV source's global cache plus the compressor's open group.
 *
 * The global cache is packed (model/sequence/packed-rows): main-KV rows of D/2 + D/16 bytes (E2M1 + E4M3 per 16)
 * and index-K rows of d/2 + d/32 bytes (MXFP4), exactly the bytes an artifact chunk holds, as the
 * compressor graph emits them; the graphs unpack what they read. The windows hold their FP8 values as
 * float32 (a fixed window × D per layer).
 */
import { Csa2Error } from '../../errors.js';
import { indexKRowBytes, mainKvRowBytes } from '../../numerics/formats.js';
import { PackedRowStore } from './packed-rows.js';
import type { RowArena } from './row-arena.js';
import { TokenBuffer } from './token-buffer.js';

/** One layer's sliding-window ring: slot `p % window` holds position p's KV row (-1 = empty). */
export class WindowRing {
  readonly rows: Float32Array;
  readonly positions: Int32Array;

  constructor(
    readonly window: number,
    readonly width: number,
  ) {
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

  /** Copies another ring's contents into this one (same shape). */
  copyFrom(other: WindowRing): void {
    this.rows.set(other.rows);
    this.positions.set(other.positions);
  }
}

/** A KV-source layer's global cache (packed rows) and its compressor's open group (fp32 state). */
export class KvSourceCache {
  /** Main-KV rows (RoPE'd, FP4 E2M1 + E4M3 per 16), one per compressed entry. */
  readonly mainKv: PackedRowStore;
  /** Index-K rows (RoPE'd, MXFP4), one per compressed entry. */
  readonly indexK: PackedRowStore;
  /** Group index of the open (partial) group, -1 when none. */
  pendingGroup = -1;
  pendingCount = 0;
  readonly pendingKv: Float32Array;
  readonly pendingScore: Float32Array;

  constructor(
    readonly layer: number,
    readonly ratio: number,
    readonly headDim: number,
    readonly indexHeadDim: number,
  ) {
    this.mainKv = new PackedRowStore(mainKvRowBytes(headDim));
    this.indexK = new PackedRowStore(indexKRowBytes(indexHeadDim), undefined, { shareable: true }); // the scan threads read it in place
    this.pendingKv = new Float32Array(ratio * headDim);
    this.pendingScore = new Float32Array(ratio * headDim);
  }

  /** Number of completed compressed entries. */
  get entries(): number {
    return this.mainKv.rows;
  }

  /** Makes room for the entries of `tokens` tokens in all. */
  reserveTokens(tokens: number): void {
    const entries = Math.floor(tokens / this.ratio);
    this.mainKv.reserve(entries);
    this.indexK.reserve(entries);
  }
}

export interface SequenceShape {
  readonly numLayers: number;
  readonly window: number;
  readonly headDim: number;
  readonly indexHeadDim: number;
  readonly kvSources: ReadonlyArray<{ readonly layer: number; readonly ratio: number }>;
}

export class Sequence {
  readonly tokens = new TokenBuffer();
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

  constructor(readonly shape: SequenceShape) {
    this.windows = Array.from({ length: shape.numLayers }, () => new WindowRing(shape.window, shape.headDim));
    this.caches = new Map(shape.kvSources.map((s) => [s.layer, new KvSourceCache(s.layer, s.ratio, shape.headDim, shape.indexHeadDim)]));
  }

  get length(): number {
    return this.tokens.length;
  }

  cache(layer: number): KvSourceCache {
    const c = this.caches.get(layer);
    if (c === undefined) throw new Csa2Error('runtime', `layer ${layer} is not a KV source`);
    return c;
  }

  /**
   * Takes the global caches' buffers from `arena` where it can (model/sequence/row-arena): an empty sequence
   * about to be filled, a document the engine's document cache loads. `releaseRows` gives them back.
   */
  useArena(arena: RowArena): void {
    if (this.tokens.length !== 0) throw new Csa2Error('runtime', 'Sequence.useArena: the sequence is not empty');
    for (const c of this.caches.values()) {
      c.mainKv.useArena(arena);
      c.indexK.useArena(arena);
    }
  }

  /**
   * Gives the global caches' arena regions back and empties them (their rows are gone): for a
   * sequence nothing reads any more, forks included (a document the document cache dropped).
   */
  releaseRows(): void {
    for (const c of this.caches.values()) {
      c.mainKv.release();
      c.indexK.release();
    }
  }

  /** Makes room for `tokens` tokens in all: token ids and every KV source's rows (exactly). */
  reserveTokens(tokens: number): void {
    this.tokens.reserve(tokens);
    for (const c of this.caches.values()) c.reserveTokens(tokens);
  }

  /** Bytes of the packed global cache in use (rows stored, the artifact's row bytes). */
  globalCacheBytes(): number {
    let bytes = 0;
    for (const c of this.caches.values()) bytes += c.mainKv.rows * c.mainKv.rowBytes + c.indexK.rows * c.indexK.rowBytes;
    return bytes;
  }

  /** Bytes this sequence owns in memory: packed caches with their capacity (not a shared prefix), windows, token ids. */
  residentBytes(): number {
    let bytes = this.tokens.length * 4;
    for (const c of this.caches.values()) bytes += c.mainKv.capacityBytes + c.indexK.capacityBytes + (c.pendingKv.byteLength + c.pendingScore.byteLength);
    for (const w of this.windows) bytes += w.rows.byteLength + w.positions.byteLength;
    return bytes;
  }

  /** Bytes of the shared (immutable) global-cache prefix this sequence reads (see freeze). */
  sharedBytes(): number {
    let bytes = 0;
    for (const c of this.caches.values()) bytes += c.mainKv.sharedBytes + c.indexK.sharedBytes;
    return bytes;
  }

  /**
   * Makes the global-cache rows stored so far an immutable prefix that forks read in place instead of
   * copying (a document loaded once, asked many questions). This sequence stays usable: its later
   * rows go to a private tail.
   */
  freeze(): void {
    for (const c of this.caches.values()) {
      c.mainKv.freeze();
      c.indexK.freeze();
    }
  }

  /**
   * An independent sequence with this one's state: token ids, windows, the compressors' open groups
   * and every KV source's rows — the frozen prefix read in place (see freeze), the rows after it
   * copied. O(tokens + window + private rows). `tokenCapacity`: the token ids the fork will hold (the
   * question and the answer after the document), reserved at once so that the ids are copied once.
   */
  fork(tokenCapacity = this.tokens.length): Sequence {
    const s = new Sequence(this.shape);
    s.tokens.reserve(Math.max(tokenCapacity, this.tokens.length));
    s.tokens.append(this.tokens.view());
    this.windows.forEach((w, l) => (s.windows[l] as WindowRing).copyFrom(w));
    for (const [layer, c] of this.caches) {
      const d = s.cache(layer);
      d.mainKv.shareFrom(c.mainKv);
      d.indexK.shareFrom(c.indexK);
      d.pendingGroup = c.pendingGroup;
      d.pendingCount = c.pendingCount;
      d.pendingKv.set(c.pendingKv);
      d.pendingScore.set(c.pendingScore);
    }
    s.indexKSlot = this.indexKSlot;
    return s;
  }
}
