/**
 * moeGate (float32, TypeScript) against moeGate64 (float64) for every score function. The logits are
 * given, so the reference sees the same inputs (gateW = identity). Error bound on each weight: the
 * float32 chain is at most ~12 roundings (exp, log1p, sqrt or the E-term softmax sum and divide, the
 * k-term sum, + 1e-20, divide, × route_scale), each relative u = 2^-24, none amplified by more than 2
 * (d/dz of sqrt∘softplus relative to itself is ≤ 1): |w − w64| ≤ 32u·|w64|. Selection must be the
 * reference's: the cases keep biased scores at least 1e-3 apart, except the deliberate ties.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { moeGate, type MoeGateParams } from './moe-gate.js';
import { softplusF32 } from '../../numerics/f32.js';
import { moeGate64, type MoeScoreFunc } from '../../testing/reference64.js';
import { SeededRandom } from '../../weights/init-model.js';

const U = 2 ** -24;
const E = 8;
const identity = Float64Array.from({ length: E * E }, (_, i) => (Math.floor(i / E) === i % E ? 1 : 0));

function check(logits: Float32Array, p: MoeGateParams, label: string): void {
  const got = moeGate(logits, p);
  const rows = logits.length / E;
  for (let r = 0; r < rows; r++) {
    const x = logits.subarray(r * E, (r + 1) * E);
    const want = moeGate64(x, identity, p.bias, p.k, p.routeScale, p.normTopKProb, p.scoreFunc as MoeScoreFunc);
    assert.deepEqual(Array.from(got.experts.subarray(r * p.k, (r + 1) * p.k)), Array.from(want.indices), `${label} row ${r}: experts`);
    for (let j = 0; j < p.k; j++) {
      const w = got.weights[r * p.k + j] as number;
      const w64 = want.weights[j] as number;
      assert.ok(Math.abs(w - w64) <= 32 * U * Math.abs(w64), `${label} row ${r} weight ${j}: ${w} vs ${w64}`);
      assert.equal(w, Math.fround(w), 'weights are float32 values');
    }
  }
}

/** Logits whose biased scores are at least 1e-3 apart under every score function. */
function separatedLogits(rng: SeededRandom, rows: number): Float32Array {
  const out = new Float32Array(rows * E);
  for (let r = 0; r < rows; r++) {
    const perm = Array.from({ length: E }, (_, i) => i).sort(() => rng.nextUniform() - 0.5);
    perm.forEach((e, rank) => (out[r * E + e] = Math.fround(-3 + rank * 0.8 + 0.05 * rng.nextUniform())));
  }
  return out;
}

test('moeGate: experts and weights of every score function match moeGate64 (k = 1, 2, 3; with and without normalization)', () => {
  const rng = new SeededRandom(4101);
  const logits = separatedLogits(rng, 16);
  const bias = new Float32Array(E); // bias 0 here: selection by score alone
  for (const scoreFunc of ['sqrtsoftplus', 'sigmoid', 'softmax'] as const) {
    for (const k of [1, 2, 3]) {
      for (const normTopKProb of [true, false]) {
        check(logits, { scoreFunc, gateTemp: 1, normTopKProb, routeScale: 1.5, k, bias }, `${scoreFunc} k=${k} norm=${normTopKProb}`);
      }
    }
  }
});

test('moeGate: the bias picks the experts but is not part of their weights', () => {
  const logits = Float32Array.from([0.5, 0.4, 0.3, 0.2, 0.1, 0, -0.1, -0.2]);
  const bias = new Float32Array(E);
  bias[7] = 2; // the lowest score, lifted to first place by its bias
  const p: MoeGateParams = { scoreFunc: 'sqrtsoftplus', gateTemp: 1, normTopKProb: false, routeScale: 1, k: 2, bias };
  const got = moeGate(logits, p);
  assert.deepEqual(Array.from(got.experts), [7, 0]);
  assert.equal(got.weights[0], Math.fround(Math.sqrt(softplusF32(Math.fround(-0.2)))));
  check(logits, p, 'bias');
});

test('moeGate: equal biased scores go to the lower expert id', () => {
  const logits = Float32Array.from([0, 1, 0.25, 1, 1, -1, 0.25, -2]);
  const got = moeGate(logits, { scoreFunc: 'sigmoid', gateTemp: 1, normTopKProb: true, routeScale: 1, k: 4, bias: new Float32Array(E) });
  assert.deepEqual(Array.from(got.experts), [1, 3, 4, 2]);
  assert.equal(got.weights[0], got.weights[1]);
});

test('moeGate: gate_temp divides the logits before the score function', () => {
  const rng = new SeededRandom(4102);
  const logits = separatedLogits(rng, 4);
  const p: MoeGateParams = { scoreFunc: 'softmax', gateTemp: 2, normTopKProb: false, routeScale: 1, k: 2, bias: new Float32Array(E) };
  const halved = Float32Array.from(logits, (v) => v / 2); // exact: halving a float32
  check(halved, { ...p, gateTemp: 1 }, 'temp 2 as halved logits');
  assert.deepEqual(moeGate(logits, p), moeGate(halved, { ...p, gateTemp: 1 }));
});

test('moeGate rejects logits that are not whole rows and impossible k', () => {
  const p: MoeGateParams = { scoreFunc: 'sigmoid', gateTemp: 1, normTopKProb: true, routeScale: 1, k: 2, bias: new Float32Array(E) };
  assert.throws(() => moeGate(new Float32Array(E + 1), p), /not a multiple of 8 experts/);
  assert.throws(() => moeGate(new Float32Array(E), { ...p, k: E + 1 }), /cannot pick 9 of 8/);
});
