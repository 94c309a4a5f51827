/**
 * @module model/sequence/packed-rows
 * A growable store of fixed-size byte rows: a KV source's global cache (main-KV rows of D/2 + D/16
 * bytes, index-K rows of d/2 + d/32; graphs/packed-ops has the byte layout), kept exactly as the
 * artifact chunks hold them. Capacity grows by 1/16 at a time (so a cache that grows row by row during
 * decode stays within 1.07× of its size) and can be reserved exactly when the final size is known
 * (a document loaded from its artifact, an ingest of known length).
 *
 * Rows can be shared: `freeze()` turns the rows stored so far into an immutable prefix, and
 * `shareFrom(other)` makes a store that reads other's prefix in place (and copies only its private
 * rows). A document loaded once is read by every question on it this way; each question's own rows
 * (prompt, output) go to its private tail. Reads that span the prefix and the tail copy
 * (`view`, `range`); `segmentEnd` tells callers where they can split to read in place.
 *
 * A `shareable` store keeps its rows in SharedArrayBuffers, so that the scan threads
 * (model/indexer/scan-threads) read views of them without a copy (sequences' index keys are stored so).
 *
 * A store given a RowArena (`useArena`: a document the engine's document cache loads) takes its
 * buffers from it where it can, and `release` gives them back once the store is read no more.
 */
import { Csa2Error } from '../../errors.js';
import type { RowArena } from './row-arena.js';

const MIN_ROWS = 64;

/** Kept so that the loads of touchSpans are not optimized away. */
let touchSink = 0;

/**
 * Reads a byte of every cache line of the spans (span i is bytes [starts[i]·spanBytes, (starts[i] + 1)·
 * spanBytes) of the rows, the first sharedBytes in `shared`, the rest in `own`; none at or past
 * endBytes) before they are copied: independent loads that the CPU overlaps, so the copy that follows
 * finds them in cache instead of waiting for its own misses. On this 2-core VM
 * (bench/tools/gather-probe.mjs, random places of a 1M-row store): a pool's 2,048 blocks (gatherBlocks)
 * of 136 bytes (the bench's tiny width) ~235 → ~128 ns a block, of 544 bytes (the released index width)
 * ~300 → ~255 ns; an attention's 512 selected rows (gather) of 36 bytes 146–271 → 69–106 ns a row.
 */
function touchSpans(starts: ArrayLike<number>, spanBytes: number, sharedBytes: number, shared: Uint8Array | null, own: Uint8Array, endBytes: number): void {
  let acc = 0;
  for (let i = 0; i < starts.length; i++) {
    const a = (starts[i] as number) * spanBytes;
    const b = Math.min(endBytes, a + spanBytes);
    for (let t = a; t < b; t += 64) acc += t < sharedBytes ? ((shared as Uint8Array)[t] as number) : (own[t - sharedBytes] as number) | 0;
    if (b > a) acc += b - 1 < sharedBytes ? ((shared as Uint8Array)[b - 1] as number) : (own[b - 1 - sharedBytes] as number) | 0;
  }
  touchSink = (touchSink + acc) | 0;
}

export class PackedRowStore {
  /** Immutable rows [0, sharedRows), possibly read by other stores too. */
  private shared: Uint8Array | null = null;
  private sharedRows = 0;
  /** Private rows [sharedRows, n), owned by this store. */
  private buf: Uint8Array;
  private n = 0;
  private gen = 0;

  /** Rows in SharedArrayBuffers (see the module comment). */
  readonly shareable: boolean;
  /** Where buffers come from first (useArena), and whether the shared prefix is this store's own buffer (freeze) rather than another store's (shareFrom). */
  private arena: RowArena | null = null;
  private ownsShared = false;

  constructor(
    readonly rowBytes: number,
    initialRows = MIN_ROWS,
    options: { readonly shareable?: boolean } = {},
  ) {
    if (!Number.isInteger(rowBytes) || rowBytes < 1) throw new Csa2Error('runtime', `PackedRowStore: row size ${rowBytes} is not a positive integer`);
    this.shareable = options.shareable === true;
    this.buf = this.alloc(rowBytes * Math.max(1, initialRows));
  }

