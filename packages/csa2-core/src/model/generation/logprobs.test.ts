import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SeededRandom } from '../../weights/init-model.js';
import { TokenHistory } from './sampler.js';
import { tokenLogprobs } from './logprobs.js';

/** A float64 reference: log_softmax((logits + bias) / T) by sorting everything. */
function reference(logits: number[], t: number, bias: Map<number, number>, chosen: number, top: number) {
  const x = logits.map((v, i) => (v + (bias.get(i) ?? 0)) / t);
  const m = Math.max(...x);
  const lse = m + Math.log(x.reduce((s, v) => s + Math.exp(v - m), 0));
  const order = x.map((_, i) => i).sort((a, b) => (x[b] as number) - (x[a] as number) || a - b);
  return { logprob: (x[chosen] as number) - lse, top: order.slice(0, top).map((id) => ({ id, logprob: (x[id] as number) - lse })) };
}

test('logprobs of the chosen token and the top alternatives, after bias and temperature; greedy reports temperature 1', () => {
  const rng = new SeededRandom(3);
  for (let trial = 0; trial < 40; trial++) {
    const V = 50 + (trial % 7) * 13;
    const logits = Array.from({ length: V }, () => rng.nextNormal() * 3);
    if (trial % 5 === 0) logits[7] = logits[3] as number; // a tie: the lower id first
    const temperature = [0, 0.5, 1, 1.7][trial % 4] as number;
    const bias = new Map<number, number>(
      trial % 3 === 0
        ? [
            [5, 4],
            [11, -100],
          ]
        : [],
    );
    const top = trial % 21;
    const chosen = trial % V;
    const params = { temperature, topP: 1, seed: 0, logitBias: [...bias.entries()] as Array<[number, number]> };
    const got = tokenLogprobs(params, Float32Array.from(logits), new TokenHistory([]), V, chosen, top);
    const want = reference(Array.from(Float32Array.from(logits)), temperature === 0 ? 1 : temperature, bias, chosen, top);
    assert.ok(Math.abs(got.logprob - want.logprob) < 1e-12, `trial ${trial}: ${got.logprob} vs ${want.logprob}`);
    assert.deepEqual(
      got.top.map((t) => t.id),
      want.top.map((t) => t.id),
      `trial ${trial}: top ids`,
    );
    got.top.forEach((t, i) => assert.ok(Math.abs(t.logprob - (want.top[i]?.logprob as number)) < 1e-12));
  }
  // ids the tokenizer cannot decode are not alternatives
  const out = tokenLogprobs({ temperature: 1, topP: 1, seed: 0 }, Float32Array.of(0, 0, 9, 9), new TokenHistory([]), 2, 0, 3);
  assert.deepEqual(
    out.top.map((t) => t.id),
    [0, 1],
  );
  assert.ok(Math.abs(out.logprob - Math.log(0.5)) < 1e-12);
});
