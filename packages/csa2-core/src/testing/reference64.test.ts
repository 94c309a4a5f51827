import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ShapeError } from '../errors.js';
import { seededUniform } from '../weights/init-model.js';
import {
  V41_YARN,
  applyRope64,
  candidateBlocks64,
  compressPool64,
  compressRatio1_64,
  compressRatio2_64,
  groupedOutProj64,
  hcMixes64,
  hcPost64,
  hcPre64,
  hcSplitSinkhorn64,
  indexScores64,
  moeGate64,
  rmsNorm64,
  ropeCosSin64,
  ropeCosSinF32,
  ropeFreqs64,
  ropeFreqsF32,
  softplus64,
  sparseAttention64,
  swigluExpert64,
  topK64,
  yarnCorrectionRange,
} from './reference64.js';

const F = Float64Array;

function assertClose(actual: ArrayLike<number>, expected: ArrayLike<number>, tol: number, label: string): void {
  assert.equal(actual.length, expected.length, `${label}: length`);
  for (let i = 0; i < actual.length; i++) {
    const a = actual[i] ?? NaN;
    const e = expected[i] ?? NaN;
    assert.ok(Math.abs(a - e) <= tol * Math.max(1, Math.abs(e)), `${label}[${i}]: ${a} vs ${e}`);
  }
}

function randomArray(rand: () => number, length: number, amplitude = 1): Float64Array {
  return F.from({ length }, () => (rand() * 2 - 1) * amplitude);
}

// ---------------------------------------------------------------------------------------------

test('rmsNorm64 normalizes each row and then applies the weight', () => {
  const y = rmsNorm64(new F([3, 4, 0, 2]), new F([1, 2]), 2, 2, 0);
  const r0 = Math.sqrt((9 + 16) / 2);
  assertClose(y, [3 / r0, 8 / r0, 0, (2 * 2) / Math.sqrt(2)], 1e-15, 'rms');
  // eps only matters for near-zero rows: an all-zero row stays 0 with eps > 0.
  assert.deepEqual(Array.from(rmsNorm64(new F(3), new F([1, 1, 1]), 1, 3, 1e-20)), [0, 0, 0]);
  assert.throws(() => rmsNorm64(new F(3), new F(2), 1, 3, 0), ShapeError);
});

test('RoPE rotates the interleaved pairs of the last ropeDim dims, and inverse undoes it', () => {
  // width 6, ropeDim 4: dims 0-1 untouched; pair (2,3) rotated by 90°, pair (4,5) by 45°.
  const { cos, sin } = ropeCosSin64(new F([Math.PI / 2, Math.PI / 4]), [1]);
  const x = new F([7, 8, 1, 0, 1, 0]);
  const y = applyRope64(x, 1, 6, 4, cos, sin, false);
  assertClose(y, [7, 8, 0, 1, Math.SQRT1_2, Math.SQRT1_2], 1e-15, 'rope');
  const back = applyRope64(y, 1, 6, 4, cos, sin, true);
  assertClose(back, x, 1e-15, 'inverse');
  // Inverse alone rotates by -90°.
  assertClose(applyRope64(x, 1, 6, 4, cos, sin, true).subarray(2, 4), [0, -1], 1e-15, 'conj');
  // Rows grouped by position: 2 positions × 2 heads; position 0 is the identity.
  const table = ropeCosSin64(new F([Math.PI / 2]), [0, 1]);
  const heads = applyRope64(new F([1, 0, 2, 0, 1, 0, 0, 3]), 4, 2, 2, table.cos, table.sin, false);
  assertClose(heads, [1, 0, 2, 0, 0, 1, -3, 0], 1e-15, 'grouped');
  // Random round trip at real sizes.
  const rand = seededUniform(5);
  const freqs = ropeFreqs64(64, 160000, V41_YARN);
  const big = ropeCosSin64(freqs, [0, 1, 1000, 1048575]);
  const v = randomArray(rand, 4 * 512);
  assertClose(applyRope64(applyRope64(v, 4, 512, 64, big.cos, big.sin, false), 4, 512, 64, big.cos, big.sin, true), v, 1e-12, 'rt');
  assert.throws(() => applyRope64(v, 4, 512, 64, new F(3 * 32), new F(3 * 32), false), ShapeError);
});

