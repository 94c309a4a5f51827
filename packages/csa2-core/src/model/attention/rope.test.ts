import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ropeFrequencies, ropeRows, yarnBand } from './rope.js';
import { applyRope64, ropeFreqs64, ropeFreqsF32, V41_YARN } from '../../testing/reference64.js';

const released = { ropeDim: 64, base: 160000, yarn: V41_YARN } as const;

test('YaRN band of the released parameters is [15, 25]', () => {
  assert.deepEqual(yarnBand(released), { low: 15, high: 25 });
  assert.equal(yarnBand({ ropeDim: 64, base: 10000, yarn: null }), null);
});

test('model RoPE frequencies: bit-identical to the fp32 reference recipe, within 1e-6 relative of float64', () => {
  for (const p of [
    released,
    { ropeDim: 16, base: 160000, yarn: { originalSeqLen: 16, factor: 4, betaFast: 32, betaSlow: 1 } },
    { ropeDim: 64, base: 10000, yarn: null },
  ]) {
    const mine = ropeFrequencies(p);
    const f32 = p.yarn === null ? ropeFreqsF32(p.ropeDim, p.base) : ropeFreqsF32(p.ropeDim, p.base, p.yarn);
    const f64 = p.yarn === null ? ropeFreqs64(p.ropeDim, p.base) : ropeFreqs64(p.ropeDim, p.base, p.yarn);
    assert.deepEqual(Array.from(mine), Array.from(f32));
    mine.forEach((v, i) => assert.ok(Math.abs(v - (f64[i] as number)) <= 1e-6 * (f64[i] as number), `freq ${i}: ${v} vs ${f64[i]}`));
  }
});

test('rotation by the model tables matches the float64 rotation within 2e-6 (positions up to 65536)', () => {
  const freqs = ropeFrequencies(released);
  const positions = [0, 1, 7, 128, 4097, 65535];
  const { cos, sin } = ropeRows(freqs, positions);
  const x = Float64Array.from({ length: 64 }, (_, i) => Math.sin(i + 1));
  const f64 = ropeFreqs64(64, 160000, V41_YARN);
  positions.forEach((p, r) => {
    const c64 = Float64Array.from(f64, (f) => Math.cos(p * f));
    const s64 = Float64Array.from(f64, (f) => Math.sin(p * f));
    const ref = applyRope64(x, 1, 64, 64, c64, s64, false);
    const c32 = cos.subarray(r * 32, (r + 1) * 32);
    const s32 = sin.subarray(r * 32, (r + 1) * 32);
    const mine = applyRope64(x, 1, 64, 64, c32, s32, false);
    // fp32 angles: p·freq rounded to fp32 moves the angle by up to p·2^-24 rad
    const tol = 2e-6 + p * 2 ** -23;
    mine.forEach((v, i) => assert.ok(Math.abs(v - (ref[i] as number)) <= tol, `pos ${p} dim ${i}: ${v} vs ${ref[i]}`));
  });
});
