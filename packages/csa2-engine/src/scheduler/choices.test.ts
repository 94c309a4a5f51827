/**
 * n choices from one prefill, their resumes, and prompt logprobs, through Engine (tiny-a fixture).
 * Criteria (fixed before the runs): choice i of an n-choice generation is, token for token and logit
 * for logit, the n = 1 generation with seed + i (batch invariance makes this exact); the prompt is
 * prefilled once (prefill rows counted); prompt logprobs from the exact run equal, bit for bit, those
 * from a CED run whose replay covers the prompt (the same computation: replay over the whole prompt
 * is the exact prefill); and they agree within 1e-4 with log-softmax (float64) of the last-row logits
 * of separate exact prefills of each prefix — an independent path whose float32 GEMMs see other row
 * counts (a few ulps on logits of magnitude ≲ 20: ≪ 1e-4).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { SeededRandom } from '@csa2/core';
import { fixturesRoot } from '@csa2/core/testing';
import { Engine } from '../engine.js';
import type { GenerateRequest, TokenEvent } from '../types.js';

const TINY = join(fixturesRoot(), 'deepseek-v41-tiny-a');
const greedy = { temperature: 0, topP: 1, seed: 0 };

function ids(n: number, seed: number): number[] {
  const rng = new SeededRandom(seed);
  return Array.from({ length: n }, () => 3 + Math.floor(rng.nextUniform() * 250));
}

function logSoftmax64(logits: Float32Array, id: number, limit: number): number {
  let max = -Infinity;
  for (let i = 0; i < limit; i++) max = Math.max(max, logits[i] as number);
  let sum = 0;
  for (let i = 0; i < limit; i++) sum += Math.exp((logits[i] as number) - max);
  return (logits[id] as number) - max - Math.log(sum);
}

test('n choices: choice i equals the n = 1 generation with seed + i, from one prefill; with a stored document too', async () => {
  const store = pathToFileURL(mkdtempSync(join(tmpdir(), 'csa2-choices-'))).href;
  const engine = await Engine.open({ modelDir: TINY, store, chunkTokens: 32 });
  try {
    await engine.ingest({ tenant: 't', documentId: 'doc', tokenIds: ids(120, 1) });
    const sampling = { temperature: 0.9, topP: 0.95, seed: 11 };
    for (const base of [
      { promptIds: ids(30, 2), maxTokens: 14, sampling, keepLogits: true, ignoreEos: true, logprobs: 2 },
      { promptIds: ids(6, 3), maxTokens: 10, sampling, keepLogits: true, ignoreEos: true, document: { tenant: 't', documentId: 'doc' } },
      { promptIds: ids(9, 4), maxTokens: 12, sampling, keepLogits: true, ignoreEos: true, exact: true },
    ] satisfies GenerateRequest[]) {
      const alone: Awaited<ReturnType<Engine['generate']>>[] = [];
      for (let i = 0; i < 3; i++) alone.push(await engine.generate({ ...base, sampling: { ...sampling, seed: sampling.seed + i } }));
      const before = engine.stats().prefillTokens;
      const events: TokenEvent[] = [];
      const out = await engine.generate({ ...base, n: 3 }, { onToken: (e) => events.push(e) });
      const prefillRows = engine.stats().prefillTokens - before;
      assert.equal(out.choices.length, 3);
      out.choices.forEach((c, i) => {
        const a = alone[i]!;
        assert.deepEqual(c.tokens, a.tokens, `choice ${i}: tokens`);
        assert.equal(c.text, a.text);
        assert.equal(c.finishReason, a.finishReason);
        c.logits.forEach((row, j) => assert.deepEqual(row, a.logits[j], `choice ${i}: logits row ${j}`));
        const mine = events.filter((e) => e.choice === i && e.id >= 0);
        assert.deepEqual(
          mine.map((e) => e.index),
          c.tokens.map((_, j) => j),
          `choice ${i}: one event per token, in order`,
        );
        if (base.logprobs !== undefined) assert.ok(mine.every((e) => e.logprob !== undefined && e.topLogprobs?.length === 2));
      });
      assert.deepEqual(out.tokens, out.choices[0]!.tokens, 'the top-level fields are choice 0');
      assert.ok(
        out.choices.some((c) => c.tokens.join() !== out.choices[0]!.tokens.join()),
        'the seeds make the choices differ',
      );
      // the prompt was prefilled once: the rows of one n = 1 prefill, not three
      const before1 = engine.stats().prefillTokens;
      await engine.generate({ ...base, maxTokens: 1 });
      assert.equal(prefillRows, engine.stats().prefillTokens - before1, 'one prefill for three choices');
    }
    // greedy choices are all the same; explicit seeds override seed + i
    const g = await engine.generate({ promptIds: ids(12, 5), maxTokens: 8, sampling: greedy, ignoreEos: true, n: 2 });
    assert.deepEqual(g.choices[0]!.tokens, g.choices[1]!.tokens);
    const seeded = await engine.generate({ promptIds: ids(12, 5), maxTokens: 8, sampling, ignoreEos: true, n: 2, seeds: [40, 41] });
    const s41 = await engine.generate({ promptIds: ids(12, 5), maxTokens: 8, sampling: { ...sampling, seed: 41 }, ignoreEos: true });
    assert.deepEqual(seeded.choices[1]!.tokens, s41.tokens);
    await assert.rejects(engine.generate({ promptIds: [5], maxTokens: 2, sampling, n: 17 }), /n must be an integer in \[1, 16\]/);
    await assert.rejects(engine.generate({ promptIds: [5], maxTokens: 2, sampling, n: 2, seeds: [1] }), /seeds has 1 entries, n is 2/);
    await assert.rejects(engine.generate({ promptIds: [5], maxTokens: 2, sampling, n: 2, resumeTokens: [7] }), /resumes through resumeChoices/);
  } finally {
    await engine.close();
  }
});

test('resumeChoices: each choice continues from its own tokens exactly as the undisturbed run, reporting only new tokens', async () => {
  const engine = await Engine.open({ modelDir: TINY });
  try {
    const req: GenerateRequest = { promptIds: ids(25, 6), maxTokens: 12, sampling: { temperature: 1, topP: 1, seed: 3 }, ignoreEos: true, n: 3 };
    const full = await engine.generate(req);
    const cut = [4, 0, 11];
    const events: TokenEvent[] = [];
    const resumed = await engine.generate({ ...req, resumeChoices: full.choices.map((c, i) => c.tokens.slice(0, cut[i])) }, { onToken: (e) => events.push(e) });
    resumed.choices.forEach((c, i) => {
      assert.deepEqual(c.tokens, full.choices[i]!.tokens, `choice ${i}`);
      assert.deepEqual(
        events.filter((e) => e.choice === i && e.id >= 0).map((e) => e.index),
        c.tokens.map((_, j) => j).slice(cut[i]),
        `choice ${i}: only the new tokens`,
      );
    });
  } finally {
    await engine.close();
  }
});

test('prompt logprobs: exact and a CED replay over the prompt agree bit for bit, and with separate prefills of each prefix within 1e-4', async () => {
  const engine = await Engine.open({ modelDir: TINY });
  try {
    const prompt = ids(40, 7);
    let reported: unknown = null;
    const exact = await engine.generate(
      { promptIds: prompt, maxTokens: 2, sampling: greedy, exact: true, promptLogprobs: 3 },
      { onPromptLogprobs: (lp) => (reported = lp) },
    );
    const ced = await engine.generate({ promptIds: prompt, maxTokens: 2, sampling: greedy, replayTokens: 4, promptLogprobs: 3 });
    const lp = exact.promptLogprobs ?? [];
    assert.equal(lp.length, prompt.length);
    assert.equal(lp[0], null, 'the first token has no context');
    assert.deepEqual(reported, lp, 'reported once, before the tokens, as in the outcome');
    assert.deepEqual(ced.promptLogprobs, lp, 'CED with the replay widened to the prompt = exact');
    const V = engine.model.config.vocabSize;
    for (let i = 1; i < prompt.length; i++) {
      const e = lp[i]!;
      assert.equal(e.id, prompt[i]);
      const prefix = await engine.generate({ promptIds: prompt.slice(0, i), maxTokens: 1, sampling: greedy, exact: true, keepLogits: true });
      const want = logSoftmax64(prefix.logits[0]!, prompt[i]!, V);
      assert.ok(Math.abs(e.logprob - want) < 1e-4, `token ${i}: ${e.logprob} vs ${want}`);
      assert.equal(e.topLogprobs.length, 3);
      for (let k = 1; k < 3; k++) assert.ok(e.topLogprobs[k - 1]!.logprob >= e.topLogprobs[k]!.logprob, 'most likely first');
      assert.ok(e.topLogprobs[0]!.logprob >= e.logprob);
    }
    // the generated tokens' logprobs equal the prompt logprob of the same position one step later
    const withNext = await engine.generate({ promptIds: [...prompt, exact.tokens[0]!], maxTokens: 1, sampling: greedy, exact: true, promptLogprobs: 0 });
    const stepped: number[] = [];
    await engine.generate(
      { promptIds: prompt, maxTokens: 1, sampling: greedy, exact: true, logprobs: 0 },
      { onToken: (e) => (e.logprob !== undefined ? stepped.push(e.logprob) : undefined) },
    );
    assert.ok(Math.abs(withNext.promptLogprobs![prompt.length]!.logprob - stepped[0]!) < 1e-4);
  } finally {
    await engine.close();
  }
});