test('RoPE frequencies without YaRN: base^(-2i/dim)', () => {
  const freqs = ropeFreqs64(64, 10000);
  assert.equal(freqs.length, 32);
  assert.equal(freqs[0], 1);
  assertClose([freqs[16] ?? 0], [0.01], 1e-15, 'f16');
  assertClose([freqs[31] ?? 0], [10000 ** (-62 / 64)], 1e-15, 'f31');
  // original_seq_len 0 disables YaRN even when the other fields are set.
  assert.deepEqual(ropeFreqs64(64, 10000, { ...V41_YARN, originalSeqLen: 0 }), freqs);
});

test('YaRN for the released parameters: low = 15, high = 25, ramp between', () => {
  assert.deepEqual(yarnCorrectionRange(64, 160000, V41_YARN), { low: 15, high: 25 });
  const plain = ropeFreqs64(64, 160000);
  const yarn = ropeFreqs64(64, 160000, V41_YARN);
  for (let i = 0; i < 32; i++) {
    const ramp = Math.min(Math.max((i - 15) / 10, 0), 1);
    const expected = (plain[i] ?? 0) * (1 - ramp + ramp / 16);
    assertClose([yarn[i] ?? 0], [expected], 1e-15, `yarn ${i}`);
  }
  assert.equal(yarn[15], plain[15]); // ramp 0: unchanged
  assert.equal(yarn[25], (plain[25] ?? 0) / 16); // ramp 1: fully interpolated
  // The ropeDim - 1 quirk: with a tiny base the upper bound clamps at 63, not 31.
  assert.equal(yarnCorrectionRange(64, 1.5, V41_YARN).high, 63);
});

test('fp32 RoPE table follows the reference fp32 arithmetic', () => {
  const f32 = ropeFreqsF32(64, 160000, V41_YARN);
  const f64 = ropeFreqs64(64, 160000, V41_YARN);
  assert.equal(f32[0], 1);
  for (let i = 0; i < 32; i++) {
    const v = f32[i] ?? 0;
    assert.equal(Math.fround(v), v);
    const e = f64[i] ?? 0;
    assert.ok(Math.abs(v - e) <= 2 ** -21 * e, `freq ${i}: ${v} vs ${e}`);
  }
  // Hand-emulated entry 20 (ramp 0.5): every op rounded to fp32.
  const fr = Math.fround;
  const base20 = fr(1 / fr(160000 ** fr(40 / 64)));
  const smooth = fr(1 - fr(fr(20 - 15) / 10));
  assert.equal(f32[20], fr(fr(fr(base20 / 16) * fr(1 - smooth)) + fr(base20 * smooth)));
  // Plain table (base 10000): entry 16 is fp32(1 / 100).
  assert.equal(ropeFreqsF32(64, 10000)[16], fr(0.01));
  // cis: angle rounded to fp32 before cos/sin.
  const { cos, sin } = ropeCosSinF32(f32, [0, 3, 1048575]);
  assert.equal(cos[0], 1);
  assert.equal(sin[0], 0);
  const angle = fr(1048575 * (f32[1] ?? 0));
  assert.equal(cos[2 * 32 + 1], fr(Math.cos(angle)));
  assert.equal(sin[2 * 32 + 1], fr(Math.sin(angle)));
  assert.equal(cos.length, 3 * 32);
});

// ---------------------------------------------------------------------------------------------

test('hc sinkhorn: pre/post sigmoids and a doubly stochastic comb after many iterations', () => {
  const n = 4;
  const m = (2 + n) * n;
  const rand = seededUniform(9);
  const mixes = randomArray(rand, m, 3);
  const base = randomArray(rand, m, 1);
  const scale = new F([0.5, 1.5, 2]);
  const { pre, post, comb } = hcSplitSinkhorn64(mixes, scale, base, n, 200, 1e-6);
  for (let j = 0; j < n; j++) {
    const s0 = 1 / (1 + Math.exp(-((mixes[j] ?? 0) * 0.5 + (base[j] ?? 0))));
    assertClose([pre[j] ?? 0], [s0 + 1e-6], 1e-15, 'pre');
    const s1 = 1 / (1 + Math.exp(-((mixes[n + j] ?? 0) * 1.5 + (base[n + j] ?? 0))));
    assertClose([post[j] ?? 0], [2 * s1], 1e-15, 'post');
  }
  for (let j = 0; j < n; j++) {
    let row = 0;
    let col = 0;
    for (let k = 0; k < n; k++) {
      row += comb[j * n + k] ?? 0;
      col += comb[k * n + j] ?? 0;
    }
    assertClose([row, col], [1, 1], 1e-5, `sums ${j}`);
  }
});

