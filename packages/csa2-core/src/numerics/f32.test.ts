import { test } from 'node:test';
import assert from 'node:assert/strict';
import { sigmoidF32, softplusF32 } from './f32.js';
import { softplus64 } from '../testing/reference64.js';

const U = 2 ** -24;

test('softplusF32 and sigmoidF32 follow torch: threshold 20, float32 results within 2 ulp of float64 (2^-126 absolute below the normal range: exp(100) overflows float32, so sigmoid(-100) is 0)', () => {
  for (const z of [-100, -20, -3.5, -1e-3, 0, 1e-3, 0.7, 5, 19.99, 20, 20.5, 80]) {
    const zf = Math.fround(z);
    const sp = softplusF32(zf);
    assert.equal(sp, Math.fround(sp));
    if (zf > 20) assert.equal(sp, zf);
    else assert.ok(Math.abs(sp - softplus64(zf)) <= 2 * U * Math.abs(softplus64(zf)) + 1e-45, `softplus(${zf})`);
    const sg = sigmoidF32(zf);
    const sg64 = 1 / (1 + Math.exp(-zf));
    assert.ok(Math.abs(sg - sg64) <= 2 * U * sg64 + 2 ** -126, `sigmoid(${zf}) = ${sg}, float64 ${sg64}`);
  }
});
