/**
 * Chaos suite (item 8 of tools/faults/README.md): 32 concurrent 16 MiB documents, each refused for its length (the
 * test model's context is 4,096 tokens), against a real gateway process. Refusing them must cost
 * little: the gateway's peak RSS (VmHWM) stays far below what reading and tokenizing them all at once
 * took (3.5 GB); the time is printed, not asserted.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Pipeline } from '../harness/pipeline.js';
import { peakRssMb, postJson } from './support.js';

let pipe: Pipeline;

before(async () => {
  pipe = await Pipeline.start({ services: ['gateway'] });
});
after(async () => {
  await pipe?.stop();
});

test('item 8: 32 concurrent 16 MiB documents refused for their length cost the gateway well under 1 GB and are all answered 400', { timeout: 180_000 }, async (t) => {
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
