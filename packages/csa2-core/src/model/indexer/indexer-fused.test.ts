/**
 * The fused index-score kernel (model/indexer/indexer-fused) against the split path it replaces (keys
 * unpacked, onnxruntime's Gemm, the finish in WebAssembly: itself tested bit for bit against the ONNX
 * graphs in indexer-scores.test.ts), and against a float64 reference of its own arithmetic:
 * - bit for bit on MXFP4 queries and keys whose block scales lie within 2^±2 of each other (so the
 *   blocks' exact products, ≤ 13 bits each, differ by at most 2^8 and their sum fits float32's 24 bits
 *   in any order: the condition under which the two must agree), for 1–4 heads, index_head_dim 32, 64 and 128, bf16 and fp32 numerics,
 *   runs of 1 and of many rows, key counts that are not multiples of anything;
 * - with scales spread up to 2^±40 (where the exact q·k needs more than float32's 24 bits and the
 *   Gemm's order of additions matters) every score is the float64 reference's: each block's exact
 *   integer dot times its two scales, the blocks added in float32 in order, then the finish;
 * - queries that are not MXFP4 values are refused, and the scorer falls back to the Gemm.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { ModelConfig } from '../../config/model-config.js';
import { fakeQuantFp4Ue8m0Block32, quantizeIndexKRows } from '../../numerics/formats.js';
import { openGraphSession } from '../../runtime/ort-session.js';
import { SeededRandom } from '../../weights/init-model.js';
import { buildIndexScoresGraph } from '../graphs/indexer-graphs.js';
import type { NumericsMode } from '../graphs/graph-ops.js';
import { FusedIndexScorer } from './indexer-fused.js';
import { nextUpF32, pushRow, type ScoreRows } from './indexer-scan-run.js';
import { IndexScorer } from './indexer-scores.js';
import { BoundedHeaps } from './indexer-ranking.js';

const bf16 = (v: number): number => {
  const b = new Uint32Array(new Float32Array([v]).buffer)[0] as number;
  const r = ((b + 0x7fff + ((b >>> 16) & 1)) & 0xffff0000) >>> 0;
  return new Float32Array(new Uint32Array([r]).buffer)[0] as number;
};

/** Rows × heads × d MXFP4 queries (each 32-block scaled by 2^u, u uniform in ±spread) and head weights. */
function queries(rng: SeededRandom, rows: number, heads: number, d: number, spread: number): ScoreRows {
  const iq = new Float32Array(rows * heads * d);
  for (let b = 0; b < iq.length / 32; b++) {
    const s = 2 ** ((rng.nextU32() % (2 * spread + 1)) - spread);
    for (let j = 0; j < 32; j++) iq[b * 32 + j] = ((rng.nextU32() % 2001) / 1000 - 1) * s;
  }
  fakeQuantFp4Ue8m0Block32(iq, d);
  const iw = Float32Array.from({ length: rows * heads }, () => bf16((rng.nextU32() % 2001) / 1000 - 1));
  return { iq, iw, rows };
}

function keys(rng: SeededRandom, n: number, d: number, spread: number): Uint8Array {
  const v = new Float32Array(n * d);
  for (let b = 0; b < v.length / 32; b++) {
    const s = 2 ** ((rng.nextU32() % (2 * spread + 1)) - spread);
    for (let j = 0; j < 32; j++) v[b * 32 + j] = ((rng.nextU32() % 2001) / 1000 - 1) * s;
  }
  return quantizeIndexKRows(v, d);
}