  /** Zeroed bytes for rows: a region of the arena when it has one (a SharedArrayBuffer), else in a SharedArrayBuffer when the store is shareable. */
  private alloc(bytes: number): Uint8Array {
    const region = this.arena?.take(bytes) ?? null;
    if (region !== null) return region;
    return this.shareable ? new Uint8Array(new SharedArrayBuffer(bytes)) : new Uint8Array(bytes);
  }

  /** Hands a buffer this store no longer reads back to its arena (no effect for an ordinary allocation). */
  private drop(buf: Uint8Array | null): void {
    if (buf !== null) this.arena?.give(buf);
  }

  /**
   * Takes later buffers (reserve, growth) from `arena` where it can. The store must be empty; its
   * current (small) buffer stays an ordinary allocation. `release` gives the arena's regions back.
   */
  useArena(arena: RowArena): void {
    if (this.n !== 0 || this.sharedRows !== 0) throw new Csa2Error('runtime', 'PackedRowStore.useArena: the store is not empty');
    this.arena = arena;
  }

  /**
   * Gives this store's arena regions back (its private rows, and the shared prefix when it froze it
   * itself) and empties it: it holds no rows afterwards. For a store read no more — a document the
   * document cache dropped, whose forks are gone. Without an arena it only empties the store. (A
   * shared prefix that a later freeze or truncate replaces is not given back, since forks may read it:
   * the document cache never changes a frozen document, so its stores do not do that.)
   */
  release(): void {
    this.drop(this.buf);
    if (this.ownsShared) this.drop(this.shared);
    this.buf = new Uint8Array(0);
    this.shared = null;
    this.sharedRows = 0;
    this.ownsShared = false;
    this.n = 0;
    this.gen++;
    this.arena = null;
  }

  get rows(): number {
    return this.n;
  }

  /**
   * Changes whenever a stored row may have changed (truncate, shareFrom): rows below `rows` read at the
   * same generation hold the same bytes (appends and freeze keep every stored row), so a copy of
   * them can be reused (model/indexer/indexer-pool's gathered pool keys).
   */
  get generation(): number {
    return this.gen;
  }

  /** Bytes this store owns (its private rows' capacity); the shared prefix is counted by `sharedBytes`. */
  get capacityBytes(): number {
    return this.buf.byteLength;
  }

  /** Bytes of the shared (immutable) prefix this store reads. */
  get sharedBytes(): number {
    return this.sharedRows * this.rowBytes;
  }

  /** Rows in the shared prefix. */
  get sharedRowCount(): number {
    return this.sharedRows;
  }

  /** The shared prefix's bytes (the same object in every store that reads it), or null when there is none. */
  get sharedPrefix(): Uint8Array | null {
    return this.sharedRows > 0 ? this.shared : null;
  }

  /** Makes room for `rows` rows in all, exactly (no effect when there is room already). */
  reserve(rows: number): void {
    const need = (rows - this.sharedRows) * this.rowBytes;
    if (need <= this.buf.length) return;
    const next = this.alloc(need);
    next.set(this.buf.subarray(0, (this.n - this.sharedRows) * this.rowBytes));
    this.drop(this.buf);
    this.buf = next;
  }

  /** Appends whole rows (copied). */
  append(bytesU8: Uint8Array): void {
    const count = bytesU8.length / this.rowBytes;
    if (!Number.isInteger(count))
      throw new Csa2Error('runtime', `PackedRowStore.append: ${bytesU8.length} bytes is not a whole number of ${this.rowBytes}-byte rows`);
    const need = this.n + count;
    const own = need - this.sharedRows;
    if (own * this.rowBytes > this.buf.length) {
      const cap = this.buf.length / this.rowBytes;
      this.reserve(this.sharedRows + Math.max(own, cap + Math.max(MIN_ROWS, Math.ceil(cap / 16))));
    }
    this.buf.set(bytesU8, (this.n - this.sharedRows) * this.rowBytes);
    this.n = need;
  }

