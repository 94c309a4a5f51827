/**
 * The sampler against its definition (module doc of sampler.ts): exact penalty arithmetic on small
 * cases, property tests on random logits, params and histories against a plain reference written
 * from the definition (different code: arrays of records, one sort per filter), the counter-based
 * generator, and the invariances batching needs (a token depends only on params, logits, history
 * and its index).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InputError } from '../../errors.js';
import { SeededRandom } from '../../weights/init-model.js';
import { Sampler, TokenHistory, adjustLogits, argmax, sampleToken, uniformAt, validateSampling, type SamplingParams } from './sampler.js';

const GREEDY: SamplingParams = { temperature: 0, topP: 1, seed: 0 };

/** The definition, step by step, on plain arrays. */
function referenceSample(
  p: SamplingParams,
  logits: readonly number[],
  prompt: readonly number[],
  output: readonly number[],
  index: number,
  vocabLimit: number,
): number {
  const n = Math.min(vocabLimit, logits.length);
  const x = logits.slice(0, n);
  for (const [id, b] of p.logitBias ?? []) if (id < n) x[id] = (x[id] as number) + b;
  const seen = new Set([...prompt, ...output]);
  const r = p.repetitionPenalty ?? 1;
  for (let id = 0; id < n; id++) if (seen.has(id)) x[id] = (x[id] as number) > 0 ? (x[id] as number) / r : (x[id] as number) * r;
  for (let id = 0; id < n; id++) {
    const count = output.filter((o) => o === id).length;
    x[id] = (x[id] as number) - (p.frequencyPenalty ?? 0) * count - (count > 0 ? (p.presencePenalty ?? 0) : 0);
  }
  if (p.temperature < 1e-5) {
    let best = 0;
    for (let id = 1; id < n; id++) if ((x[id] as number) > (x[best] as number)) best = id;
    return best;
  }
  const max = Math.max(...x);
  let items = x.map((v, id) => ({ id, w: Math.exp((v - max) / p.temperature) }));
  items = items.filter((it) => it.w >= (p.minP ?? 0));
  const byWeight = () => [...items].sort((a, b) => b.w - a.w || a.id - b.id);
  const k = p.topK ?? 0;
  if (k > 0 && k < items.length) {
    const kth = (byWeight()[k - 1] as { w: number }).w;
    items = items.filter((it) => it.w >= kth);
  }
  if (p.topP < 1) {
    const sorted = byWeight();
    const total = sorted.reduce((a, it) => a + it.w, 0);
    let acc = 0;
    let cut = (sorted.at(-1) as { w: number }).w;
    for (const it of sorted) {
      acc += it.w;
      if (acc >= p.topP * total) {
        cut = it.w;
        break;
      }
    }
    items = items.filter((it) => it.w >= cut);
  }
  items.sort((a, b) => a.id - b.id);
  const mass = items.reduce((a, it) => a + it.w, 0);
  const target = uniformAt(p.seed, index) * mass;
  let acc = 0;
  for (const it of items) {
    acc += it.w;
    if (acc > target) return it.id;
  }
  return (items.at(-1) as { id: number }).id;
}

function randomCase(rng: SeededRandom): { params: SamplingParams; logits: number[]; prompt: number[]; output: number[]; vocabLimit: number } {
  const vocab = 2 + Math.floor(rng.nextUniform() * 60);
  const pick = <T>(choices: readonly T[]): T => choices[Math.floor(rng.nextUniform() * choices.length)] as T;
  // a few repeated values so that ties occur
  const palette = Array.from({ length: 1 + Math.floor(rng.nextUniform() * 12) }, () => Math.fround(rng.nextNormal() * 3));
  const logits = Array.from({ length: vocab }, () => (rng.nextUniform() < 0.3 ? pick(palette) : Math.fround(rng.nextNormal() * 3)));
  const ids = (len: number) => Array.from({ length: len }, () => Math.floor(rng.nextUniform() * vocab));
  const vocabLimit = rng.nextUniform() < 0.2 ? Math.max(1, vocab - 3) : vocab;
  const biasIds = [...new Set(ids(Math.floor(rng.nextUniform() * 4)))].filter((id) => id < vocabLimit);
  const params: SamplingParams = {
    temperature: pick([0, 0.3, 0.7, 1, 1.5, 2]),
    topP: pick([1, 1, 0.9, 0.5, 0.1]),
    seed: Math.floor((rng.nextUniform() - 0.5) * 2 ** 40),
    topK: pick([0, 0, 1, 2, 5, 40]),
    minP: pick([0, 0, 0.05, 0.3]),
    repetitionPenalty: pick([1, 1, 1.3, 0.8, 2]),
    presencePenalty: pick([0, 0, 0.5, -0.5, 2]),
    frequencyPenalty: pick([0, 0, 0.4, -1]),
    logitBias: biasIds.map((id) => [id, pick([-100, -3, 0.5, 4, 100])] as const),
  };
  return { params, logits, prompt: ids(Math.floor(rng.nextUniform() * 10)), output: ids(Math.floor(rng.nextUniform() * 6)), vocabLimit };
}