/** The float64 reference of the fused arithmetic for row r, key n (values from the packed key and the float queries). */
function reference(q: ScoreRows, r: number, packed: Uint8Array, n: number, heads: number, d: number, round: boolean): number {
  const rowBytes = d / 2 + d / 32;
  const e2m1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6];
  let acc = 0;
  for (let h = 0; h < heads; h++) {
    let p = 0;
    for (let b = 0; b < d / 32; b++) {
      const sb = packed[n * rowBytes + d / 2 + b] as number;
      const scale = sb === 0xff ? 0 : 2 ** (sb - 127);
      let dot = 0; // exact in float64: ≤ 32 products of ≤ 4 significant bits each, one scale per block
      for (let j = 0; j < 32; j++) {
        const byte = packed[n * rowBytes + b * 16 + (j >> 1)] as number;
        dot += (q.iq[(r * heads + h) * d + b * 32 + j] as number) * (e2m1[(j & 1) === 0 ? byte & 15 : byte >> 4] as number);
      }
      p = Math.fround(p + Math.fround(dot * scale));
    }
    let x = round ? bf16(p) : p;
    if (x < 0 || Object.is(x, -0)) x = 0;
    let y = Math.fround(x * (q.iw[r * heads + h] as number));
    if (round) y = bf16(y);
    acc = Math.fround(acc + y);
  }
  return round ? bf16(acc) : acc;
}

function config(heads: number, d: number): ModelConfig {
  return { indexNumHeads: heads, indexHeadDim: d } as unknown as ModelConfig;
}

async function gemmScorer(heads: number, d: number, mode: NumericsMode): Promise<IndexScorer> {
  const c = config(heads, d);
  const session = await openGraphSession(
    'index_scores',
    buildIndexScoresGraph({ config: c, mode, weights: { get: () => new Float32Array(0) } } as never, false),
  );
  return new IndexScorer(c, mode, session, false);
}

const bitsEqual = (a: Float32Array, b: Float32Array): number => {
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  let differ = 0;
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) differ++;
  return differ;
};

test('fused index scores = the split path (unpack, Gemm, finish) bit for bit, 1–4 heads, d 32 / 64 / 128, bf16 and fp32', async () => {
  const rng = new SeededRandom(41);
  for (const mode of ['bf16', 'fp32'] as const) {
    for (const d of [32, 64, 128]) {
      for (const heads of [1, 2, 3, 4]) {
        const gemm = await gemmScorer(heads, d, mode);
        const fused = new FusedIndexScorer(heads, d, mode === 'bf16');
        let nonZero = 0;
        for (const [rows, n] of [
          [1, 1],
          [1, 777],
          [5, 300],
          [160, 213],
        ] as const) {
          const q = queries(rng, rows, heads, d, 2);
          const packed = keys(rng, n, d, 2);
          gemm.loadKeys(packed, n);
          await gemm.run(q, 0, n);
          assert.ok(fused.loadRows(q), 'MXFP4 queries are taken');
          fused.score(packed, n);
          for (let r = 0; r < rows; r++) {
            const want = gemm.scoreRow(r, n);
            const got = fused.scoreRow(r, n);
            const differ = bitsEqual(got, want);
            assert.equal(differ, 0, `${mode}, d ${d}, ${heads} heads, ${rows} rows × ${n} keys: row ${r}, ${differ} of ${n} scores differ`);
          }
          for (let r = 0; r < rows; r++) nonZero += fused.scoreRow(r, n).filter((v) => v !== 0).length;
        }
        assert.ok(nonZero > 1000, `${mode}, d ${d}, ${heads} heads: ${nonZero} non-zero scores`);
        await gemm.dispose();
      }
    }
  }
});

test('fused index scores with block scales spread to 2^±40 are the float64 reference of their arithmetic', () => {
  const rng = new SeededRandom(43);
  for (const mode of ['bf16', 'fp32'] as const) {
    for (const d of [64, 128]) {
      const heads = 4;
      const fused = new FusedIndexScorer(heads, d, mode === 'bf16');
      const q = queries(rng, 7, heads, d, 40);
      const n = 150;
      const packed = keys(rng, n, d, 40);
      assert.ok(fused.loadRows(q));
      fused.score(packed, n);
      for (let r = 0; r < q.rows; r++) {
        const got = fused.scoreRow(r, n);
        for (let i = 0; i < n; i++) {
          const want = reference(q, r, packed, i, heads, d, mode === 'bf16');
          assert.ok(Object.is(got[i], want) || (got[i] === 0 && want === 0), `${mode}, d ${d}: row ${r} key ${i}: ${got[i]} vs ${want}`);
        }
      }
    }
  }
});

