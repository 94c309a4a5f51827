/**
 * Unit tests of the hyper-connection emitters (trunk §2.3–2.4) against the float64 references:
 * the hc mixes (GraphOps.hcMixLogits, then hc_split_sinkhorn in TypeScript: hcSplitSinkhorn) ↔ hcMixes64,
 * hcPre ↔ hcPre64, hcPost ↔ hcPost64.
 *
 * The mixes are fp32 in both modes (the reference's hc parameters and Sinkhorn are fp32), so both
 * modes must give the same bits. Its error bound, per token, with u = 2^-24, γ_k = k·u/(1 - k·u):
 *   mixes_i = (fn_i·x)·r: the dot product (γ_{nd}·Σ|fn_i·x|), r = rsqrt(mean(x²) + eps) (≈ nd/2 + 4
 *     roundings, relative) and the product: δm_i = γ_{2nd}·r·Σ_j|fn_ij·x_j|;
 *   z = m·scale + base: δz_i = |scale|·δm_i + 3u·(|m_i·scale| + |base_i|);
 *   pre = sigmoid(z) + ε: sigmoid' ≤ 1/4 → δz/4 + 8u;  post = 2·sigmoid(z): δz/2 + 16u;
 *   comb: the row softmax moves each entry by at most max δz / 2; the Sinkhorn steps only rescale
 *     rows and columns (each step: n-term sum, + ε, divide: (n+1) roundings), which does not amplify
 *     an entry's relative error to first order; entries are ≤ 1, so |Δcomb| ≤ 2·max δz + ((2T+1)(n+2) + 16)·u.
 * hcPre / hcPost are fp32 sums rounded to bf16 in bf16 mode (γ-bounds below, then one bf16 rounding).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { f32, type HostTensor } from '../../runtime/ort-session.js';
import { SeededRandom } from '../../weights/init-model.js';
import { roundBf16 } from '../../numerics/bf16.js';
import { hcMixes64, hcPost64, hcPre64, linear64, type HcMix64 } from '../../testing/reference64.js';
import {
  U32,
  absolute,
  bf16Mismatches,
  bitMismatches,
  boundMismatches,
  describe,
  normalF32,
  openEmitterGraph,
  outF32,
  runEmitter,
} from '../../testing/graph-harness.js';
import type { NumericsMode } from './graph-ops.js';
import { hcSplitSinkhorn } from '../hc/hc-sinkhorn.js';

const MODES: readonly NumericsMode[] = ['bf16', 'fp32'];
const gamma = (k: number): number => (k * U32) / (1 - k * U32);
const n = 4;
const d = 16;
const M = (2 + n) * n;
const HC_EPS = 1e-6;
const NORM_EPS = 1e-20;

interface HcParams {
  fn: Float32Array;
  base: Float32Array;
  scale: Float32Array;
}

function hcParams(rng: SeededRandom, scale: readonly number[]): HcParams {
  return { fn: normalF32(rng, M * n * d, (n * d) ** -0.5), base: normalF32(rng, M, 0.5), scale: Float32Array.from(scale) };
}

/** The model's hc mixes on X [rows, n, d] in `mode`: GraphOps.hcMixLogits in ONNX, then hcSplitSinkhorn;
 *  returns pre [rows, n], post [rows, n], comb [rows, n, n]. */
async function runMixes(mode: NumericsMode, X: Float32Array, p: HcParams, iters: number): Promise<Record<string, Float32Array>> {
  const rows = X.length / (n * d);
  const out = await runEmitter(`hc_mixes_${mode}`, mode, { X: f32(X, [rows, n, d]) }, (c) => {
    c.output('mixes', c.ops.hcMixLogits(c.inputs['X']!, 'hc_fn', p.fn, { n, d, normEps: NORM_EPS }), [rows, M]);
  });
  const split = hcSplitSinkhorn(outF32(out, 'mixes'), { n, iters, eps: HC_EPS, scale: p.scale, base: p.base });
  return { pre: split.pre, post: split.post, comb: split.comb };
}

