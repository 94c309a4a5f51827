/**
 * hcSplitSinkhorn's n = 4 path (the 16 values in locals) against the loops for any n
 * (hcSplitSinkhornAnyN, which graph-ops-hc.test checks against the float64 reference): the same float32
 * operations in the same order, so bit for bit — on random mixes, on near-one-hot combs (a large comb
 * scale: the +ε terms decide), on zeros, and at T = 0, 1, 2, 20 iterations.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SeededRandom } from '../../weights/init-model.js';
import { hcSplitSinkhorn, hcSplitSinkhornAnyN } from './hc-sinkhorn.js';

const n = 4;
const M = (2 + n) * n;

function mismatches(a: Float32Array, b: Float32Array): number[] {
  assert.equal(a.length, b.length);
  const u = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const v = new Uint32Array(b.buffer, b.byteOffset, b.length);
  const out: number[] = [];
  for (let i = 0; i < u.length; i++) if (u[i] !== v[i]) out.push(i);
  return out;
}

test('hcSplitSinkhorn n = 4: bit for bit the any-n loops (random, near-one-hot, zero mixes; T = 0, 1, 2, 20)', () => {
  const rng = new SeededRandom(4242);
  const rows = 64;
  const mixes = new Float32Array(rows * M);
  for (let i = 0; i < mixes.length; i++) mixes[i] = rng.nextNormal() * (i < 8 * M ? 0 : i < 32 * M ? 1 : 30);
  const base = Float32Array.from({ length: M }, () => rng.nextNormal() * 0.5);
  let compared = 0;
  for (const scale of [Float32Array.of(0.5, 0.6, 0.4), Float32Array.of(0.5, 0.6, 40)]) {
    for (const iters of [0, 1, 2, 20]) {
      const p = { n, iters, eps: 1e-6, scale, base };
      const fast = hcSplitSinkhorn(mixes, p);
      const loops = hcSplitSinkhornAnyN(mixes, p);
      for (const key of ['pre', 'post', 'comb'] as const) {
        assert.deepEqual(mismatches(fast[key], loops[key]), [], `scale ${scale[2]}, T = ${iters}: ${key}`);
        compared += fast[key].length;
      }
      // the check can fail: one iteration more or less changes the comb
      if (iters >= 1) {
        const other = hcSplitSinkhornAnyN(mixes, { ...p, iters: iters + 1 });
        assert.ok(mismatches(fast.comb, other.comb).length > 0, `T = ${iters} differs from T = ${iters + 1}`);
      }
    }
  }
  assert.equal(compared, 2 * 4 * rows * (n + n + n * n));
});
