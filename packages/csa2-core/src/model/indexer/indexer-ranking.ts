/**
 * @module model/indexer/indexer-ranking
 * A bounded running ranking per row: the best `capacity` (score, position) pairs seen so far, in the
 * order one TopK over all keys gives them (by score, ties to the lower position), kept in
 * preallocated typed arrays. A scan over key chunks merges each chunk's ranked picks into it as the
 * chunk comes, so what it holds does not grow with the context (rows × capacity pairs), and the best
 * `capacity` of the union of the chunks are exactly the best `capacity` of one ranking over all keys:
 * the order is total (positions are distinct), so every pair that ranks within the first `capacity`
 * overall ranks within the first `capacity` of its own chunk too.
 */
import { Csa2Error } from '../../errors.js';

export class RunningRanking {
  /** [rows, capacity] scores and positions, each row ranked; `count` of them valid. */
  readonly values: Float32Array;
  readonly ids: Int32Array;
  readonly count: Int32Array;
  private readonly scratchV: Float32Array;
  private readonly scratchI: Int32Array;
  private order: Int32Array;

  constructor(
    readonly rows: number,
    readonly capacity: number,
  ) {
    if (!(Number.isInteger(rows) && rows >= 0 && Number.isInteger(capacity) && capacity >= 0)) {
      throw new Csa2Error('runtime', `RunningRanking: ${rows} rows × ${capacity} is not a valid size`);
    }
    this.values = new Float32Array(rows * capacity);
    this.ids = new Int32Array(rows * capacity);
    this.count = new Int32Array(rows);
    this.scratchV = new Float32Array(capacity);
    this.scratchI = new Int32Array(capacity);
    this.order = new Int32Array(0);
  }

  /**
   * Merges pairs (v[at + j], i[at + j] - shift), j < n, into row `row`; -inf scores are skipped
   * unless keepInfinite. The pairs may come in any order (a TopK's sorted output needs no sort).
   */
  merge(row: number, v: ArrayLike<number>, i: ArrayLike<number>, at: number, n: number, shift: number, keepInfinite: boolean): void {
    const cap = this.capacity;
    if (cap === 0 || n === 0) return;
    // the incoming pairs, ranked (usually already: TopK sorts by score, ties to the lower index)
    let sorted = true;
    for (let j = 1; j < n && sorted; j++) {
      const a = v[at + j - 1] as number;
      const b = v[at + j] as number;
      if (b > a || (b === a && (i[at + j] as number) < (i[at + j - 1] as number))) sorted = false;
    }
    let ord: Int32Array | null = null;
    if (!sorted) {
      if (this.order.length < n) this.order = new Int32Array(n);
      ord = this.order.subarray(0, n);
      for (let j = 0; j < n; j++) ord[j] = at + j;
      ord.sort((x, y) => (v[y] as number) - (v[x] as number) || (i[x] as number) - (i[y] as number));
    }
    const base = row * cap;
    const have = this.count[row] as number;
    const vs = this.values;
    const is = this.ids;
    const outV = this.scratchV;
    const outI = this.scratchI;
    let a = 0;
    let b = 0;
    let m = 0;
    while (m < cap) {
      // the next incoming pair (skipping -inf ones when they are dropped)
      let bv = 0;
      let bi = 0;
      let hasB = false;
      while (b < n) {
        const k = ord === null ? at + b : (ord[b] as number);
        bv = v[k] as number;
        if (keepInfinite || bv !== -Infinity) {
          bi = (i[k] as number) - shift;
          hasB = true;
          break;
        }
        b++;
      }
      if (a < have) {
        const av = vs[base + a] as number;
        const ai = is[base + a] as number;
        if (!hasB || av > bv || (av === bv && ai < bi)) {
          outV[m] = av;
          outI[m++] = ai;
          a++;
          continue;
        }
      } else if (!hasB) break;
      outV[m] = bv;
      outI[m++] = bi;
      b++;
    }
    vs.set(outV.subarray(0, m), base);
    is.set(outI.subarray(0, m), base);
    this.count[row] = m;
  }
}

/**
 * Per row, a bounded heap of the best `capacity` (score, position) pairs pushed so far (the worst at
 * the root): the same set as RunningRanking keeps, for pairs pushed one by one in any order.
 */
export class BoundedHeaps {
  readonly values: Float32Array;
  readonly ids: Int32Array;
  readonly size: Int32Array;

  constructor(
    readonly rows: number,
    readonly capacity: number,
  ) {
    if (!(Number.isInteger(rows) && rows >= 0 && Number.isInteger(capacity) && capacity >= 0)) {
      throw new Csa2Error('runtime', `BoundedHeaps: ${rows} rows × ${capacity} is not a valid size`);
    }
    this.values = new Float32Array(rows * capacity);
    this.ids = new Int32Array(rows * capacity);
    this.size = new Int32Array(rows);
  }

  /** Whether (v, id) would enter row's heap: it is not full, or (v, id) ranks before its worst pair. */
  accepts(row: number, v: number, id: number): boolean {
    const cap = this.capacity;
    if (cap === 0) return false;
    if ((this.size[row] as number) < cap) return true;
    const w = this.values[row * cap] as number;
    return v > w || (v === w && id < (this.ids[row * cap] as number));
  }