  /** The end of the run of rows that `first` belongs to and that one view can read: the shared prefix or the tail. */
  segmentEnd(first: number): number {
    return first < this.sharedRows ? this.sharedRows : this.n;
  }

  /** Rows [0, count): a view when they lie in one segment, else a copy. A view is valid until the next append that grows the store. */
  view(count = this.n): Uint8Array {
    if (!(count >= 0 && count <= this.n)) throw new Csa2Error('runtime', `PackedRowStore.view: ${count} rows asked, ${this.n} stored`);
    return this.range(0, count);
  }

  /** Rows [first, first + count): a view when they lie in one segment (see segmentEnd), else a copy. */
  range(first: number, count: number): Uint8Array {
    if (!(first >= 0 && count >= 0 && first + count <= this.n))
      throw new Csa2Error('runtime', `PackedRowStore.range: rows [${first}, ${first + count}) of ${this.n}`);
    const R = this.rowBytes;
    const end = first + count;
    if (first >= this.sharedRows) return this.buf.subarray((first - this.sharedRows) * R, (end - this.sharedRows) * R);
    if (end <= this.sharedRows) return (this.shared as Uint8Array).subarray(first * R, end * R);
    return this.copyRange(first, count, new Uint8Array(count * R));
  }

  /** Copies rows [first, first + count) into `out` at row `outRow`. */
  copyRange(first: number, count: number, out: Uint8Array, outRow = 0): Uint8Array {
    if (!(first >= 0 && count >= 0 && first + count <= this.n))
      throw new Csa2Error('runtime', `PackedRowStore.copyRange: rows [${first}, ${first + count}) of ${this.n}`);
    const R = this.rowBytes;
    const inShared = Math.max(0, Math.min(first + count, this.sharedRows) - first);
    if (inShared > 0) out.set((this.shared as Uint8Array).subarray(first * R, (first + inShared) * R), outRow * R);
    const p0 = first + inShared - this.sharedRows;
    const rest = count - inShared;
    if (rest > 0) out.set(this.buf.subarray(p0 * R, (p0 + rest) * R), (outRow + inShared) * R);
    return out;
  }

  row(i: number): Uint8Array {
    return this.range(i, 1);
  }

  /** Copies the rows at `indices` into `out` (or a new buffer) as [indices.length, rowBytes]. */
  gather(indices: ArrayLike<number>, out = new Uint8Array(indices.length * this.rowBytes), outRow = 0): Uint8Array {
    const R = this.rowBytes;
    const S = this.sharedRows;
    // Buffer.copy moves a row without allocating a view per row
    const own = Buffer.from(this.buf.buffer, this.buf.byteOffset, this.buf.byteLength);
    const shared = this.shared === null ? own : Buffer.from(this.shared.buffer, this.shared.byteOffset, this.shared.byteLength);
    const dst = Buffer.from(out.buffer, out.byteOffset, out.byteLength);
    touchSpans(indices, R, S * R, this.shared, this.buf, this.n * R);
    // runs of consecutive rows (a candidate block's positions) move as one copy
    for (let i = 0; i < indices.length; ) {
      const j = indices[i] as number;
      if (!(Number.isInteger(j) && j >= 0 && j < this.n)) throw new Csa2Error('runtime', `PackedRowStore.gather: row ${j} of ${this.n}`);
      let k = i + 1;
      const side = j < S;
      while (k < indices.length && indices[k] === j + (k - i) && j + (k - i) < this.n && j + (k - i) < S === side) k++;
      const n = k - i;
      if (side) shared.copy(dst, (outRow + i) * R, j * R, (j + n) * R);
      else own.copy(dst, (outRow + i) * R, (j - S) * R, (j - S + n) * R);
      i = k;
    }
    return out;
  }