test('uniformAt: a function of (seed, index) alone, in [0, 1), uniform, different per seed and index', () => {
  assert.equal(uniformAt(7, 3), uniformAt(7, 3));
  const values = new Set<number>();
  const buckets = new Array<number>(10).fill(0);
  const N = 20_000;
  let sum = 0;
  for (let i = 0; i < N; i++) {
    const u = uniformAt(42, i);
    assert.ok(u >= 0 && u < 1, `${u}`);
    values.add(u);
    sum += u;
    buckets[Math.floor(u * 10)]! += 1;
  }
  assert.equal(values.size, N, 'no repeats');
  assert.ok(Math.abs(sum / N - 0.5) < 0.01, `mean ${sum / N}`);
  for (const b of buckets) assert.ok(Math.abs(b - N / 10) < ((0.05 * N) / 10) * 3, `bucket ${b}`);
  for (const seed of [0, 1, -1, 2 ** 53 - 1, -(2 ** 53 - 1)]) assert.notEqual(uniformAt(seed, 0), uniformAt(seed, 1));
  assert.notEqual(uniformAt(0, 0), uniformAt(1, 0));
  assert.notEqual(uniformAt(-1, 0), uniformAt(1, 0));
  assert.throws(() => uniformAt(0.5, 0), InputError);
  assert.throws(() => uniformAt(0, -1), InputError);
});

test('greedy is argmax of the adjusted logits, ties to the lower id; min_p, top_k and top_p do not change it', () => {
  const logits = Float32Array.from([1, 3, 3, -2, 0.5]);
  const h = new TokenHistory([]);
  assert.equal(sampleToken(GREEDY, logits, h, 0), 1);
  for (const extra of [{ topK: 1 }, { topK: 3 }, { topP: 0.01 }, { minP: 0.99 }])
    assert.equal(sampleToken({ ...GREEDY, ...extra }, logits, h, 0), 1, JSON.stringify(extra));
  assert.equal(sampleToken({ ...GREEDY, temperature: 5e-6, seed: 9 }, logits, h, 3), 1, 'below 1e-5 is greedy');
  assert.equal(sampleToken({ ...GREEDY, logitBias: [[1, -100]] }, logits, h, 0), 2, 'bias before greedy');
  assert.equal(sampleToken({ ...GREEDY, logitBias: [[3, 100]] }, logits, h, 0), 3);
  assert.equal(sampleToken({ ...GREEDY, presencePenalty: 1 }, logits, TokenHistory.of([], [1]), 1), 2, 'penalties before greedy');
  assert.equal(sampleToken(GREEDY, logits, h, 0, 1), 0, 'ids at or above the limit are never chosen');
});

test('penalties and logit_bias follow their definitions exactly (vLLM repetition over prompt+output, OpenAI presence/frequency over the output)', () => {
  const out = new Float64Array(6);
  // repetition 2: positive logits of seen ids halved, negative ones doubled; unseen ids untouched
  const logits = [2, -2, 2, -2, 1, 4];
  adjustLogits({ ...GREEDY, repetitionPenalty: 2 }, logits, TokenHistory.of([0, 0, 3], [1]), 6, out);
  assert.deepEqual([...out], [1, -4, 2, -4, 1, 4]);
  // frequency 0.5, presence 0.25 over the output only: id 2 twice, id 3 once; id 4 in the prompt only
  adjustLogits({ ...GREEDY, frequencyPenalty: 0.5, presencePenalty: 0.25 }, logits, TokenHistory.of([4, 4], [2, 3, 2]), 6, out);
  assert.deepEqual([...out], [2, -2, 2 - 1 - 0.25, -2 - 0.5 - 0.25, 1, 4]);
  // logit_bias comes first: -1 + 3 = 2, then the repetition penalty divides it (4): 0.5 (penalty first would give -1)
  adjustLogits({ ...GREEDY, logitBias: [[0, 3]], repetitionPenalty: 4 }, [-1, 0, 0, 0, 0, 0], TokenHistory.of([0]), 6, out);
  assert.equal(out[0], 0.5);
  // negative penalties encourage; repetition < 1 encourages too
  adjustLogits({ ...GREEDY, presencePenalty: -1, repetitionPenalty: 0.5 }, logits, TokenHistory.of([], [0, 1]), 6, out);
  assert.deepEqual([...out].slice(0, 3), [2 / 0.5 + 1, -2 * 0.5 + 1, 2]);
  // the limit: ids at or above it are not touched or returned
  assert.equal(adjustLogits({ ...GREEDY, logitBias: [[5, 1]] }, logits, TokenHistory.of([]), 4, out), 4);
});