test('queries that are not MXFP4 values are refused and the scorer falls back to the Gemm', async () => {
  const rng = new SeededRandom(47);
  const heads = 2;
  const d = 32;
  const q = queries(rng, 3, heads, d, 2);
  const notFp4: ScoreRows = { ...q, iq: q.iq.map((v, i) => (i === 5 ? v + 0.01 : v)) };
  assert.equal(new FusedIndexScorer(heads, d, true).loadRows(notFp4), false);
  const packed = keys(rng, 40, d, 2);
  const c = config(heads, d);
  const both = await Promise.all(
    [true, false].map(async (useFused) => {
      const session = await openGraphSession(
        'index_scores',
        buildIndexScoresGraph({ config: c, mode: 'bf16', weights: { get: () => new Float32Array(0) } } as never, false),
      );
      const s = new IndexScorer(c, 'bf16', session, useFused);
      s.loadKeys(packed, 40);
      await s.run(notFp4, 0, 40);
      const rows = [0, 1, 2].map((r) => s.scoreRow(r, 40).slice());
      await s.dispose();
      return rows;
    }),
  );
  both[0]?.forEach((row, r) => assert.equal(bitsEqual(row, both[1]?.[r] as Float32Array), 0, `row ${r}`));
  assert.throws(() => new FusedIndexScorer(5, 32, true), /1–4 heads/);
});

test('above: the keys of a row scoring at least a threshold, ascending, from any start; pushRow visiting only them keeps the same heaps', async () => {
  const rng = new SeededRandom(77);
  const [rows, heads, d, n] = [3, 2, 32, 4099];
  const scorer = new FusedIndexScorer(heads, d, true);
  const q = queries(rng, rows, heads, d, 2);
  const packed = keys(rng, n, d, 2);
  assert.ok(scorer.loadRows(q));
  scorer.score(packed, n);
  for (let r = 0; r < rows; r++) {
    const s = Float32Array.from(scorer.scoreRow(r, n));
    const sorted = Float32Array.from(s).sort();
    // thresholds: below everything, exact score values (ties with a threshold are listed), above everything
    for (const thr of [-Infinity, sorted[0] as number, sorted[n >> 1] as number, sorted[n - 7] as number, sorted[n - 1] as number, Infinity]) {
      for (const from of [0, 1, 2, 3, 1234, n - 2]) {
        const got = Array.from(scorer.above(r, from, n, thr)).filter((i) => i < n);
        const want: number[] = [];
        for (let i = from; i < n; i++) if ((s[i] as number) >= thr) want.push(i);
        assert.deepEqual(got, want, `row ${r}, from ${from}, threshold ${thr}`);
      }
    }
    // the scan's push with and without the filter: every heap entry the same (cap 16 and 200, with ties: bf16 scores repeat)
    for (const cap of [16, 200]) {
      const a = new BoundedHeaps(1, cap);
      const b = new BoundedHeaps(1, cap);
      const blocksA = { heaps: new BoundedHeaps(1, 8), blockSize: 8, pin: 3 };
      const blocksB = { heaps: new BoundedHeaps(1, 8), blockSize: 8, pin: 3 };
      let asked = 0;
      pushRow(scorer.scoreRow(r, n), n, 64, 0, a, blocksA, (from, thr) => (asked++, scorer.above(r, from, n, thr)));
      pushRow(s, n, 64, 0, b, blocksB, null);
      assert.ok(asked === 1, 'the filter was asked');
      assert.deepEqual(
        [Array.from(a.values), Array.from(a.ids), Array.from(a.size)],
        [Array.from(b.values), Array.from(b.ids), Array.from(b.size)],
        `cap ${cap}: top-k heap`,
      );
      assert.deepEqual(
        [Array.from(blocksA.heaps.values), Array.from(blocksA.heaps.ids)],
        [Array.from(blocksB.heaps.values), Array.from(blocksB.heaps.ids)],
        `cap ${cap}: block heap`,
      );
    }
  }
  // keys pushed out of position order (the later half first): ties with the worst may then enter, and the
  // filter must list them (≥, not >): the same heaps again
  {
    const s = Float32Array.from(scorer.scoreRow(0, n));
    const half = 2048;
    const a = new BoundedHeaps(1, 64);
    const b = new BoundedHeaps(1, 64);
    for (const [from, to] of [
      [half, n],
      [0, half],
    ] as const) {
      const view = s.subarray(from, to);
      pushRow(view, to - from, from, 0, a, null, (f, thr) => {
        const all: number[] = [];
        for (let i = f; i < to - from; i++) if ((view[i] as number) >= thr) all.push(i);
        return Int32Array.from(all);
      });
      pushRow(view, to - from, from, 0, b, null, null);
    }
    assert.deepEqual([Array.from(a.values), Array.from(a.ids)], [Array.from(b.values), Array.from(b.ids)], 'out of order: the same heap');
  }
  const ties = new Set(Array.from(scorer.scoreRow(0, n))).size;
  assert.ok(ties < n, `bf16 scores repeat (${ties} distinct of ${n}): ties are exercised`);
});

