/**
 * The engine's continuous batching, through Engine's public API (tiny-a fixture): concurrent
 * generations are batched into shared steps and give exactly what they give alone; a resumed
 * generation continues exactly; the KV budget admits, queues and refuses; a cancelled request leaves
 * its batch-mates alone; prefill work of several tenants interleaves; long prefills are chunked while
 * streams decode.
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
import { FlowControl } from '../flow-control.js';
import type { GenerateRequest, TokenEvent } from '../types.js';
import { sequenceBytes } from './work-context.js';

const TINY = join(fixturesRoot(), 'deepseek-v41-tiny-a');
const greedy = { temperature: 0, topP: 1, seed: 0 };

function ids(n: number, seed: number): number[] {
  const rng = new SeededRandom(seed);
  return Array.from({ length: n }, () => 3 + Math.floor(rng.nextUniform() * 250));
}

function requests(): GenerateRequest[] {
  return [
    { promptIds: ids(40, 1), maxTokens: 12, sampling: greedy, keepLogits: true, ignoreEos: true },
    { promptIds: ids(7, 2), maxTokens: 20, sampling: greedy, keepLogits: true, ignoreEos: true, exact: true },
    { promptIds: ids(120, 3), maxTokens: 6, sampling: { temperature: 0.9, topP: 0.95, seed: 4 }, keepLogits: true, ignoreEos: true, replayTokens: 16 },
    { promptIds: ids(3, 5), maxTokens: 16, sampling: greedy, keepLogits: true, ignoreEos: true },
  ];
}

test('concurrent generations are batched into shared steps and equal the same generations run one at a time, logit for logit', async () => {
  const engine = await Engine.open({ modelDir: TINY });
  const alone: Awaited<ReturnType<Engine['generate']>>[] = [];
  for (const r of requests()) alone.push(await engine.generate(r));
  const before = engine.stats();
  const together = await Promise.all(requests().map((r) => engine.generate(r)));
  const after = engine.stats();
  together.forEach((t, i) => {
    const a = alone[i]!;
    assert.deepEqual(t.tokens, a.tokens, `request ${i}: tokens`);
    assert.equal(t.finishReason, a.finishReason);
    assert.equal(t.logits.length, a.logits.length);
    t.logits.forEach((row, j) => assert.deepEqual(row, a.logits[j], `request ${i}: logits row ${j}`));
  });
  // batched: fewer steps than the requests' rows need one at a time, and decode steps of more than one row
  const batchedSteps = after.steps - before.steps;
  const soloSteps = before.steps;
  assert.ok(batchedSteps < soloSteps, `${batchedSteps} steps batched vs ${soloSteps} one at a time`);
  const multi = after.decodeBatch.counts.at(-1)! - (after.decodeBatch.counts[0] ?? 0);
  assert.ok(multi > 0, 'some decode steps ran several sequences');
  await engine.close();
});

test('a resumed generation feeds the tokens it was given, reports only the new ones and ends exactly like an undisturbed run', async () => {
  const engine = await Engine.open({ modelDir: TINY });
  for (const sampling of [greedy, { temperature: 0.8, topP: 0.9, seed: 12 }]) {
    const req: GenerateRequest = { promptIds: ids(30, 9), maxTokens: 14, sampling, ignoreEos: true };
    const full = await engine.generate(req);
    const seen: number[] = [];
    const resumed = await engine.generate({ ...req, resumeTokens: full.tokens.slice(0, 6) }, { onToken: (t) => t.id >= 0 && seen.push(t.index) });
    assert.deepEqual(resumed.tokens, full.tokens, `temperature ${sampling.temperature}: tokens`);
    assert.deepEqual(
      seen,
      Array.from({ length: 8 }, (_, i) => 6 + i),
      'only indexes 6.. are reported',
    );
  }
  await engine.close();
});

test('the KV budget: requests that fit run together, the next waits its turn, one that can never fit is refused', async () => {
  const probe = await Engine.open({ modelDir: TINY });
  const one = sequenceBytes(probe.model, 40 + 10);
  await probe.close();
  const engine = await Engine.open({ modelDir: TINY, scheduler: { kvBudgetBytes: Math.floor(2.5 * one) } });
  const reqs = [1, 2, 3].map((s) => ({ promptIds: ids(40, s), maxTokens: 10, sampling: greedy, ignoreEos: true }));
  let maxRunning = 0;
  const sample = setInterval(() => (maxRunning = Math.max(maxRunning, engine.stats().running)), 1);
  const outs = await Promise.all(reqs.map((r) => engine.generate(r)));
  clearInterval(sample);
  assert.ok(outs.every((o) => o.tokens.length === 10));
  assert.ok(maxRunning <= 2, `at most 2 admitted at once, saw ${maxRunning}`);
  assert.equal(engine.stats().kvBytesInUse, 0, 'every reservation was released');
  await engine.close();
  const small = await Engine.open({ modelDir: TINY, scheduler: { kvBudgetBytes: Math.floor(0.9 * one) } });
  await assert.rejects(small.generate(reqs[0]!), /needs \d+ bytes of KV memory and the engine's budget is \d+/);
  assert.equal(small.stats().refused, 1);
  await small.close();
});

test('cancelling one request of a batch ends it at the next step; the others finish untouched', async () => {
  const engine = await Engine.open({ modelDir: TINY });
  const req = (s: number): GenerateRequest => ({ promptIds: ids(20, s), maxTokens: 30, sampling: greedy, ignoreEos: true });
  const ref = await engine.generate(req(7));
  const ac = new AbortController();
  const [cancelled, other] = await Promise.all([
    engine.generate(req(6), { signal: ac.signal, onToken: (t) => t.index === 3 && ac.abort() }),
    engine.generate(req(7)),
  ]);
  assert.equal(cancelled.finishReason, 'cancelled');
  assert.ok(cancelled.tokens.length >= 4 && cancelled.tokens.length < 30);
  assert.deepEqual(other.tokens, ref.tokens);
  assert.equal(engine.stats().kvBytesInUse, 0);
  await engine.close();
});

test('a short prompt is not stuck behind a long ingest: prefill chunks of both tenants interleave', async () => {
  const store = pathToFileURL(join(mkdtempSync(join(tmpdir(), 'csa2-sched-')), 'store')).href;
  const engine = await Engine.open({ modelDir: TINY, store, chunkTokens: 32, scheduler: { prefillChunkTokens: 16, maxStepTokens: 32 } });
  let ingestDone = false;
  let firstTokenBeforeIngestEnd = false;
  const ingest = engine.ingest({ tenant: 'big', documentId: 'long', tokenIds: ids(240, 8) }).then((o) => {
    ingestDone = true;
    return o;
  });
  await new Promise((r) => setTimeout(r, 5));
  const gen = engine.generate(
    { tenant: 'small', promptIds: ids(10, 9), maxTokens: 2, sampling: greedy, ignoreEos: true },
    { onToken: () => (firstTokenBeforeIngestEnd ||= !ingestDone) },
  );
  const [doc] = await Promise.all([ingest, gen]);
  assert.equal(doc.tokens, 240);
  assert.ok(firstTokenBeforeIngestEnd, "the short request's first token came before the long ingest finished");
  await engine.close();
});

test('while sequences decode, a long prompt is prefilled in chunks no bigger than the policy allows, and the streams keep stepping', async () => {
  const engine = await Engine.open({ modelDir: TINY, scheduler: { prefillChunkTokens: 64, minPrefillTokens: 8 } });
  const steps: number[] = [];
  const streams = [1, 2].map((s) =>
    engine.generate({ promptIds: ids(5, s), maxTokens: 60, sampling: greedy, ignoreEos: true }, { onToken: () => steps.push(engine.stats().steps) }),
  );
  await new Promise((r) => setTimeout(r, 20));
  const long = engine.generate({ promptIds: ids(200, 3), maxTokens: 1, sampling: greedy, exact: true });
  await Promise.all([...streams, long]);
  const s = engine.stats();
  // the long prompt took several steps, none with more than the chunk limit + the decode rows
  assert.ok(s.batchRows.counts[s.batchRows.bounds.indexOf(128)]! === s.batchRows.counts.at(-1), 'no step ran more than 128 rows');
  // every stream token came in its own step: the streams never waited several steps for a prefill
  const gaps = steps.slice(1).map((v, i) => v - steps[i]!);
  assert.ok(Math.max(...gaps) <= 2, `a stream waited ${Math.max(...gaps)} steps`);
  await engine.close();
});

test('logprobs: each reported token carries its log-probability and the top alternatives of the distribution it was drawn from', async () => {
  const engine = await Engine.open({ modelDir: TINY });
  for (const sampling of [greedy, { temperature: 0.7, topP: 1, seed: 3 }]) {
    const events: TokenEvent[] = [];
    const out = await engine.generate(
      { promptIds: ids(12, 4), maxTokens: 6, sampling, keepLogits: true, ignoreEos: true, logprobs: 3 },
      { onToken: (t) => t.id >= 0 && events.push(t) },
    );
    assert.equal(events.length, 6);
    events.forEach((ev, i) => {
      const row = out.logits[i]!;
      const t = sampling.temperature === 0 ? 1 : sampling.temperature;
      let max = -Infinity;
      for (const v of row) max = Math.max(max, v / t);
      let sum = 0;
      for (const v of row) sum += Math.exp(v / t - max);
      const lse = max + Math.log(sum);
      assert.ok(Math.abs((ev.logprob as number) - ((row[ev.id] as number) / t - lse)) < 1e-9, `token ${i}: logprob`);
      assert.equal(ev.topLogprobs?.length, 3);
      if (sampling.temperature === 0) assert.equal(ev.topLogprobs?.[0]?.id, ev.id, 'greedy: the chosen token is the most likely');
      assert.ok(ev.topLogprobs!.every((a, j) => j === 0 || a.logprob <= ev.topLogprobs![j - 1]!.logprob));
    });
  }
  const plain: TokenEvent[] = [];
  await engine.generate({ promptIds: ids(12, 4), maxTokens: 2, sampling: greedy, ignoreEos: true }, { onToken: (t) => plain.push(t) });
  assert.ok(
    plain.every((t) => t.logprob === undefined && t.topLogprobs === undefined),
    'no logprobs unless asked',
  );
  await assert.rejects(engine.generate({ promptIds: ids(3, 1), maxTokens: 2, sampling: greedy, logprobs: 21 }), /logprobs must be an integer in \[0, 20\]/);
  await engine.close();
});

test('a paused generation (flow control) gets no decode rows until it resumes, then ends exactly as an unpaused run', async () => {
  const engine = await Engine.open({ modelDir: TINY });
  try {
    const req: GenerateRequest = { promptIds: ids(20, 8), maxTokens: 24, sampling: greedy, keepLogits: true, ignoreEos: true };
    const undisturbed = await engine.generate(req);
    const flow = new FlowControl();
    const seen: number[] = [];
    let resumeAt: Promise<void> | null = null;
    const run = engine.generate(req, {
      flow,
      onToken: (t) => {
        if (t.id < 0) return;
        seen.push(t.index);
        if (t.index === 5) {
          flow.pause();
          resumeAt = new Promise((resolve) =>
            setTimeout(() => {
              // paused for 150 ms: the other generation ran meanwhile, this one did not
              assert.equal(seen.length, 6, `${seen.length} tokens while paused`);
              flow.resume();
              resolve();
            }, 150),
          );
        }
      },
    });
    const other = await engine.generate({ promptIds: ids(4, 9), maxTokens: 8, sampling: greedy, ignoreEos: true });
    assert.equal(other.tokens.length, 8, 'a batch-mate runs while one is paused');
    const out = await run;
    await resumeAt;
    assert.deepEqual(out.tokens, undisturbed.tokens);
    out.logits.forEach((row, j) => assert.deepEqual(row, undisturbed.logits[j], `logits row ${j}`));
  } finally {
    await engine.close();
  }
});
