/**
 * Unit tests of the elementwise and linear GraphOps emitters, each run as a one-op ONNX graph on
 * onnxruntime (testing/graph-harness.ts) and compared with the float64 references
 * (testing/reference64.ts) or the bit-exact codecs (numerics/bf16.ts, numerics/formats.ts):
 * bf (bf16 rounding), linear, linearF32, rmsNorm, rope (+ inverse), pow2Ceil, e2m1Round, softplus,
 * silu. The quantizers, the hyper-connection emitters and the sparse attention have their own files.
 *
 * Tolerances: u = 2^-24 (fp32 unit roundoff), γ_k = k·u/(1 - k·u) (the classic bound for k chained
 * fp32 roundings, valid for any summation order, FMA included). In 'bf16' mode an emitter that
 * rounds its fp32 result to bf16 is checked with `bf16Mismatches`: the output must be exactly one
 * round-to-nearest-even bf16 of a value within the fp32 bound of the exact result, i.e. bf16(exact)
 * except where exact lies within that bound of a bf16 rounding midpoint (the one discontinuity that
 * can flip). That is at most the fp32 bound plus half a bf16 ulp (relative 2^-8) away from exact,
 * and in practice equal to bf16(exact) for nearly every element.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GraphOps, transposeMatrix } from './graph-ops.js';
import { ropeFrequencies, ropeRows } from '../attention/rope.js';
import { GraphBuilder } from '../../onnx/graph-builder.js';
import { f32, openGraphSession } from '../../runtime/ort-session.js';
import { SeededRandom } from '../../weights/init-model.js';
import { roundBf16 } from '../../numerics/bf16.js';
import { E2M1_VALUES, decodeE2m1, encodeE2m1, fastRoundScale } from '../../numerics/formats.js';
import { V41_YARN, applyRope64, linear64, rmsNorm64, silu64 } from '../../testing/reference64.js';
import { U32, absolute, bf16Mismatches, bitMismatches, boundMismatches, normalF32, outF32, runEmitter } from '../../testing/graph-harness.js';
import type { NumericsMode } from './graph-ops.js';

const MODES: readonly NumericsMode[] = ['bf16', 'fp32'];
const gamma = (k: number): number => (k * U32) / (1 - k * U32);

function fromBits(bits: readonly number[]): Float32Array {
  return new Float32Array(Uint32Array.from(bits).buffer);
}

// ---------------------------------------------------------------------------------------------
// bf (bf16 rounding)

test('bf: round-to-nearest-even to bf16 in bf16 mode (ties, carries, overflow, subnormals), identity in fp32 mode', async () => {
  const rng = new SeededRandom(101);
  const bits: number[] = [];
  // exact ties (low half 0x8000) with an even and an odd kept pattern, and their neighbours, across binades
  for (const exponent of [1, 60, 120, 126, 127, 128, 140, 200, 254]) {
    for (const mantissa7 of [0, 1, 0x3e, 0x3f, 0x7e, 0x7f]) {
      for (const low of [0x8000, 0x7fff, 0x8001, 0x0001, 0xffff, 0x0000]) {
        for (const sign of [0, 0x80000000]) bits.push((sign | (exponent << 23) | (mantissa7 << 16) | low) >>> 0);
      }
    }
  }
  // subnormal ties (kept 0 → stays 0, kept 1 → 2), the largest finite ties (→ Infinity), ±0, ±Infinity
  bits.push(0x00008000, 0x00018000, 0x80018000, 0x0000ffff, 0x00000001, 0x7f7f8000, 0x7f7f7fff, 0xff7f8000, 0x7f7fffff);
  bits.push(0x00000000, 0x80000000, 0x7f800000, 0xff800000);
  const x = fromBits(bits);
  const random = normalF32(rng, 512, 3);
  const input = new Float32Array(x.length + random.length);
  input.set(x);
  input.set(random, x.length);
  const n = input.length;

  const expected = Float32Array.from(input, roundBf16);
  const bf = outF32(await runEmitter('bf', 'bf16', { x: f32(input, [n]) }, (c) => c.output('y', c.ops.bf(c.inputs['x']!), [n])), 'y');
  assert.deepEqual(bitMismatches(bf, expected), [], 'bf16 mode: bit-exact roundBf16');
  // independent values: the spec's ties-to-even, computed by hand
  const one = 1 + 2 ** -8; // halfway between 1 and 1 + 2^-7 → even pattern 1
  const odd = 1 + 3 * 2 ** -8; // halfway between 1 + 2^-7 and 1 + 2^-6 → even pattern 1 + 2^-6
  const ties = outF32(
    await runEmitter('bf_ties', 'bf16', { x: f32(Float32Array.from([one, odd, -one, -odd]), [4]) }, (c) => c.output('y', c.ops.bf(c.inputs['x']!), [4])),
    'y',
  );
  assert.deepEqual(Array.from(ties), [1, 1 + 2 ** -6, -1, -(1 + 2 ** -6)]);
  // the test can fail: the unrounded input is not what bf16 mode returns
  assert.ok(bitMismatches(bf, input).length > 100, 'bf16 mode must change most random inputs');

  const same = outF32(await runEmitter('bf_fp32', 'fp32', { x: f32(input, [n]) }, (c) => c.output('y', c.ops.bf(c.inputs['x']!), [n])), 'y');
  assert.deepEqual(bitMismatches(same, input), [], 'fp32 mode: bf is the identity');
});

// ---------------------------------------------------------------------------------------------
// linear / linearF32

test('transposeMatrix: [rows, cols] → [cols, rows]', () => {
  assert.deepEqual(Array.from(transposeMatrix(Float32Array.from([1, 2, 3, 4, 5, 6]), 2, 3)), [1, 4, 2, 5, 3, 6]);
});

test('linear / linearF32: x·Wᵀ within γ_K·Σ|x·w| of linear64; linear rounds to bf16 in bf16 mode, linearF32 never', async () => {
  const rng = new SeededRandom(202);
  const rows = 6;
  const inDim = 48;
  const outDim = 24;
  const x = normalF32(rng, rows * inDim);
  x.fill(0, 0, inDim); // a zero row: exactly 0
  for (let i = inDim; i < 2 * inDim; i++) x[i] = (x[i] as number) * 1e3; // a large row
  const w = normalF32(rng, outDim * inDim, inDim ** -0.5);
  const exact = linear64(x, w, rows, outDim, inDim);
  // fp32 matmul of K = inDim products: |error| ≤ γ_K · Σ_i |x_i·w_i| (any summation order / FMA)
  const magnitude = linear64(absolute(x), absolute(w), rows, outDim, inDim);
  const bound = (i: number) => gamma(inDim) * (magnitude[i] as number);
  assert.equal(
    exact.subarray(0, outDim).every((v) => v === 0),
    true,
  );

  for (const mode of MODES) {
    const out = await runEmitter(`linear_${mode}`, mode, { x: f32(x, [rows, inDim]) }, (c) => {
      c.output('y', c.ops.linear(c.inputs['x']!, 'w', w, outDim, inDim), [rows, outDim]);
      c.output('y32', c.ops.linearF32(c.inputs['x']!, 'w32', w, outDim, inDim), [rows, outDim]);
    });
    const y = outF32(out, 'y');
    const y32 = outF32(out, 'y32');
    assert.deepEqual(boundMismatches(y32, exact, bound), [], `linearF32 (${mode}) within γ_K`);
    if (mode === 'bf16') {
      assert.deepEqual(bf16Mismatches(y, exact, bound), [], 'linear (bf16): one bf16 rounding of the fp32 result');
      assert.ok(bitMismatches(y, y32).length > 0, 'linear (bf16) must differ from the unrounded linearF32');
    } else {
      assert.deepEqual(bitMismatches(y, y32), [], 'linear (fp32) = linearF32');
    }
    // the test can fail: a 1% change of one weight is detected
    const perturbed = Float32Array.from(w);
    perturbed[5] = (perturbed[5] as number) * 1.01;
    assert.ok(boundMismatches(y32, linear64(x, perturbed, rows, outDim, inDim), bound).length > 0, 'a 1% weight change is detected');
  }
});

test('linear (bf16): an identity weight returns bf16(x), ties to even', async () => {
  const x = Float32Array.from([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(2 + 2 ** -7), 0.1]);
  const eye = Float32Array.from([1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]);
  const out = outF32(
    await runEmitter('linear_eye', 'bf16', { x: f32(x, [1, 4]) }, (c) => c.output('y', c.ops.linear(c.inputs['x']!, 'w', eye, 4, 4), [1, 4])),
    'y',
  );
  assert.deepEqual(Array.from(out), [1, 1 + 2 ** -6, -2, roundBf16(0.1)]);
});

// ---------------------------------------------------------------------------------------------
// rmsNorm

test('rmsNorm: w·x·rsqrt(mean(x²)+eps) within (d+16)·u relative of rmsNorm64, bf16-rounded in bf16 mode', async () => {
  const rng = new SeededRandom(303);
  const rows = 6;
  const dim = 40;
  const eps = 1e-20;
  const x = normalF32(rng, rows * dim);
  for (let c = 0; c < dim; c++) {
    x[c] = 0; // zero row: r = 1/sqrt(eps) = 1e10, y = 0
    x[dim + c] = (x[dim + c] as number) * 1e-3;
    x[2 * dim + c] = (x[2 * dim + c] as number) * 1e4;
    x[3 * dim + c] = (x[3 * dim + c] as number) * 1e-12; // mean(x²) ≈ 1e-24 ≪ eps: eps dominates
  }
  const w = normalF32(rng, dim, 0.1, 1);
  const exact = rmsNorm64(x, w, rows, dim, eps);
  // mean(x²): d squares + d-1 adds + 1 divide (γ_{2d}); + eps, sqrt (halves it), 1/·, x·r, w·(…): 4 more
  // roundings → relative ≤ (d + 6)·u; we allow (d + 16)·u
  const bound = (i: number) => (dim + 16) * U32 * Math.abs(exact[i] as number);
  for (const mode of MODES) {
    const y = outF32(
      await runEmitter(`rmsnorm_${mode}`, mode, { x: f32(x, [rows, dim]) }, (c) => c.output('y', c.ops.rmsNorm(c.inputs['x']!, 'w', w, eps), [rows, dim])),
      'y',
    );
    const bad = mode === 'bf16' ? bf16Mismatches(y, exact, bound) : boundMismatches(y, exact, bound);
    assert.deepEqual(bad, [], `rmsNorm (${mode})`);
    // the test can fail: ignoring eps changes the eps-dominated row far beyond the bound
    const noEps = rmsNorm64(x, w, rows, dim, 0);
    assert.ok(
      boundMismatches(y.subarray(3 * dim, 4 * dim), noEps.subarray(3 * dim, 4 * dim), (i) => 1e-3 * Math.abs(noEps[3 * dim + i] as number)).length === dim,
    );
    // and a 1% change of the weight is detected
    const wrongWeight = rmsNorm64(
      x,
      Float64Array.from(w, (v) => v * 1.01),
      rows,
      dim,
      eps,
    );
    assert.ok(boundMismatches(y, wrongWeight, bound).length > 0);
  }
});

// ---------------------------------------------------------------------------------------------
// rope

test('rope / inverse rope: interleaved pairs of the last ropeDim dims, ranks 2 and 3, against applyRope64', async () => {
  const rng = new SeededRandom(404);
  const ropeDim = 16;
  const width = 24;
  const half = ropeDim / 2;
  const positions = [0, 1, 777, 65535];
  const freqs = ropeFrequencies({ ropeDim, base: 160000, yarn: V41_YARN });
  const { cos, sin } = ropeRows(freqs, positions); // the fp32 table the model feeds; both sides use it
  const S = positions.length;
  const heads = 3;
  // the inputs are bf16 values, as the model's q / kv / latent are, so the copied nope dims are bf16 too
  const x2 = Float32Array.from(normalF32(rng, S * width, 2), roundBf16);
  const x3 = Float32Array.from(normalF32(rng, S * heads * width, 2), roundBf16);
  // per rotated element: re = a·c - b·s, im = a·s + b·c in fp32: 2 products + 1 add → γ_2·(|a·c| + |b·s|)
  // ≤ γ_2·hypot(a, b)·hypot(c, s), and hypot(c, s) = 1 to within 2u (fp32 cos/sin): γ_3·hypot(a, b).
  // Unrotated dims pass through exactly.
  const boundFor = (x: Float32Array) => (i: number) => {
    const col = i % width;
    if (col < width - ropeDim) return 0;
    const base = i - ((col - (width - ropeDim)) % 2);
    return gamma(3) * Math.hypot(x[base] as number, x[base + 1] as number);
  };
  for (const mode of MODES) {
    for (const inverse of [false, true]) {
      const out = await runEmitter(
        `rope_${mode}_${inverse}`,
        mode,
        { x2: f32(x2, [S, width]), x3: f32(x3, [S, heads, width]), cos: f32(cos, [S, half]), sin: f32(sin, [S, half]) },
        (c) => {
          const { x2: a, x3: b, cos: co, sin: si } = c.inputs as Record<string, string>;
          c.output('y2', c.ops.rope(a!, 2, width, ropeDim, co!, si!, inverse), [S, width]);
          c.output('y3', c.ops.rope(b!, 3, width, ropeDim, co!, si!, inverse), [S, heads, width]);
        },
      );
      const cases = [
        { y: outF32(out, 'y2'), x: x2, rows: S },
        { y: outF32(out, 'y3'), x: x3, rows: S * heads },
      ];
      for (const { y, x, rows } of cases) {
        const exact = applyRope64(x, rows, width, ropeDim, cos, sin, inverse);
        const bound = boundFor(x);
        const label = `rope rank ${rows === S ? 2 : 3} (${mode}, inverse ${inverse})`;
        assert.deepEqual(mode === 'bf16' ? bf16Mismatches(y, exact, bound) : boundMismatches(y, exact, bound), [], label);
        // the nope dims are copied bit for bit (not rounded) in both modes
        for (let i = 0; i < y.length; i++) if (i % width < width - ropeDim) assert.equal(y[i], x[i], `${label}: nope dim ${i}`);
        // the test can fail: rotating the other way is rejected
        assert.ok(boundMismatches(y, applyRope64(x, rows, width, ropeDim, cos, sin, !inverse), bound).length > 0, `${label}: direction matters`);
      }
    }
  }
});

test('rope then inverse rope (fp32) gives x back within γ_8·hypot(pair) (two rotations of γ_3 each, cos²+sin² = 1 ± 2u)', async () => {
  const rng = new SeededRandom(405);
  const ropeDim = 8;
  const width = 8;
  const { cos, sin } = ropeRows(ropeFrequencies({ ropeDim, base: 10000, yarn: null }), [3, 100, 4095]);
  const x = normalF32(rng, 3 * width);
  const y = outF32(
    await runEmitter('rope_roundtrip', 'fp32', { x: f32(x, [3, width]), cos: f32(cos, [3, 4]), sin: f32(sin, [3, 4]) }, (c) => {
      const { x: a, cos: co, sin: si } = c.inputs as Record<string, string>;
      c.output('y', c.ops.rope(c.ops.rope(a!, 2, width, ropeDim, co!, si!), 2, width, ropeDim, co!, si!, true), [3, width]);
    }),
    'y',
  );
  assert.deepEqual(
    boundMismatches(y, x, (i) => gamma(8) * Math.hypot(x[i - (i % 2)] as number, x[i - (i % 2) + 1] as number)),
    [],
  );
});

// ---------------------------------------------------------------------------------------------
// pow2Ceil, e2m1Round (bit-exact)

test('pow2Ceil: 2^ceil(log2 t) bit-exact against fast_round_scale, at every power of two and its neighbours', async () => {
  const rng = new SeededRandom(505);
  const t: number[] = [];
  for (let k = -126; k <= 127; k++) {
    t.push(2 ** k);
    if (k < 127) t.push(Math.fround(2 ** k * (1 + 2 ** -23))); // just above: rounds up a whole power (2^128 would overflow)
    if (k > -126) t.push(Math.fround(2 ** k * (1 - 2 ** -24))); // just below: stays at 2^k
  }
  for (let i = 0; i < 1500; i++) t.push(Math.fround(2 ** (rng.nextUniform() * 250 - 125)));
  // below the normal range: floored to 2^-126 (the quantizers' amax floors never get here)
  t.push(2 ** -127, 2 ** -130, 2 ** -149, 1e-39);
  const input = Float32Array.from(t);
  const n = input.length;
  // fast_round_scale(t, 1): exponent bits + (mantissa != 0), on the fp32 bits of t
  const expected = Float32Array.from(input, (v) => fastRoundScale(v, 1));
  for (const mode of MODES) {
    const p = outF32(await runEmitter(`pow2ceil_${mode}`, mode, { t: f32(input, [n]) }, (c) => c.output('p', c.ops.pow2Ceil(c.inputs['t']!), [n])), 'p');
    assert.deepEqual(bitMismatches(p, expected), [], `pow2Ceil (${mode})`);
    // independent property: p is a power of two with p/2 < t ≤ p (or 2^-126 below the normal range)
    for (let i = 0; i < n; i++) {
      const v = input[i] as number;
      const pi = p[i] as number;
      assert.ok(Number.isInteger(Math.log2(pi)) && (v < 2 ** -126 ? pi === 2 ** -126 : pi / 2 < v && v <= pi), `t = ${v}: p = ${pi}`);
    }
  }
  assert.ok(
    bitMismatches(
      expected,
      Float32Array.from(input, (v) => fastRoundScale(v, 1) / 2),
    ).length === n,
    'an off-by-one exponent would be caught',
  );
});

test('e2m1Round: round-to-nearest-even on the E2M1 grid, bit-exact against encodeE2m1/decodeE2m1 (all spec ties)', async () => {
  const rng = new SeededRandom(606);
  const ties = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5];
  const v: number[] = [0, -0];
  for (const grid of E2M1_VALUES) v.push(grid);
  for (const t of ties) {
    for (const s of [1, -1]) {
      v.push(s * t);
      v.push(Math.fround(s * t * (1 + 2 ** -22)), Math.fround(s * t * (1 - 2 ** -22))); // either side of the tie
    }
  }
  v.push(5.999999, -5.999999, 6, -6, 1.999999, 2.000001, 3.999999, 4.000001, 1e-30, -1e-30);
  for (let i = 0; i < 1000; i++) v.push((rng.nextUniform() * 2 - 1) * 6);
  const input = Float32Array.from(v);
  const n = input.length;
  const expected = Float32Array.from(input, (x) => decodeE2m1(encodeE2m1(x)));
  for (const mode of MODES) {
    const q = outF32(await runEmitter(`e2m1_${mode}`, mode, { v: f32(input, [n]) }, (c) => c.output('q', c.ops.e2m1Round(c.inputs['v']!), [n])), 'q');
    assert.deepEqual(bitMismatches(q, expected), [], `e2m1Round (${mode}), signed zeros included`);
  }
  // independent values: the tie list of csa2-reference §2.3, 0.25→0, 0.75→1.0, 1.25→1.0, 1.75→2.0, 2.5→2, 3.5→4, 5→4
  const q = outF32(
    await runEmitter('e2m1_ties', 'bf16', { v: f32(Float32Array.from(ties), [7]) }, (c) => c.output('q', c.ops.e2m1Round(c.inputs['v']!), [7])),
    'q',
  );
  assert.deepEqual(Array.from(q), [0, 1, 1, 2, 2, 4, 4]);
});

// ---------------------------------------------------------------------------------------------
// silu (fp32 in both modes)

test('silu: x / (1 + e^-x) within 8·u relative of silu64', async () => {
  const rng = new SeededRandom(808);
  const v = [-100, -89, -88.5, -50, -1e-6, 0, 1e-6, 1, 50, 89, 100];
  for (let i = 0; i < 500; i++) v.push(rng.nextNormal() * 6);
  const input = Float32Array.from(v);
  const n = input.length;
  const exact = Float64Array.from(input, silu64);
  // exp (a few ulps; its relative error is damped by 1/(1+e^-x)), one add, one divide: 8·u relative.
  // Where e^-x overflows fp32 (x < -88.72) the quotient is -0 as in torch; the exact value there is
  // below 89·e^-88.72 < 4e-37 in magnitude, hence the absolute 1e-36.
  const bound = (i: number) => 8 * U32 * Math.abs(exact[i] as number) + 1e-36;
  for (const mode of MODES) {
    const y = outF32(await runEmitter(`silu_${mode}`, mode, { x: f32(input, [n]) }, (c) => c.output('y', c.ops.silu(c.inputs['x']!), [n])), 'y');
    assert.deepEqual(boundMismatches(y, exact, bound), [], `silu (${mode})`);
    // the test can fail: sigmoid alone (or x·sigmoid(-x)) is rejected
    assert.ok(
      boundMismatches(
        y,
        Float64Array.from(input, (x) => silu64(-x)),
        bound,
      ).length > 400,
    );
  }
});

test('harness guard: a GraphOps graph wired to a value that does not exist fails to open (no silent zeros)', async () => {
  const g = new GraphBuilder('broken');
  const ops = new GraphOps(g, 'bf16');
  g.input('x', 'float32', [2]);
  g.output(ops.silu('missing'), 'y', 'float32', [2]);
  await assert.rejects(openGraphSession('broken', g.toBytes()));
});
