/**
 * Chaos suite (item 8 of tools/faults/README.md): 32 concurrent 16 MiB documents, each refused for its length (the
 * test model's context is 4,096 tokens), against a real gateway process. Refusing them must cost
 * little: the gateway's peak RSS (VmHWM) stays far below what reading and tokenizing them all at once
 * took (3.5 GB); the time is printed, not asserted.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { Pipeline, REPO_ROOT } from '../harness/pipeline.js';
import { peakRssMb, postJson } from './support.js';

let pipe: Pipeline;

before(async () => {
  pipe = await Pipeline.start({ services: ['gateway'] });
});
after(async () => {
  await pipe?.stop();
});

test('item 8: 32 concurrent 16 MiB documents refused for their length cost the gateway well under 1 GB and are all answered 400', {
  timeout: 180_000,
}, async (t) => {
  const pid = pipe.processes('gateway')[0]?.pid as number;
  const idleMb = peakRssMb(pid);
  const body = JSON.stringify({ text: 'a'.repeat(16 * 1024 * 1024 - 64) });
  const t0 = Date.now();
  const answers = await Promise.all(
    Array.from({ length: 32 }, async () => {
      const r = await postJson(pipe, '/v1/documents', body, undefined, { signal: AbortSignal.timeout(150_000) });
      return { status: r.status, error: ((await r.json()) as { error?: { code?: string; message?: string } }).error };
    }),
  );
  const peakMb = peakRssMb(pid);
  t.diagnostic(`gateway peak RSS ${peakMb.toFixed(0)} MB (${idleMb.toFixed(0)} MB before), all 32 answered in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  for (const a of answers) {
    assert.equal(a.status, 400);
    assert.equal(a.error?.code, 'context_length_exceeded');
  }
  assert.match(answers[0]?.error?.message ?? '', /at least 16777152 tokens/, 'refused before it was tokenized');
  assert.ok(peakMb < 1024, `the gateway peaked at ${peakMb.toFixed(0)} MB`);
  const health = await fetch(`${pipe.url}/healthz`);
  assert.equal(health.status, 200);
});

test("with the served model's tokenizer.json, 32 concurrent bodies of 16 MiB of text are refused from their bytes, and a small body sent with them is not queued behind them", {
  timeout: 240_000,
}, async (t) => {
  const served = await Pipeline.start({ services: ['gateway'], modelDir: join(REPO_ROOT, 'models/v41-mini-128k') });
  try {
    const pid = served.processes('gateway')[0]?.pid as number;
    const body = JSON.stringify({ text: 'It is a truth universally acknowledged. '.repeat(420_000).slice(0, 16 * 1024 * 1024 - 64) });
    const answered: { status: number; atMs: number; error?: { code?: string; message?: string } }[] = [];
    const big = Array.from({ length: 32 }, async () => {
      const r = await postJson(served, '/v1/documents', body, undefined, { signal: AbortSignal.timeout(200_000) });
      const json = (await r.json()) as { error?: { code?: string; message?: string } };
      answered.push({ status: r.status, atMs: Date.now(), ...(json.error !== undefined ? { error: json.error } : {}) });
    });
    await new Promise((r) => setTimeout(r, 300)); // the large bodies are on their way and hold the body budget
    const small = await postJson(served, '/v1/documents', { id: 'small-one', text: 'a small document' }, undefined, { signal: AbortSignal.timeout(200_000) });
    const smallAtMs = Date.now();
    assert.equal(small.status, 202, await small.clone().text());
    await Promise.all(big);
    const lastBigMs = Math.max(...answered.map((a) => a.atMs));
    t.diagnostic(`gateway peak RSS ${peakRssMb(pid).toFixed(0)} MB; the small body was answered ${lastBigMs - smallAtMs} ms before the last large one`);
    for (const a of answered) {
      assert.equal(a.status, 400);
      assert.equal(a.error?.code, 'context_length_exceeded');
    }
    const atLeast = Number(/at least (\d+) tokens/.exec(answered[0]?.error?.message ?? '')?.[1]);
    assert.ok(
      atLeast > 131_071 && atLeast < (16 * 1024 * 1024) / 8,
      `refused from its bytes (at least ${atLeast} tokens: bytes / the longest token), not tokenized`,
    );
    assert.ok(smallAtMs < lastBigMs, 'the small body was answered while large ones were still waiting');
    assert.ok(peakRssMb(pid) < 1024, `the gateway peaked at ${peakRssMb(pid).toFixed(0)} MB`);
  } catch (err) {
    served.dumpLogs();
    throw err;
  } finally {
    await served.stop();
  }
});
