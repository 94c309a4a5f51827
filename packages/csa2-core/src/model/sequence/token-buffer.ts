/**
 * @module model/sequence/token-buffer
 * A sequence's token ids: a growable Uint32Array (4 bytes a token, u32 as artifact chunks store them: 4 MB at the released context of
 * 1,048,576), appended in place, read through views. Never spread into a call: V8 refuses argument
 * lists above ~125K elements.
 */
import { InputError } from '../../errors.js';

export class TokenBuffer {
  private buf: Uint32Array;
  private n = 0;

  constructor(initialCapacity = 256) {
    this.buf = new Uint32Array(Math.max(16, initialCapacity));
  }

  get length(): number {
    return this.n;
  }

  /** Makes room for `total` tokens in all (no effect when there is room already). */
  reserve(total: number): void {
    if (total <= this.buf.length) return;
    const next = new Uint32Array(total);
    next.set(this.buf.subarray(0, this.n));
    this.buf = next;
  }

  /** Appends one id. */
  push(id: number): void {
    if (this.n === this.buf.length) this.reserve(Math.max(this.n + 1, Math.ceil(this.n * 1.5)));
    this.buf[this.n++] = id;
  }

  /** Appends ids (any array-like; copied, not spread). */
  append(ids: ArrayLike<number>): void {
    const need = this.n + ids.length;
    if (need > this.buf.length) this.reserve(Math.max(need, Math.ceil(this.n * 1.5)));
    if (ids instanceof Uint32Array) this.buf.set(ids, this.n);
    else for (let i = 0; i < ids.length; i++) this.buf[this.n + i] = ids[i] as number;
    this.n = need;
  }

  /** The id at position i. */
  at(i: number): number {
    if (!(i >= 0 && i < this.n)) throw new InputError(`token position ${i} is outside [0, ${this.n})`);
    return this.buf[i] as number;
  }

  /** Ids [start, end) as a view (no copy; valid until the next append that grows the buffer). */
  view(start = 0, end = this.n): Uint32Array {
    return this.buf.subarray(Math.max(0, start), Math.min(end, this.n));
  }

  /** Ids [start, end) as a copy. */
  slice(start = 0, end = this.n): Uint32Array {
    return this.view(start, end).slice();
  }

  /** Drops the tokens from position `count` on. */
  truncate(count: number): void {
    this.n = Math.max(0, Math.min(this.n, count));
  }
}