test('hc sinkhorn with one iteration is softmax + eps then one column normalization', () => {
  const n = 2;
  const mixes = new F(8);
  mixes[4] = Math.log(3); // comb logits row 0 = [ln 3, 0] -> softmax [0.75, 0.25]
  const { pre, post, comb } = hcSplitSinkhorn64(mixes, new F([1, 1, 1]), new F(8), n, 1, 0.01);
  assertClose(pre, [0.51, 0.51], 1e-15, 'pre');
  assert.deepEqual(Array.from(post), [1, 1]);
  const c = [0.75 + 0.01, 0.25 + 0.01, 0.5 + 0.01, 0.5 + 0.01];
  const col0 = (c[0] ?? 0) + (c[2] ?? 0) + 0.01;
  const col1 = (c[1] ?? 0) + (c[3] ?? 0) + 0.01;
  assertClose(comb, [(c[0] ?? 0) / col0, (c[1] ?? 0) / col1, (c[2] ?? 0) / col0, (c[3] ?? 0) / col1], 1e-15, 'comb');
});

test('hcMixes64 scales fn·x by the stream RMS', () => {
  const n = 2;
  const d = 3;
  const m = (2 + n) * n;
  const rand = seededUniform(3);
  const stream = randomArray(rand, n * d);
  const fn = randomArray(rand, m * n * d);
  const scale = new F([1, 1, 1]);
  const base = new F(m);
  // Hand mixes -> the same split as hcSplitSinkhorn64.
  const rms = Math.sqrt(stream.reduce((a, v) => a + v * v, 0) / (n * d));
  const mixes = F.from({ length: m }, (_, row) => {
    let dot = 0;
    for (let i = 0; i < n * d; i++) dot += (fn[row * n * d + i] ?? 0) * (stream[i] ?? 0);
    return dot / rms;
  });
  const expected = hcSplitSinkhorn64(mixes, scale, base, n, 20, 1e-6);
  const actual = hcMixes64(stream, fn, scale, base, n, 20, 1e-6, 1e-20);
  assertClose(actual.pre, expected.pre, 1e-14, 'pre');
  assertClose(actual.comb, expected.comb, 1e-12, 'comb');
  // Scale invariance of the normalized mixes.
  const scaled = hcMixes64(
    stream.map((v) => v * 1000),
    fn,
    scale,
    base,
    n,
    20,
    1e-6,
    1e-20,
  );
  assertClose(scaled.post, actual.post, 1e-12, 'invariant');
});

test('hcPre64 and hcPost64: weighted collapse and column-k expansion', () => {
  const stream = new F([1, 2, 10, 20]); // n = 2, d = 2
  assert.deepEqual(Array.from(hcPre64(stream, new F([0.5, 0.25]), 2, 2)), [3, 6]);
  // comb[j*n + k]: copy j -> copy k. comb = [[1, 2], [3, 4]].
  const y = hcPost64(new F([100, 200]), stream, new F([1, 2]), new F([1, 2, 3, 4]), 2, 2);
  // Y[0] = 1·x + comb[0][0]·R0 + comb[1][0]·R1 = [100 + 1 + 30, 200 + 2 + 60]
  // Y[1] = 2·x + comb[0][1]·R0 + comb[1][1]·R1 = [200 + 2 + 40, 400 + 4 + 80]
  assert.deepEqual(Array.from(y), [131, 262, 242, 484]);
});

// ---------------------------------------------------------------------------------------------

test('compressor pooling: equal scores give the mean, -inf slots are ignored', () => {
  const kv = new F([1, 10, 3, 20]); // [2 tokens, D = 2]
  assert.deepEqual(Array.from(compressRatio2_64(kv, new F([0.7, -2, 0.7, -2]))), [2, 15]);
  assert.deepEqual(Array.from(compressRatio2_64(kv, new F([5, 0, -Infinity, 0]))), [1, 15]);
  // softmax weights e^1 / (e^1 + e^0) on channel 0
  const w = Math.E / (Math.E + 1);
  assertClose(compressPool64(kv, new F([1, 0, 0, 0]), 2, 2), [w * 1 + (1 - w) * 3, 15], 1e-15, 'gate');
  assert.deepEqual(Array.from(compressRatio1_64(new Float32Array([1.5, -2]))), [1.5, -2]);
});

test('index scores sum weighted ReLU dot products over heads', () => {
  const q = new F([1, 0, 0, 1]); // h = 2, dI = 2
  const keys = new F([2, 3, -1, 5, -4, -4]); // n = 3
  const scores = indexScores64(q, new F([0.5, 2]), keys, 2, 2);
  // j0: 0.5·relu(2) + 2·relu(3) = 7; j1: 0.5·0 + 2·5 = 10; j2: 0
  assert.deepEqual(Array.from(scores), [7, 10, 0]);
});