  /**
   * Copies the rows of whole blocks into `out` at row `outRow`, block after block: block b is rows
   * [b·blockRows, min(limit, (b + 1)·blockRows)) (what `gather` of those positions copies, without
   * looking at each position: a candidate pool is 2,048 blocks of 8).
   */
  gatherBlocks(blocks: ArrayLike<number>, blockRows: number, limit: number, out: Uint8Array, outRow = 0): Uint8Array {
    const R = this.rowBytes;
    const S = this.sharedRows;
    const own = Buffer.from(this.buf.buffer, this.buf.byteOffset, this.buf.byteLength);
    const shared = this.shared === null ? own : Buffer.from(this.shared.buffer, this.shared.byteOffset, this.shared.byteLength);
    const dst = Buffer.from(out.buffer, out.byteOffset, out.byteLength);
    const end = Math.min(limit, this.n);
    touchSpans(blocks, blockRows * R, S * R, this.shared, this.buf, end * R);
    let o = outRow * R;
    for (let i = 0; i < blocks.length; i++) {
      const a = (blocks[i] as number) * blockRows;
      const b = Math.min(end, a + blockRows);
      if (!(Number.isInteger(a) && a >= 0 && a < b))
        throw new Csa2Error('runtime', `PackedRowStore.gatherBlocks: block ${blocks[i]} of ${blockRows} rows, ${end} rows`);
      if (b <= S) shared.copy(dst, o, a * R, b * R);
      else if (a >= S) own.copy(dst, o, (a - S) * R, (b - S) * R);
      else {
        shared.copy(dst, o, a * R, S * R);
        own.copy(dst, o + (S - a) * R, 0, (b - S) * R);
      }
      o += (b - a) * R;
    }
    return out;
  }

  truncate(count: number): void {
    const keep = Math.max(0, Math.min(this.n, count));
    if (keep < this.n) this.gen++;
    if (keep < this.sharedRows) {
      // the shared prefix is immutable: keep a private copy of what remains
      const own = this.alloc((keep > 0 ? keep : MIN_ROWS) * this.rowBytes);
      own.set((this.shared as Uint8Array).subarray(0, keep * this.rowBytes));
      // (a shared prefix goes back to the arena only on release: forks may still read it)
      this.drop(this.buf);
      this.shared = null;
      this.sharedRows = 0;
      this.ownsShared = false;
      this.buf = own;
    }
    this.n = keep;
  }

  /**
   * Makes every row stored so far part of the immutable shared prefix (copied once when a prefix and
   * private rows must be joined, or to drop spare capacity); later appends go to a new private tail.
   */
  freeze(): void {
    if (this.n === this.sharedRows) return;
    const R = this.rowBytes;
    const exact = this.sharedRows === 0 && this.buf.length === this.n * R;
    const shared = exact ? this.buf : this.copyRange(0, this.n, this.alloc(this.n * R));
    // an earlier shared prefix is not given back here (forks may still read it); release does that
    if (!exact) this.drop(this.buf);
    this.shared = shared;
    this.ownsShared = true;
    this.sharedRows = this.n;
    this.buf = this.alloc(R * MIN_ROWS);
  }

  /** Makes this (empty) store read `other`'s shared prefix in place and hold a copy of its private rows. */
  shareFrom(other: PackedRowStore): void {
    if (other.rowBytes !== this.rowBytes)
      throw new Csa2Error('runtime', `PackedRowStore.shareFrom: ${other.rowBytes}-byte rows into a ${this.rowBytes}-byte store`);
    if (this.n !== 0) throw new Csa2Error('runtime', 'PackedRowStore.shareFrom: the store is not empty');
    this.gen++;
    this.drop(this.buf);
    this.shared = other.shared;
    this.ownsShared = false;
    this.sharedRows = other.sharedRows;
    const own = other.n - other.sharedRows;
    this.buf = this.alloc(this.rowBytes * Math.max(MIN_ROWS, own));
    this.buf.set(other.buf.subarray(0, own * this.rowBytes));
    this.n = other.n;
  }
}