/** Reference per row, plus the error bounds of the module comment. */
function expectMixes(X: Float32Array, p: HcParams, iters: number) {
  const rows = X.length / (n * d);
  const ref: HcMix64[] = [];
  const bounds: { pre: number[]; post: number[]; comb: number[] } = { pre: [], post: [], comb: [] };
  const s = Array.from(p.scale);
  for (let r = 0; r < rows; r++) {
    const x = X.subarray(r * n * d, (r + 1) * n * d);
    ref.push(hcMixes64(x, p.fn, p.scale, p.base, n, iters, HC_EPS, NORM_EPS));
    const rms = 1 / Math.sqrt(x.reduce((a, v) => a + v * v, 0) / (n * d) + NORM_EPS);
    const m = linear64(x, p.fn, 1, M, n * d).map((v) => v * rms);
    const dm = linear64(absolute(x), absolute(p.fn), 1, M, n * d).map((v) => gamma(2 * n * d) * rms * v);
    const group = (i: number) => (i < n ? 0 : i < 2 * n ? 1 : 2);
    const dz = dm.map((v, i) => Math.abs(s[group(i)]!) * v + 3 * U32 * (Math.abs(m[i]! * s[group(i)]!) + Math.abs(p.base[i]!)));
    for (let j = 0; j < n; j++) {
      bounds.pre.push(dz[j]! / 4 + 8 * U32);
      bounds.post.push(dz[n + j]! / 2 + 16 * U32);
    }
    const maxDz = Math.max(...dz.subarray(2 * n));
    for (let k = 0; k < n * n; k++) bounds.comb.push(2 * maxDz + ((2 * iters + 1) * (n + 2) + 16) * U32);
  }
  const flat = (key: keyof HcMix64) => Float64Array.from(ref.flatMap((t) => Array.from(t[key])));
  return { pre: flat('pre'), post: flat('post'), comb: flat('comb'), bounds };
}

function checkMixes(got: Record<string, Float32Array>, want: ReturnType<typeof expectMixes>, label: string): void {
  for (const key of ['pre', 'post', 'comb'] as const) {
    const bad = boundMismatches(got[key]!, want[key], (i) => want.bounds[key][i]!);
    assert.deepEqual(bad, [], describe(`${label} ${key}`, bad));
  }
}

test('hc mixes: pre/post/comb match hcMixes64 (T = 20) for random, zero, large and saturating streams; mode-independent', async () => {
  const rng = new SeededRandom(2001);
  const rows = 6;
  const X = normalF32(rng, rows * n * d);
  X.fill(0, 0, n * d); // zero stream: r = 1/sqrt(1e-20) = 1e10, mixes = 0, pre = sigmoid(base) + ε
  for (let i = n * d; i < 2 * n * d; i++) X[i] = (X[i] as number) * 1e3; // mixes are scale-invariant
  for (let i = 2 * n * d; i < 3 * n * d; i++) X[i] = (X[i] as number) * 1e-6;
  for (const [label, scale] of [
    ['realistic scales', [0.5, 0.6, 0.4]],
    ['saturating comb softmax (scale 40: rows near one-hot, the +ε terms matter)', [0.5, 0.6, 40]],
  ] as const) {
    const p = hcParams(rng, scale);
    const want = expectMixes(X, p, 20);
    const results = [];
    for (const mode of MODES) {
      const got = await runMixes(mode, X, p, 20);
      checkMixes(got, want, `${label} (${mode})`);
      results.push(got);
    }
    for (const key of ['pre', 'post', 'comb']) assert.deepEqual(bitMismatches(results[0]![key]!, results[1]![key]!), [], `${label}: ${key} mode-independent`);
    // independent properties: Sinkhorn ends on a column normalization, so each column sums to S/(S+ε) ≈ 1 - ε;
    // pre ∈ (ε, 1 + ε), post ∈ (0, 2)
    const got = results[0]!;
    for (let r = 0; r < rows; r++) {
      for (let k = 0; k < n; k++) {
        let col = 0;
        for (let j = 0; j < n; j++) col += got['comb']![r * n * n + j * n + k]!;
        assert.ok(Math.abs(col - 1) < 1e-5, `${label}: row ${r} column ${k} sums to ${col}`);
        assert.ok(got['pre']![r * n + k]! > HC_EPS && got['pre']![r * n + k]! < 1 + HC_EPS);
        assert.ok(got['post']![r * n + k]! > 0 && got['post']![r * n + k]! < 2);
      }
    }
    // the test can fail: the comb read transposed (comb[k][j]) is rejected
    const transposed = Float64Array.from(want.comb, (_, i) => want.comb[i - (i % (n * n)) + (i % n) * n + Math.floor((i % (n * n)) / n)]!);
    assert.ok(boundMismatches(got['comb']!, transposed, (i) => want.bounds.comb[i]!).length > 0, `${label}: transposed comb rejected`);
  }
});