test('topK64: higher score first, ties to the lower index, sorted ascending, -inf picks become -1', () => {
  assert.deepEqual(Array.from(topK64(new F([1, 3, 3, 2, 3]), 2)), [1, 2]);
  assert.deepEqual(Array.from(topK64(new F([0, 0, 0, 0]), 3)), [0, 1, 2]);
  assert.deepEqual(Array.from(topK64(new F([5, 9, -Infinity, -Infinity]), 3)), [0, 1, -1]);
  assert.deepEqual(Array.from(topK64(new F([2, 1]), 512)), [0, 1]); // kk = min(k, n)
  assert.deepEqual(Array.from(topK64(new F([-Infinity, -Infinity]), 2)), [-1, -1]);
  assert.equal(topK64(new F(0), 4).length, 0);
});

test('candidateBlocks64 pins the newest block and keeps the best others, lower block on ties', () => {
  const blockSize = 4;
  const scores = new F(20).fill(-Infinity);
  scores.set([1, 1, 1, 1], 0); // block 0 max 1
  scores.set([5, 0, 0, 0], 4); // block 1 max 5
  scores.set([5, 5, 0, 0], 8); // block 2 max 5 (tie with block 1)
  scores.set([0, 0, 0, 0], 12); // block 3 max 0
  scores.set([-Infinity, -Infinity], 16); // block 4: newest visible (compressLen 17), all masked
  const compressLen = 17;
  // top 2: pinned block 4 (+inf) and block 1 (wins the tie against block 2)
  assert.deepEqual(Array.from(candidateBlocks64(scores, compressLen, 2, blockSize)), [
    ...[0, 0, 0, 0],
    ...[1, 1, 1, 1],
    ...[0, 0, 0, 0],
    ...[0, 0, 0, 0],
    ...[1, 1, 1, 1],
  ]);
  // top 3 adds block 2
  const three = candidateBlocks64(scores, compressLen, 3, blockSize);
  assert.deepEqual(Array.from(three.subarray(8, 12)), [1, 1, 1, 1]);
  // compressLen 0: nothing pinned, -inf blocks are dropped even when the budget allows them.
  const sparse = new F(8).fill(-Infinity);
  sparse[1] = 2;
  assert.deepEqual(Array.from(candidateBlocks64(sparse, 0, 5, blockSize)), [1, 1, 1, 1, 0, 0, 0, 0]);
  // n not a multiple of the block size: the last partial block is padded with -inf.
  assert.deepEqual(Array.from(candidateBlocks64(new F([3, 1, 4, 1, 5, 9]), 6, 1, blockSize)), [0, 0, 0, 0, 1, 1]);
  // Enough budget: every reachable block is kept (pool = whole visible history).
  assert.deepEqual(Array.from(candidateBlocks64(new F([3, 1, 4, 1, 5, -Infinity]), 5, 2048, blockSize)), [1, 1, 1, 1, 1, 1]);
});

// ---------------------------------------------------------------------------------------------

test('sparse attention: shared softmax with the sink in the denominator, V = K', () => {
  const kv = new F([1, 0, 0, 1, 4, 4]); // R = 3 rows, D = 2
  const q = new F([0, 0]); // H = 1: all logits 0
  // Without a sink (-inf), equal logits average the selected rows; duplicates count twice.
  assertClose(sparseAttention64(q, kv, [0, 1], new F([-Infinity]), 1), [0.5, 0.5], 1e-15, 'mean');
  assertClose(sparseAttention64(q, kv, [0, 0, 1, -1], new F([-Infinity]), 1), [2 / 3, 1 / 3], 1e-15, 'dup');
  // Sink logit 0 adds one unit of mass with a zero value.
  assertClose(sparseAttention64(q, kv, [0, 1], new F([0]), 1), [1 / 3, 1 / 3], 1e-15, 'sink');
  // A huge sink drives the output to ~0.
  const huge = sparseAttention64(new F([1, 1]), kv, [2], new F([1000]), 1);
  assert.ok(Math.abs(huge[0] ?? 1) < 1e-300 && Math.abs(huge[1] ?? 1) < 1e-300);
  // No valid key: 0.
  assert.deepEqual(Array.from(sparseAttention64(q, kv, [-1, -1], new F([0]), 1)), [0, 0]);
  // Two heads with scale: head 1 prefers row 2 strongly.
  const out = sparseAttention64(new F([0, 0, 1, 1]), kv, [0, 2], new F([-Infinity, -Infinity]), 10);
  const p = 1 / (1 + Math.exp(-70)); // logits 10·1 = 10 vs 10·8 = 80
  assertClose(out.subarray(2), [(1 - p) * 1 + p * 4, p * 4], 1e-12, 'head1');
  assert.throws(() => sparseAttention64(q, kv, [3], new F([0]), 1), ShapeError);
});