  /** Adds (v, id) to row's heap, dropping its worst pair when full; the caller checked `accepts`. */
  push(row: number, v: number, id: number): void {
    const cap = this.capacity;
    const base = row * cap;
    const vs = this.values;
    const is = this.ids;
    let n = this.size[row] as number;
    // worse(a, b): a ranks after b
    if (n < cap) {
      // sift up from the new leaf
      let i = n++;
      this.size[row] = n;
      while (i > 0) {
        const parent = (i - 1) >> 1;
        const pv = vs[base + parent] as number;
        const pi = is[base + parent] as number;
        if (!(v < pv || (v === pv && id > pi))) break;
        vs[base + i] = pv;
        is[base + i] = pi;
        i = parent;
      }
      vs[base + i] = v;
      is[base + i] = id;
      return;
    }
    // replace the root and sift down
    this.siftDown(base, n, 0, v, id);
  }

  /** Places (v, id) at slot i of the heap [base, base + n) or below it, moving better children up. */
  private siftDown(base: number, n: number, i: number, v: number, id: number): void {
    const vs = this.values;
    const is = this.ids;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      let c = l;
      const r = l + 1;
      if (r < n) {
        const lv = vs[base + l] as number;
        const rv = vs[base + r] as number;
        if (rv < lv || (rv === lv && (is[base + r] as number) > (is[base + l] as number))) c = r;
      }
      const cv = vs[base + c] as number;
      const ci = is[base + c] as number;
      if (!(cv < v || (cv === v && ci > id))) break;
      vs[base + i] = cv;
      is[base + i] = ci;
      i = c;
    }
    vs[base + i] = v;
    is[base + i] = id;
  }

  /**
   * Makes row's heap (empty) the best `capacity` of the n pairs (values[j], ids[j]), ids ascending and
   * distinct, values not NaN: the same set as pushing them one by one, found by selection instead of
   * n pushes. The capacity-th best value is selected (`scratch`, ≥ n floats, is overwritten); the pairs
   * above it and, of those equal to it, the lowest ids (the first in order) are kept and heapified.
   */
  assign(row: number, values: Float32Array, ids: Int32Array, n: number, scratch: Float32Array): void {
    const cap = this.capacity;
    if ((this.size[row] as number) !== 0) throw new Csa2Error('runtime', `BoundedHeaps.assign: row ${row} is not empty`);
    if (!(n >= 0 && n <= values.length && n <= ids.length && n <= scratch.length))
      throw new Csa2Error('runtime', `BoundedHeaps.assign: ${n} pairs of ${values.length}`);
    if (cap === 0) return;
    const base = row * cap;
    const vs = this.values;
    const is = this.ids;
    let m = 0;
    if (n <= cap) {
      for (let j = 0; j < n; j++) {
        vs[base + m] = values[j] as number;
        is[base + m++] = ids[j] as number;
      }
    } else {
      scratch.set(values.subarray(0, n));
      const kth = selectDescending(scratch, n, cap - 1);
      let above = 0;
      for (let j = 0; j < n; j++) if ((values[j] as number) > kth) above++;
      let ties = cap - above;
      for (let j = 0; j < n && m < cap; j++) {
        const v = values[j] as number;
        if (v > kth || (v === kth && ties-- > 0)) {
          vs[base + m] = v;
          is[base + m++] = ids[j] as number;
        }
      }
    }
    this.size[row] = m;
    // heapify: the worst pair at the root (as push keeps it)
    for (let i = (m >> 1) - 1; i >= 0; i--) this.siftDown(base, m, i, vs[base + i] as number, is[base + i] as number);
  }

  /** Row's pairs ranked (by score, ties to the lower position): their ids into `out`; returns how many. */
  rankedIds(row: number, out: Int32Array): number {
    const cap = this.capacity;
    const n = this.size[row] as number;
    const vs = this.values.subarray(row * cap, row * cap + n);
    const is = this.ids.subarray(row * cap, row * cap + n);
    const order = Array.from({ length: n }, (_, j) => j);
    order.sort((a, b) => ((vs[a] as number) === (vs[b] as number) ? (is[a] as number) - (is[b] as number) : (vs[a] as number) > (vs[b] as number) ? -1 : 1));
    for (let j = 0; j < n; j++) out[j] = is[order[j] as number] as number;
    return n;
  }
}

/**
 * The value of rank k (0 = the largest) among a[0, n) (no NaN), by quickselect in place (a is reordered).
 */
export function selectDescending(a: Float32Array, n: number, k: number): number {
  if (!(k >= 0 && k < n)) throw new Csa2Error('runtime', `selectDescending: rank ${k} of ${n}`);
  let lo = 0;
  let hi = n - 1;
  while (hi > lo) {
    // median of three as the pivot
    const mid = (lo + hi) >> 1;
    const x = a[lo] as number;
    const y = a[mid] as number;
    const z = a[hi] as number;
    const pivot = x > y ? (y > z ? y : x > z ? z : x) : x > z ? x : y > z ? z : y;
    let i = lo;
    let j = hi;
    while (i <= j) {
      while ((a[i] as number) > pivot) i++;
      while ((a[j] as number) < pivot) j--;
      if (i <= j) {
        const t = a[i] as number;
        a[i++] = a[j] as number;
        a[j--] = t;
      }
    }
    if (k <= j) hi = j;
    else if (k >= i) lo = i;
    else return a[k] as number;
  }
  return a[k] as number;
}