test('property: on random logits, params and histories the sampler draws exactly what the definition draws', () => {
  const rng = new SeededRandom(20261201);
  let sampled = 0;
  for (let c = 0; c < 400; c++) {
    const k = randomCase(rng);
    const sampler = new Sampler(k.params, k.vocabLimit);
    const history = TokenHistory.of(k.prompt, k.output);
    for (let index = k.output.length; index < k.output.length + 4; index++) {
      const got = sampler.next(Float32Array.from(k.logits), history, index);
      const want = referenceSample(k.params, k.logits, k.prompt, k.output, index, k.vocabLimit);
      assert.equal(got, want, `case ${c} index ${index}: ${JSON.stringify(k)}`);
      assert.ok(got < k.vocabLimit);
      if (k.params.temperature > 0) sampled++;
    }
  }
  assert.ok(sampled > 1000, 'most cases sample');
});

test('property: filters only drop tokens — the draw is always in the top-k set, above min_p and inside the nucleus', () => {
  const rng = new SeededRandom(77);
  for (let c = 0; c < 200; c++) {
    const n = 5 + Math.floor(rng.nextUniform() * 50);
    const logits = Float32Array.from({ length: n }, () => rng.nextNormal() * 2);
    const t = 0.5 + rng.nextUniform();
    const probs = Array.from(logits, (v) => Math.exp(v / t));
    const total = probs.reduce((a, b) => a + b, 0);
    const order = probs.map((p, id) => ({ p: p / total, id })).sort((a, b) => b.p - a.p);
    const k = 1 + Math.floor(rng.nextUniform() * 5);
    const minP = rng.nextUniform() * 0.5;
    const topP = 0.2 + 0.8 * rng.nextUniform();
    const seed = c;
    for (let i = 0; i < 10; i++) {
      const h = new TokenHistory([]);
      const topKId = sampleToken({ temperature: t, topP: 1, seed, topK: k }, logits, h, i);
      assert.ok(order.findIndex((o) => o.id === topKId) < k, 'top_k');
      const minPId = sampleToken({ temperature: t, topP: 1, seed, minP }, logits, h, i);
      assert.ok((probs[minPId] as number) >= minP * (probs[(order[0] as { id: number }).id] as number) * (1 - 1e-12), 'min_p');
      const topPId = sampleToken({ temperature: t, topP, seed }, logits, h, i);
      let mass = 0;
      let rank = 0;
      while (mass < topP * (1 - 1e-12)) mass += (order[rank++] as { p: number }).p;
      assert.ok(order.findIndex((o) => o.id === topPId) < rank, 'top_p');
    }
  }
});

test('top_k: 1 is greedy at any temperature and seed (a reproduction: it must not be ignored)', () => {
  const rng = new SeededRandom(5);
  for (let c = 0; c < 100; c++) {
    const logits = Float32Array.from({ length: 40 }, () => rng.nextNormal() * 2);
    const want = argmax(logits);
    for (let i = 0; i < 5; i++) assert.equal(sampleToken({ temperature: 1.5, topP: 1, seed: c, topK: 1 }, logits, new TokenHistory([]), i), want);
  }
});

test('the draws follow the distribution: frequencies over 30,000 indices match softmax(logits / T)', () => {
  const logits = Float32Array.from([0, Math.log(2), Math.log(3), -Infinity]);
  const counts = [0, 0, 0, 0];
  const sampler = new Sampler({ temperature: 1, topP: 1, seed: 11 }, 4);
  const N = 30_000;
  const h = new TokenHistory([]);
  for (let i = 0; i < N; i++) counts[sampler.next(logits, h, i)]! += 1;
  assert.equal(counts[3], 0);
  for (const [id, p] of [
    [0, 1 / 6],
    [1, 2 / 6],
    [2, 3 / 6],
  ] as const)
    assert.ok(Math.abs((counts[id] as number) / N - p) < 0.01, `id ${id}: ${(counts[id] as number) / N} vs ${p}`);
  // temperature 2 flattens: p ∝ sqrt(1, 2, 3)
  const flat = [0, 0, 0];
  const hot = new Sampler({ temperature: 2, topP: 1, seed: 11 }, 3);
  for (let i = 0; i < N; i++) flat[hot.next(logits, h, i)]! += 1;
  const z = 1 + Math.SQRT2 + Math.sqrt(3);
  for (const [id, p] of [
    [0, 1 / z],
    [1, Math.SQRT2 / z],
    [2, Math.sqrt(3) / z],
  ] as const)
    assert.ok(Math.abs((flat[id] as number) / N - p) < 0.01, `T=2 id ${id}`);
});