test('nextUpF32: the least float32 above x, so that ≥ it is > x', () => {
  const f = (v: number) => Math.fround(v);
  for (const x of [1, -1, 0.3, -0.3, 1e-38, -1e-38, 3.4e38, -3.4e38, 2 ** -149, -(2 ** -149), 123456.789]) {
    const fx = f(x);
    const up = nextUpF32(fx);
    assert.ok(up > fx && f(up) === up, `${fx}: ${up}`);
    // nothing in between: the midpoint rounds to one of the two
    const mid = f((fx + up) / 2);
    assert.ok(mid === fx || mid === up, `${fx}: midpoint ${mid}`);
  }
  assert.equal(nextUpF32(0), 2 ** -149);
  assert.equal(nextUpF32(-0), 2 ** -149);
  assert.equal(nextUpF32(-(2 ** -149)), -0);
  assert.equal(nextUpF32(-Infinity), -3.4028234663852886e38);
  assert.equal(nextUpF32(Infinity), Infinity);
  assert.ok(Number.isNaN(nextUpF32(Number.NaN)));
});

test("blockMax: each block's largest score as the JS loop takes it (NaN left out, -inf for none); pushRow's block heap the same with it", () => {
  const rng = new SeededRandom(91);
  const [rows, heads, d, n] = [2, 2, 32, 1000];
  const scorer = new FusedIndexScorer(heads, d, true);
  assert.ok(scorer.loadRows(queries(rng, rows, heads, d, 2)));
  scorer.score(keys(rng, n, d, 2), n);
  // scores a real run cannot have, written into the scorer's own rows: NaN, -inf, a block of NaN only, ±0
  const s0 = scorer.scoreRow(0, n);
  s0[3] = Number.NaN;
  s0[17] = -Infinity;
  s0.fill(Number.NaN, 24, 32);
  s0.fill(-Infinity, 32, 40);
  s0.fill(0, 40, 48);
  s0[41] = -0;
  for (const bs of [4, 8, 16]) {
    for (let r = 0; r < rows; r++) {
      const s = Float32Array.from(scorer.scoreRow(r, n));
      const whole = Math.floor(n / bs);
      const got = Array.from(scorer.blockMax(r, whole, bs));
      const want = Array.from({ length: whole }, (_, j) => {
        let m = -Infinity;
        for (let k = j * bs; k < (j + 1) * bs; k++) if ((s[k] as number) > m) m = s[k] as number;
        return m;
      });
      assert.deepEqual(
        got.map((v) => (v === 0 ? 0 : v)),
        want.map((v) => (v === 0 ? 0 : v)),
        `bs ${bs}, row ${r}`,
      );
      const a = { heaps: new BoundedHeaps(1, 16), blockSize: bs, pin: 5 };
      const b = { heaps: new BoundedHeaps(1, 16), blockSize: bs, pin: 5 };
      pushRow(scorer.scoreRow(r, n), n, 0, 0, new BoundedHeaps(1, 8), a, null, (nb) => scorer.blockMax(r, nb, bs));
      pushRow(s, n, 0, 0, new BoundedHeaps(1, 8), b, null, null);
      assert.deepEqual(
        [Array.from(a.heaps.ids), Array.from(a.heaps.size)],
        [Array.from(b.heaps.ids), Array.from(b.heaps.size)],
        `bs ${bs}, row ${r}: block heap`,
      );
    }
  }
  assert.throws(() => scorer.blockMax(0, 10, 6), /blocks of 6/);
});