test('hc mixes: exactly T Sinkhorn iterations (T = 1, 2, 3 each match their reference and reject T ± 1)', async () => {
  const rng = new SeededRandom(2002);
  const rows = 3;
  const X = normalF32(rng, rows * n * d);
  const p = hcParams(rng, [0.5, 0.5, 6]); // a comb far from doubly stochastic, so every iteration moves it
  for (const T of [1, 2, 3]) {
    const got = await runMixes('bf16', X, p, T);
    const want = expectMixes(X, p, T);
    checkMixes(got, want, `T = ${T}`);
    for (const other of [T - 1, T + 1]) {
      if (other < 1) continue;
      const wrong = expectMixes(X, p, other);
      assert.ok(boundMismatches(got['comb']!, wrong.comb, (i) => want.bounds.comb[i]!).length > 0, `T = ${T} must not match T = ${other}`);
    }
  }
});

test('hcPre: Σ_j pre[j]·X[j] within γ_n·Σ|pre·X| of hcPre64, one bf16 rounding in bf16 mode', async () => {
  const rng = new SeededRandom(2003);
  const rows = 5;
  const X = Float32Array.from(normalF32(rng, rows * n * d), roundBf16); // the stream is bf16
  const pre = Float32Array.from({ length: rows * n }, () => 1 / (1 + Math.exp(-rng.nextNormal())) + HC_EPS);
  // row 0: pre only on copy 0, = 1 + 2^-8, so y = (1 + k·2^-7)(1 + 2^-8) = 1 + (k + 1/2)·2^-7 + k·2^-15:
  // an exact bf16 tie for k = 0 (→ 1, the even pattern), just above the tie for k > 0 (→ rounds up)
  pre.set([1 + 2 ** -8, 0, 0, 0], 0);
  for (let c = 0; c < d; c++) X[c] = 1 + (c % 4) * 2 ** -7;
  const exact: number[] = [];
  const magnitude: number[] = [];
  for (let r = 0; r < rows; r++) {
    const x = X.subarray(r * n * d, (r + 1) * n * d);
    const w = pre.subarray(r * n, (r + 1) * n);
    exact.push(...hcPre64(x, w, n, d));
    magnitude.push(...hcPre64(absolute(x), absolute(w), n, d));
  }
  // n products and n - 1 additions: γ_n · Σ_j |pre_j·X_jc|
  const bound = (i: number) => gamma(n) * magnitude[i]!;
  for (const mode of MODES) {
    const y = outF32(
      await runEmitter(`hc_pre_${mode}`, mode, { X: f32(X, [rows, n, d]), pre: f32(pre, [rows, n]) }, (c) =>
        c.output('y', c.ops.hcPre(c.inputs['X']!, c.inputs['pre']!), [rows, d]),
      ),
      'y',
    );
    const bad = mode === 'bf16' ? bf16Mismatches(y, exact, bound) : boundMismatches(y, exact, bound);
    assert.deepEqual(bad, [], describe(`hcPre (${mode})`, bad));
    if (mode === 'bf16') {
      // independent values: (1 + k·2^-7)(1 + 2^-8) rounded to bf16, k = 0..3
      assert.deepEqual(Array.from(y.subarray(0, 4)), [1, 1 + 2 * 2 ** -7, 1 + 3 * 2 ** -7, 1 + 4 * 2 ** -7]);
    }
    // the test can fail: collapsing with copy weights in the wrong order is rejected
    const shuffled: number[] = [];
    for (let r = 0; r < rows; r++) {
      const w = pre.subarray(r * n, (r + 1) * n);
      shuffled.push(...hcPre64(X.subarray(r * n * d, (r + 1) * n * d), Float64Array.from([w[1]!, w[0]!, w[2]!, w[3]!]), n, d));
    }
    assert.ok(boundMismatches(y, shuffled, (i) => bound(i) + 2 ** -8 * Math.abs(exact[i]!)).length > 0);
  }
});