test('min_p is relative to the top probability after temperature', () => {
  // probabilities at T = 1 ∝ (1, 0.5, 0.2): min_p 0.4 keeps ids 0 and 1; at T = 4 ∝ (1, 0.84, 0.67): all three
  const logits = Float32Array.from([0, Math.log(0.5), Math.log(0.2)]);
  const seen = (t: number) => {
    const s = new Set<number>();
    for (let i = 0; i < 2000; i++) s.add(sampleToken({ temperature: t, topP: 1, seed: 3, minP: 0.4 }, logits, new TokenHistory([]), i));
    return [...s].sort();
  };
  assert.deepEqual(seen(1), [0, 1]);
  assert.deepEqual(seen(4), [0, 1, 2]);
});

test('batching and resuming change nothing: interleaved sequences and a run resumed mid-way draw the same tokens', () => {
  const rng = new SeededRandom(99);
  const steps = 12;
  const rows = Array.from({ length: steps }, () => Float32Array.from({ length: 30 }, () => rng.nextNormal()));
  const params: SamplingParams = { temperature: 0.9, topP: 0.9, seed: 1234, topK: 10, repetitionPenalty: 1.3, frequencyPenalty: 0.3, presencePenalty: 0.2 };
  const run = (sampler: Sampler, history: TokenHistory, from: number): number[] => {
    const out: number[] = [];
    for (let i = from; i < steps; i++) {
      const id = sampler.next(rows[i] as Float32Array, history, i);
      history.push(id);
      out.push(id);
    }
    return out;
  };
  const prompt = [1, 2, 3, 2];
  const alone = run(new Sampler(params, 30), new TokenHistory(prompt), 0);
  // one sampler shared by two sequences, steps interleaved, a different sequence between each step
  const shared = new Sampler(params, 30);
  const other = new Sampler({ ...params, seed: 5 }, 30);
  const hA = new TokenHistory(prompt);
  const hB = new TokenHistory([9, 9]);
  const a: number[] = [];
  for (let i = 0; i < steps; i++) {
    const idB = other.next(rows[steps - 1 - i] as Float32Array, hB, i);
    hB.push(idB);
    const id = shared.next(rows[i] as Float32Array, hA, i);
    hA.push(id);
    a.push(id);
    shared.next(rows[0] as Float32Array, new TokenHistory([7]), 100 + i); // someone else's draw in between
  }
  assert.deepEqual(a, alone);
  // resumed after 5 tokens from the history alone (a retried job, a preempted sequence)
  const resumed = run(new Sampler(params, 30), TokenHistory.of(prompt, alone.slice(0, 5)), 5);
  assert.deepEqual(resumed, alone.slice(5));
  // a growing token array as the prompt: only its first promptLength entries count
  const tokens = [...prompt];
  const h = new TokenHistory(tokens, tokens.length);
  tokens.push(29, 28);
  assert.equal(h.promptMask(30)[29], 0);
});

test('validateSampling refuses every out-of-range field by its API name', () => {
  const bad: [Partial<SamplingParams>, RegExp][] = [
    [{ temperature: -1 }, /temperature/],
    [{ topP: 0 }, /top_p/],
    [{ seed: 0.5 }, /seed/],
    [{ topK: -1 }, /top_k/],
    [{ topK: 1.5 }, /top_k/],
    [{ minP: 1.5 }, /min_p/],
    [{ repetitionPenalty: 0 }, /repetition_penalty/],
    [{ presencePenalty: 2.5 }, /presence_penalty/],
    [{ frequencyPenalty: -3 }, /frequency_penalty/],
    [{ logitBias: [[1, 101]] }, /logit_bias: the bias of token 1 must be in \[-100, 100\]/],
    [{ logitBias: [[-1, 1]] }, /logit_bias/],
    [{ logitBias: [[64, 1]] }, /token id 64 is outside the vocabulary \[0, 64\)/],
    [
      {
        logitBias: [
          [3, 1],
          [3, 2],
        ],
      },
      /appears twice/,
    ],
  ];
  for (const [fields, pattern] of bad)
    assert.throws(
      () => validateSampling({ ...GREEDY, ...fields }, 64),
      (e: unknown) => e instanceof InputError && pattern.test(e.message),
      JSON.stringify(fields),
    );
  assert.throws(() => new Sampler({ ...GREEDY, logitBias: [[64, 1]] }, 64), InputError);
  validateSampling({ ...GREEDY, topK: 0, minP: 0, repetitionPenalty: 1, presencePenalty: -2, frequencyPenalty: 2, logitBias: [[63, -100]] }, 64);
});
