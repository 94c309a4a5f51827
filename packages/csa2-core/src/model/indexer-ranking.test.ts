/**
 * RunningRanking against one sort of every pair (by score, ties to the lower position): chunks merged
 * one by one keep exactly the first `capacity` of the whole ranking — with many ties, -inf scores
 * (dropped or kept), +inf, chunks in any order and pairs given unsorted.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SeededRandom } from '../weights/init-model.js';
import { RunningRanking } from './indexer-ranking.js';

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
