/** EngineHost: the same results as an in-thread Engine, errors with their codes, cancellation, a free event loop. */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { fixturesRoot } from '@csa2/core/testing';
import { Engine } from '../engine.js';
import { EngineHost, EngineError } from './engine-host.js';

const TINY = join(fixturesRoot(), 'deepseek-v41-tiny-a');
const PROMPT = [12, 200, 31, 7, 99, 140, 3, 250, 18, 64];
let host: EngineHost;

before(async () => {
  host = await EngineHost.start({ modelDir: TINY });
});
after(async () => {
  await host.close();
});

test('generation in the thread equals generation on the calling thread (tokens and logits)', async () => {
  const req = { promptIds: PROMPT, maxTokens: 6, sampling: { temperature: 0.8, topP: 0.9, seed: 7 }, keepLogits: true, ignoreEos: true };
  const streamed: number[] = [];
  const remote = await host.generate(req, { onToken: (t) => streamed.push(t.id) });
  const engine = await Engine.open({ modelDir: TINY });
  const local = await engine.generate(req);
  await engine.close();
  assert.deepEqual(remote.tokens, local.tokens);
  assert.deepEqual(streamed, local.tokens);
  assert.equal(remote.logits.length, 6);
  remote.logits.forEach((row, i) => assert.deepEqual(row, local.logits[i]));
  assert.equal(host.info.vocabSize, 256);
});

test('the caller event loop keeps running while the thread computes', async () => {
  let ticks = 0;
  const timer = setInterval(() => ticks++, 2);
  const t0 = performance.now();
  await host.generate({ promptIds: PROMPT, maxTokens: 40, sampling: { temperature: 0, topP: 1, seed: 0 }, ignoreEos: true, exact: true });
  const elapsedMs = performance.now() - t0;
  clearInterval(timer);
  // a blocked loop would tick at most once; a free one ticks throughout (the timer's own rate varies)
  assert.ok(ticks >= Math.min(10, elapsedMs / 20), `only ${ticks} ticks in ${elapsedMs.toFixed(0)} ms`);
});

test('an abort stops generation with finish reason cancelled', async () => {
  const ac = new AbortController();
  const out = await host.generate(
    { promptIds: PROMPT, maxTokens: 200, sampling: { temperature: 0, topP: 1, seed: 0 }, ignoreEos: true },
    {
      signal: ac.signal,
      onToken: (t) => {
        if (t.index === 2) ac.abort();
      },
    },
  );
  assert.equal(out.finishReason, 'cancelled');
  assert.ok(out.tokens.length >= 3 && out.tokens.length < 200, `${out.tokens.length} tokens`);
});

test('errors in the thread come back with their code and message; the host keeps serving', async () => {
  await assert.rejects(
    host.generate({ promptIds: [1, 999], maxTokens: 2, sampling: { temperature: 0, topP: 1, seed: 0 } }),
    (err: unknown) => err instanceof EngineError && err.code === 'input-invalid' && /token id 999 at index 1/.test(err.message),
  );
  await assert.rejects(host.generate({ promptIds: [1], maxTokens: 2, sampling: { temperature: -1, topP: 1, seed: 0 } }), /temperature/);
  const ok = await host.generate({ promptIds: [1, 2], maxTokens: 1, sampling: { temperature: 0, topP: 1, seed: 0 } });
  assert.equal(ok.tokens.length, 1);
  assert.ok(host.alive);
});

test('a model that cannot be loaded fails start with a clear error', async () => {
  await assert.rejects(
    EngineHost.start({ modelDir: '/nonexistent-model-dir' }),
    (err: unknown) => err instanceof EngineError && /config\.json/.test(err.message),
  );
});

test('the engine thread has a stack of its own size: a process with a long command line still opens its sessions', async () => {
  // onnxruntime's session creation recurses deeply; on the 4 MB default worker stack a process whose
  // command line was ~17 KB long segfaulted (exit 139) creating its first session
  const { spawnSync } = await import('node:child_process');
  const hostUrl = new URL('./engine-host.js', import.meta.url).href;
  const script = `const { EngineHost } = await import(${JSON.stringify(hostUrl)});
const h = await EngineHost.start({ modelDir: ${JSON.stringify(TINY)} });
const out = await h.generate({ promptIds: [5, 6, 7], maxTokens: 2, sampling: { temperature: 0, topP: 1, seed: 0 } });
await h.close();
process.stdout.write(String(out.tokens.length));`;
  const { mkdtempSync, writeFileSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const file = join(mkdtempSync(join(tmpdir(), 'csa2-host-')), 'long-argv.mjs');
  writeFileSync(file, script);
  const r = spawnSync(process.execPath, [file, 'x'.repeat(64 * 1024)], { encoding: 'utf8' });
  assert.equal(r.status, 0, `exit ${r.status} (signal ${r.signal}): ${r.stderr}`);
  assert.equal(r.stdout, '2');
});
