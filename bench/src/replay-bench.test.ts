/** klDivergence against hand-computed values, and the replay suite's option parsing. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { klDivergence } from '@csa2/core';
import { parseReplayBenchOptions } from './replay-bench.js';

test('KL of softmax distributions: zero for equal rows, invariant to a shift, the closed form for two classes', () => {
  const p = Float32Array.from([0.3, -1.2, 2.0]);
  assert.equal(klDivergence(p, p), 0);
  assert.ok(Math.abs(klDivergence(p, Float32Array.from([1.3, -0.2, 3.0]))) < 1e-7, 'logits shifted by a constant are the same distribution');
  // p = softmax([0, 0]) = (1/2, 1/2), q = softmax([ln 3, 0]) = (3/4, 1/4): KL = ½ln(2/3) + ½ln 2
  const expected = 0.5 * Math.log(0.5 / 0.75) + 0.5 * Math.log(0.5 / 0.25);
  assert.ok(Math.abs(klDivergence(Float32Array.from([0, 0]), Float32Array.from([Math.log(3), 0])) - expected) < 1e-7);
});

test('replay options: R list, defaults, refusals', () => {
  const o = parseReplayBenchOptions({ replays: '16,64', 'doc-model': 'tiny' }, '/tmp/x');
  assert.deepEqual(o.replays, [16, 64]);
  assert.equal(o.model, 'tiny');
  assert.equal(o.docTokens, 4096);
  assert.throws(() => parseReplayBenchOptions({ replays: '16,x' }, '/tmp/x'), /positive integer/);
  assert.throws(() => parseReplayBenchOptions({ 'doc-model': 'huge' }, '/tmp/x'), /--doc-model/);
});