test('hcPost: Y[k] = post[k]·y + Σ_j comb[j][k]·R[j] within γ_(n+2) of hcPost64, one bf16 rounding in bf16 mode', async () => {
  const rng = new SeededRandom(2004);
  const rows = 4;
  const y = Float32Array.from(normalF32(rng, rows * d), roundBf16);
  const R = Float32Array.from(normalF32(rng, rows * n * d, 3), roundBf16);
  const post = Float32Array.from({ length: rows * n }, () => 2 / (1 + Math.exp(-rng.nextNormal())));
  const comb = Float32Array.from({ length: rows * n * n }, () => rng.nextUniform() * 0.5); // asymmetric on purpose
  const feeds: Record<string, HostTensor> = { y: f32(y, [rows, d]), R: f32(R, [rows, n, d]), post: f32(post, [rows, n]), comb: f32(comb, [rows, n, n]) };
  const reference = (combRows: (r: number) => ArrayLike<number>, abs: boolean) => {
    const out: number[] = [];
    for (let r = 0; r < rows; r++) {
      const f = (a: Float32Array | Float64Array) => (abs ? absolute(a) : a);
      out.push(
        ...hcPost64(
          f(y.subarray(r * d, (r + 1) * d)),
          f(R.subarray(r * n * d, (r + 1) * n * d)),
          f(post.subarray(r * n, (r + 1) * n)),
          f(Float64Array.from(combRows(r))),
          n,
          d,
        ),
      );
    }
    return out;
  };
  const combOf = (r: number) => comb.subarray(r * n * n, (r + 1) * n * n);
  const exact = reference(combOf, false);
  const magnitude = reference(combOf, true);
  // n + 1 products, n additions: γ_(n+2) · (|post_k·y| + Σ_j |comb_jk·R_j|)
  const bound = (i: number) => gamma(n + 2) * magnitude[i]!;
  for (const mode of MODES) {
    const session = await openEmitterGraph(`hc_post_${mode}`, mode, feeds, (c) => {
      const { y: yy, R: rr, post: pp, comb: cc } = c.inputs as Record<string, string>;
      c.output('Y', c.ops.hcPost(yy!, rr!, pp!, cc!), [rows, n, d]);
    });
    const Y = outF32(await session.run(feeds), 'Y');
    await session.dispose();
    const bad = mode === 'bf16' ? bf16Mismatches(Y, exact, bound) : boundMismatches(Y, exact, bound);
    assert.deepEqual(bad, [], describe(`hcPost (${mode})`, bad));
    // the test can fail: output copy k taking ROW k of comb (comb[k][j]) instead of column k is rejected
    const transposed = reference((r) => Float64Array.from({ length: n * n }, (_, i) => combOf(r)[(i % n) * n + Math.floor(i / n)]!), false);
    assert.ok(boundMismatches(Y, transposed, (i) => bound(i) + 2 ** -8 * Math.abs(exact[i]!)).length > rows * d);
  }
});
