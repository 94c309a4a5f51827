/**
 * RunningRanking against one sort of every pair (by score, ties to the lower position): chunks merged
 * one by one keep exactly the first `capacity` of the whole ranking — with many ties, -inf scores
 * (dropped or kept), +inf, chunks in any order and pairs given unsorted.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SeededRandom } from '../../weights/init-model.js';
import { BoundedHeaps, RunningRanking, selectDescending } from './indexer-ranking.js';

function reference(values: number[], ids: number[], capacity: number, keepInfinite: boolean): Array<[number, number]> {
  const pairs = values.map((v, j) => [v, ids[j] as number] as [number, number]).filter(([v]) => keepInfinite || v !== -Infinity);
  pairs.sort((a, b) => (a[0] === b[0] ? a[1] - b[1] : b[0] - a[0]));
  return pairs.slice(0, capacity);
}

test('RunningRanking: chunks merged one by one keep the first capacity pairs of one ranking of all, ties to the lower position', () => {
  const rng = new SeededRandom(3);
  const levels = [-Infinity, -1, 0, 0.5, 0.5, 1, 2, Infinity];
  for (let trial = 0; trial < 200; trial++) {
    const capacity = 1 + (rng.nextU32() % 12);
    const chunks = 1 + (rng.nextU32() % 5);
    const keepInfinite = trial % 2 === 0;
    const ranking = new RunningRanking(2, capacity);
    const all: number[] = [];
    const allIds: number[] = [];
    // positions 0..chunks·16: each chunk a disjoint range, chunks in a shuffled order
    const order = Array.from({ length: chunks }, (_, c) => c).sort(() => (rng.nextU32() % 2 === 0 ? -1 : 1));
    for (const c of order) {
      const n = rng.nextU32() % 9;
      const ids = Array.from({ length: 16 }, (_, j) => 100 + c * 16 + j)
        .sort(() => (rng.nextU32() % 2 === 0 ? -1 : 1))
        .slice(0, n);
      const values = ids.map(() => (trial % 3 === 0 ? (levels[rng.nextU32() % levels.length] as number) : Math.fround((rng.nextU32() % 1000) / 7)));
      // half the chunks as a TopK gives them (ranked), half unsorted; positions shifted by 100
      const pairs = values.map((v, j) => [v, ids[j] as number] as [number, number]);
      if (c % 2 === 0) pairs.sort((a, b) => (a[0] === b[0] ? a[1] - b[1] : b[0] - a[0]));
      const v = Float32Array.from(pairs, (p) => p[0]);
      const i = Int32Array.from(pairs, (p) => p[1]);
      const padded = new Float32Array(3 + n);
      padded.set(v, 3);
      const paddedIds = new Int32Array(3 + n);
      paddedIds.set(i, 3);
      ranking.merge(1, padded, paddedIds, 3, n, 100, keepInfinite);
      for (const [pv, pi] of pairs) {
        all.push(pv);
        allIds.push(pi - 100);
      }
    }
    const want = reference(all, allIds, capacity, keepInfinite);
    const got = Array.from({ length: ranking.count[1] as number }, (_, j) => [ranking.values[capacity + j] as number, ranking.ids[capacity + j] as number]);
    assert.deepEqual(got, want, `trial ${trial}`);
    assert.equal(ranking.count[0], 0, 'row 0 untouched');
  }
});

test('BoundedHeaps.assign keeps the set that pushing the pairs one by one keeps, as a heap later pushes extend alike; selectDescending', () => {
  const rng = new SeededRandom(21);
  const levels = [-3.5, -1, 0, 0.25, 0.5, 2, 7, Infinity];
  for (let trial = 0; trial < 400; trial++) {
    const cap = [0, 1, 7, 64][trial % 4] as number;
    const n = rng.nextU32() % 300;
    // ascending distinct ids, values with many ties (a few levels) or all distinct
    const ids = new Int32Array(n);
    const values = new Float32Array(n);
    let id = 0;
    for (let j = 0; j < n; j++) {
      id += 1 + (rng.nextU32() % 3);
      ids[j] = id;
      values[j] = trial % 3 === 0 ? (rng.nextU32() % 100000) / 7 : (levels[rng.nextU32() % levels.length] as number);
    }
    const one = new BoundedHeaps(2, cap);
    for (let j = 0; j < n; j++) if (one.accepts(1, values[j] as number, ids[j] as number)) one.push(1, values[j] as number, ids[j] as number);
    const sel = new BoundedHeaps(2, cap);
    sel.assign(1, values, ids, n, new Float32Array(n));
    const set = (h: BoundedHeaps) => Array.from(h.ids.subarray(cap, cap + (h.size[1] as number))).sort((a, b) => a - b);
    assert.deepEqual(set(sel), set(one), `trial ${trial}: ${n} pairs, capacity ${cap}`);
    assert.equal(sel.size[0], 0);
    // both go on alike: the assigned heap is a valid heap
    for (let j = 0; j < 40; j++) {
      const v = levels[rng.nextU32() % levels.length] as number;
      const late = 1000 + j;
      if (one.accepts(1, v, late)) one.push(1, v, late);
      if (sel.accepts(1, v, late)) sel.push(1, v, late);
    }
    assert.deepEqual(set(sel), set(one), `trial ${trial}: after later pushes`);
    if (n > 0) {
      const k = rng.nextU32() % n;
      const sorted = Array.from(values).sort((a, b) => b - a);
      assert.equal(selectDescending(values.slice(), n, k), sorted[k]);
    }
  }
  assert.throws(() => new BoundedHeaps(1, 2).assign(0, new Float32Array(3), new Int32Array(3), 4, new Float32Array(4)), /4 pairs of 3/);
});
