/**
 * @module model/packed-rows
 * A growable store of fixed-size byte rows: a KV source's global cache (main-KV rows of D/2 + D/16
 * bytes, index-K rows of d/2 + d/32; graphs/packed-ops has the byte layout), kept exactly as the
 * artifact chunks hold them. Capacity grows by 1/16 at a time (so a cache that grows row by row during
 * decode stays within 1.07× of its size) and can be reserved exactly when the final size is known
 * (a document loaded from its artifact, an ingest of known length).
 */
import { Csa2Error } from '../errors.js';

const MIN_ROWS = 64;

export class PackedRowStore {
  private buf: Uint8Array;
  private n = 0;

  constructor(readonly rowBytes: number, initialRows = MIN_ROWS) {
    if (!Number.isInteger(rowBytes) || rowBytes < 1) throw new Csa2Error('runtime', `PackedRowStore: row size ${rowBytes} is not a positive integer`);
    this.buf = new Uint8Array(rowBytes * Math.max(1, initialRows));
  }

  get rows(): number {
    return this.n;
  }

  /** Bytes held, capacity included. */
  get capacityBytes(): number {
    return this.buf.byteLength;
  }

  /** Makes room for `rows` rows in all, exactly (no effect when there is room already). */
  reserve(rows: number): void {
    const need = rows * this.rowBytes;
    if (need <= this.buf.length) return;
    const next = new Uint8Array(need);
    next.set(this.buf.subarray(0, this.n * this.rowBytes));
    this.buf = next;
  }

  /** Appends whole rows (copied). */
  append(bytesU8: Uint8Array): void {
    const count = bytesU8.length / this.rowBytes;
    if (!Number.isInteger(count)) throw new Csa2Error('runtime', `PackedRowStore.append: ${bytesU8.length} bytes is not a whole number of ${this.rowBytes}-byte rows`);
    const need = this.n + count;
    if (need * this.rowBytes > this.buf.length) {
      const cap = this.buf.length / this.rowBytes;
      this.reserve(Math.max(need, cap + Math.max(MIN_ROWS, Math.ceil(cap / 16))));
    }
    this.buf.set(bytesU8, this.n * this.rowBytes);
    this.n = need;
  }

  /** Rows [0, count) as one view (no copy; valid until the next append that grows the store). */
  view(count = this.n): Uint8Array {
    if (!(count >= 0 && count <= this.n)) throw new Csa2Error('runtime', `PackedRowStore.view: ${count} rows asked, ${this.n} stored`);
    return this.buf.subarray(0, count * this.rowBytes);
  }

  /** Rows [first, first + count) as a view. */
  range(first: number, count: number): Uint8Array {
    if (!(first >= 0 && count >= 0 && first + count <= this.n)) throw new Csa2Error('runtime', `PackedRowStore.range: rows [${first}, ${first + count}) of ${this.n}`);
    return this.buf.subarray(first * this.rowBytes, (first + count) * this.rowBytes);
  }

  row(i: number): Uint8Array {
    return this.range(i, 1);
  }

  /** Copies the rows at `indices` into `out` (or a new buffer) as [indices.length, rowBytes]. */
  gather(indices: ArrayLike<number>, out = new Uint8Array(indices.length * this.rowBytes), outRow = 0): Uint8Array {
    const R = this.rowBytes;
    // Buffer.copy moves a row without allocating a view per row
    const src = Buffer.from(this.buf.buffer, this.buf.byteOffset, this.buf.byteLength);
    const dst = Buffer.from(out.buffer, out.byteOffset, out.byteLength);
    for (let i = 0; i < indices.length; i++) {
      const j = indices[i] as number;
      if (!(j >= 0 && j < this.n)) throw new Csa2Error('runtime', `PackedRowStore.gather: row ${j} of ${this.n}`);
      src.copy(dst, (outRow + i) * R, j * R, (j + 1) * R);
    }
    return out;
  }

  truncate(count: number): void {
    this.n = Math.max(0, Math.min(this.n, count));
  }
}