test('grouped output projection: group g uses the contiguous heads of its group', () => {
  // H = 2 heads, D = 1, G = 2 groups (one head each), R = 1: woA rows scale each head.
  const o = new F([3, 5]);
  const woA = new F([2, 10]); // [G·R = 2, H·D/G = 1]
  const woB = new F([1, 1, 1, -1, 0, 1]); // [dim = 3, G·R = 2]
  assert.deepEqual(Array.from(groupedOutProj64(o, woA, woB, 2, 1, 2, 1)), [56, -44, 50]);
  // One group of two heads, rank 2.
  const mid = groupedOutProj64(new F([1, 2]), new F([1, 1, 1, -1]), new F([1, 0, 0, 1]), 2, 1, 1, 2);
  assert.deepEqual(Array.from(mid), [3, -1]);
});

// ---------------------------------------------------------------------------------------------

test('moe gate: select on score + bias, weigh by the unbiased score, normalize, route scale', () => {
  const x = new F([1, 0]);
  const gateW = new F([0, 0, 1, 0, 2, 0, 30, 0]); // logits [0, 1, 2, 30]
  const s = [0, 1, 2, 30].map((z) => Math.sqrt(softplus64(z)));
  assert.equal(softplus64(30), 30); // torch threshold 20
  assertClose([softplus64(0)], [Math.LN2], 1e-15, 'softplus');
  // Bias favours expert 0 for selection only.
  const bias = new F([10, 0, 0, 0]);
  const { indices, weights } = moeGate64(x, gateW, bias, 2, 1.5, true, 'sqrtsoftplus');
  assert.deepEqual(Array.from(indices), [0, 3]);
  const total = (s[0] ?? 0) + (s[3] ?? 0) + 1e-20;
  assertClose(weights, [((s[0] ?? 0) / total) * 1.5, ((s[3] ?? 0) / total) * 1.5], 1e-15, 'weights');
  // Ties on score + bias go to the lower expert id.
  const tie = moeGate64(x, new F([1, 0, 1, 0, 1, 0]), new F(3), 2, 1, false, 'sigmoid');
  assert.deepEqual(Array.from(tie.indices), [0, 1]);
  assertClose(tie.weights, [1 / (1 + Math.exp(-1)), 1 / (1 + Math.exp(-1))], 1e-15, 'sigmoid');
  // k = 1 is never renormalized; softmax scores.
  const one = moeGate64(x, gateW, new F(4), 1, 2, true, 'softmax');
  assert.deepEqual(Array.from(one.indices), [3]);
  const z = [0, 1, 2, 30].map((v) => Math.exp(v - 30));
  assertClose(one.weights, [(2 * (z[3] ?? 0)) / z.reduce((a, b) => a + b, 0)], 1e-15, 'softmax');
});

test('swiglu expert: up clamped both sides, gate clamped above only, weight before w2', () => {
  const silu = (g: number): number => g / (1 + Math.exp(-g));
  // d = 1, inter = 3: g = w1·x, u = w3·x with x = 1.
  const w1 = new F([50, -50, 2]);
  const w3 = new F([-50, 3, 50]);
  const w2 = new F([1, 1, 1]);
  const h = [silu(10) * -10, silu(-50) * 3, silu(2) * 10];
  const out = swigluExpert64(new F([1]), w1, w3, w2, 1, 3, 10);
  assertClose(out, [h.reduce((a, b) => a + b, 0)], 1e-12, 'clamped');
  const weighted = swigluExpert64(new F([1]), w1, w3, w2, 1, 3, 10, 0.25);
  assertClose(weighted, [0.25 * h.reduce((a, b) => a + b, 0)], 1e-12, 'weighted');
  // limit 0 disables the clamp.
  const free = swigluExpert64(new F([1]), w1, w3, w2, 1, 3, 0);
  assertClose(free, [silu(50) * -50 + silu(-50) * 3 + silu(2) * 50], 1e-12, 'free');
});
