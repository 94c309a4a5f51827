/**
 * The pipeline as users run it: real Redis, the gateway, an encoder and a decoder worker as separate
 * processes, a filesystem store, and the official `openai` npm client.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import OpenAI from 'openai';
import { Queue, PREFILL_QUEUE, connectRedis } from '@csa2/jobs';
import { API_KEY, OTHER_API_KEY, Pipeline, REPO_ROOT } from '../harness/pipeline.js';

let pipe: Pipeline;
let client: OpenAI;

before(async () => {
  pipe = await Pipeline.start();
  client = new OpenAI({ apiKey: API_KEY, baseURL: `${pipe.url}/v1`, maxRetries: 0, timeout: 60_000 });
});
after(async () => {
  await pipe?.stop();
});

/** A test whose failure also prints the processes' recent output. */
function e2e(name: string, fn: () => Promise<void>): void {
  test(name, { timeout: 180_000 }, async () => {
    try {
      await fn();
    } catch (err) {
      pipe.dumpLogs();
      throw err;
    }
  });
}

const PROMPT = 'The pipeline streams tokens; ';
const SAMPLING = { temperature: 0.8, top_p: 0.95, seed: 1234 } as const;

/** `csa2 generate` in one process (the CLI), same model, prompt and sampling: its stdout text. */
function cliGenerate(prompt: string, maxTokens: number, extra: readonly string[] = []): string {
  const r = spawnSync(
    process.execPath,
    [
      join(REPO_ROOT, 'packages/csa2-engine/bin/csa2.js'),
      'generate',
      '--model',
      pipe.modelDir,
      '--prompt',
      prompt,
      '--max-tokens',
      String(maxTokens),
      '--temperature',
      String(SAMPLING.temperature),
      '--top-p',
      String(SAMPLING.top_p),
      '--seed',
      String(SAMPLING.seed),
      ...extra,
    ],
    { encoding: 'utf8' },
  );
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.replace(/\n$/, '');
}

e2e('completions: streamed text = non-streamed text = csa2 generate in one process', async () => {
  const body = { model: 'tiny', prompt: PROMPT, max_tokens: 24, ...SAMPLING };
  const plain = await client.completions.create(body);
  assert.equal(plain.object, 'text_completion');
  assert.equal(plain.choices[0]?.finish_reason, 'length');
  assert.equal(plain.usage?.completion_tokens, 24);
  assert.equal(plain.usage?.prompt_tokens, Buffer.byteLength(PROMPT));

  const stream = await client.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let streamed = '';
  let usage: OpenAI.CompletionUsage | null | undefined;
  let finish: string | null | undefined;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      streamed += c.text;
      if (c.finish_reason !== null) finish = c.finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(streamed, plain.choices[0]?.text);
  assert.equal(finish, 'length');
  assert.equal(usage?.completion_tokens, 24);
  assert.equal(cliGenerate(PROMPT, 24), plain.choices[0]?.text);
});

e2e(
  'top_k, min_p, the penalties and logit_bias go through the pipeline: its text equals csa2 generate with the same options, and top_k 1 is greedy',
  async () => {
    const extras = { top_k: 20, min_p: 0.02, repetition_penalty: 1.3, presence_penalty: 0.5, frequency_penalty: 0.4, logit_bias: { '32': -100, '101': 3 } };
    const body = { model: 'tiny', prompt: PROMPT, max_tokens: 24, ...SAMPLING, ...extras } as OpenAI.CompletionCreateParamsNonStreaming;
    const piped = (await client.completions.create(body)).choices[0]?.text ?? '';
    const cli = cliGenerate(PROMPT, 24, [
      '--top-k',
      '20',
      '--min-p',
      '0.02',
      '--repetition-penalty',
      '1.3',
      '--presence-penalty',
      '0.5',
      '--frequency-penalty',
      '0.4',
      '--logit-bias',
      '32:-100,101:3',
    ]);
    assert.equal(piped, cli);
    const plain = (await client.completions.create({ model: 'tiny', prompt: PROMPT, max_tokens: 24, ...SAMPLING })).choices[0]?.text ?? '';
    assert.notEqual(piped, plain, 'the options change the text (they are not ignored)');
    assert.ok(!piped.includes(' '), 'logit_bias -100 on the space (id 32) bans it');
    const greedy = (await client.completions.create({ model: 'tiny', prompt: PROMPT, max_tokens: 12, temperature: 0 })).choices[0]?.text;
    const topK1 = (
      await client.completions.create({
        model: 'tiny',
        prompt: PROMPT,
        max_tokens: 12,
        temperature: 1.2,
        seed: 5,
        top_k: 1,
      } as OpenAI.CompletionCreateParamsNonStreaming)
    ).choices[0]?.text;
    assert.equal(topK1, greedy);
  },
);

e2e('chat completions, streamed and not, agree', async () => {
  const body = { model: 'tiny', messages: [{ role: 'user' as const, content: 'Hello there' }], max_tokens: 16, ...SAMPLING };
  const plain = await client.chat.completions.create(body);
  assert.equal(plain.object, 'chat.completion');
  assert.equal(plain.choices[0]?.message.role, 'assistant');
  const stream = await client.chat.completions.create({ ...body, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
  assert.equal(text, plain.choices[0]?.message.content);
});

e2e('models lists the served model; bad requests get OpenAI-shaped errors with the right status', async () => {
  const models = await client.models.list();
  assert.deepEqual(
    models.data.map((m) => m.id),
    ['tiny'],
  );
  const status = async (p: Promise<unknown>) => {
    try {
      await p;
      return 0;
    } catch (err) {
      assert.ok(err instanceof OpenAI.APIError, String(err));
      assert.equal(typeof (err.error as { message?: unknown } | undefined)?.message, 'string', 'OpenAI error shape');
      return err.status;
    }
  };
  assert.equal(await status(client.completions.create({ model: 'nope', prompt: 'x', max_tokens: 2 })), 404, 'model_not_found, as OpenAI answers');
  assert.equal(await status(client.completions.create({ model: 'tiny', prompt: 'x', max_tokens: -1 })), 400);
  assert.equal(await status(client.completions.create({ model: 'tiny', prompt: 'x', max_tokens: 10_000_000 })), 400);
  assert.equal(await status(new OpenAI({ apiKey: 'wrong-key-xxxxxx', baseURL: `${pipe.url}/v1`, maxRetries: 0 }).models.list()), 401);
  const raw = await fetch(`${pipe.url}/v1/completions`, {
    method: 'POST',
    signal: AbortSignal.timeout(20_000),
    headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
    body: '{"model": "tiny", ',
  });
  assert.equal(raw.status, 400);
  assert.equal(typeof ((await raw.json()) as { error: { message: string } }).error.message, 'string');
  const huge = await fetch(`${pipe.url}/v1/completions`, {
    method: 'POST',
    signal: AbortSignal.timeout(20_000),
    headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', prompt: 'x'.repeat(20 * 1024 * 1024) }),
  });
  assert.equal(huge.status, 413);
});

e2e('a document is ingested once and queried twice; the second query runs no prefill and reports cached tokens', async () => {
  const text = 'A long document about sparse attention. '.repeat(40);
  const created = await fetch(`${pipe.url}/v1/documents`, {
    method: 'POST',
    signal: AbortSignal.timeout(20_000),
    headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ text, id: 'doc-e2e' }),
  });
  assert.equal(created.status, 202, await created.clone().text());
  let doc: { status: string; tokens?: number } = { status: 'queued' };
  const deadline = Date.now() + 60_000;
  while (doc.status !== 'ready' && Date.now() < deadline) {
    const r = await fetch(`${pipe.url}/v1/documents/doc-e2e`, { headers: { authorization: `Bearer ${API_KEY}` }, signal: AbortSignal.timeout(20_000) });
    doc = (await r.json()) as typeof doc;
    assert.notEqual(doc.status, 'failed', JSON.stringify(doc));
    if (doc.status !== 'ready') await new Promise((r2) => setTimeout(r2, 100));
  }
  assert.equal(doc.status, 'ready');
  assert.equal(doc.tokens, Buffer.byteLength(text));
  // the encoder worker stored the document's encoder tail beside its chunks; `bytes` counts both
  const manifest = JSON.parse(readFileSync(join(fileURLToPath(pipe.storeUrl), 'tenants/acme/documents/doc-e2e/manifest.json'), 'utf8')) as {
    chunks: { sizeBytes: number }[];
    tail?: { sizeBytes: number; replayTokens: number };
  };
  assert.equal(manifest.tail?.replayTokens, 128, 'a stored tail for the default replay');
  assert.equal((doc as { bytes?: number }).bytes, manifest.chunks.reduce((a, c) => a + c.sizeBytes, 0) + (manifest.tail?.sizeBytes ?? 0));

  const prefillRedis = connectRedis(pipe.redis.url);
  const prefill = new Queue(PREFILL_QUEUE, { connection: prefillRedis });
  try {
    const ask = () =>
      client.completions.create({
        model: 'tiny',
        prompt: ' Question: what is it about?',
        max_tokens: 8,
        ...SAMPLING,
        document_id: 'doc-e2e',
      } as OpenAI.CompletionCreateParamsNonStreaming);
    const first = await ask();
    const jobsAfterFirst = await prefill.getJobCounts();
    const second = await ask();
    const jobsAfterSecond = await prefill.getJobCounts();
    assert.deepEqual(jobsAfterSecond, jobsAfterFirst, 'the second query enqueued no prefill job');
    assert.equal(second.choices[0]?.text, first.choices[0]?.text);
    const details = second.usage?.prompt_tokens_details as { cached_tokens?: number } | undefined;
    assert.equal(details?.cached_tokens, doc.tokens);
    // another tenant cannot see it
    const other = new OpenAI({ apiKey: OTHER_API_KEY, baseURL: `${pipe.url}/v1`, maxRetries: 0 });
    await assert.rejects(
      other.completions.create({ model: 'tiny', prompt: 'x', max_tokens: 2, document_id: 'doc-e2e' } as OpenAI.CompletionCreateParamsNonStreaming),
      (err: unknown) => err instanceof OpenAI.APIError && err.status === 404,
    );
  } finally {
    await prefill.close();
    prefillRedis.disconnect();
  }
});

e2e('20 concurrent requests all complete', async () => {
  const outs = await Promise.all(
    Array.from({ length: 20 }, (_, i) => client.completions.create({ model: 'tiny', prompt: `request ${i}: `, max_tokens: 6, temperature: 0, seed: i })),
  );
  for (const o of outs) {
    assert.equal(o.choices[0]?.finish_reason, 'length');
    assert.equal(o.usage?.completion_tokens, 6);
  }
});

e2e(
  'SIGKILL of the decoder while it batches four streams: the restarted worker resumes each; greedy and seeded texts equal undisturbed runs, no token lost or repeated',
  async () => {
    const bodies = [
      { model: 'tiny', prompt: 'kill test ', max_tokens: 160, temperature: 0.7, seed: 99 },
      { model: 'tiny', prompt: 'greedy under batching ', max_tokens: 140, temperature: 0 },
      { model: 'tiny', prompt: 'another stream ', max_tokens: 150, temperature: 1, top_p: 0.9, seed: 5 },
      { model: 'tiny', prompt: 'greedy two ', max_tokens: 120, temperature: 0 },
    ];
    const references = await Promise.all(bodies.map((b) => client.completions.create(b)));
    let killed = false;
    let chunksSeen = 0;
    const runs = bodies.map(async (body) => {
      const stream = await client.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
      let text = '';
      let usage: OpenAI.CompletionUsage | null | undefined;
      for await (const chunk of stream) {
        for (const c of chunk.choices) text += c.text;
        if (chunk.usage) usage = chunk.usage;
        if (++chunksSeen === 40 && !killed) {
          killed = true; // the four are decoding together in one engine now
          await pipe.kill('decoder', 'SIGKILL');
          void pipe.startService('decoder');
        }
      }
      return { text, usage };
    });
    const results = await Promise.all(runs);
    assert.ok(killed);
    results.forEach((r, i) => {
      assert.equal(r.text, references[i]?.choices[0]?.text, `stream ${i}: the same text as an undisturbed run`);
      assert.equal(r.usage?.completion_tokens, bodies[i]?.max_tokens, `stream ${i}: completion tokens`);
    });
  },
);

e2e('SIGKILL of the encoder mid-document: the document still becomes ready after a restart', async () => {
  const text = 'Encoder crash test document. '.repeat(130); // ~3800 tokens: several seconds of encoding
  const created = await fetch(`${pipe.url}/v1/documents`, {
    method: 'POST',
    signal: AbortSignal.timeout(20_000),
    headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ text, id: 'doc-crash' }),
  });
  assert.equal(created.status, 202);
  const get = async () =>
    (await (
      await fetch(`${pipe.url}/v1/documents/doc-crash`, { headers: { authorization: `Bearer ${API_KEY}` }, signal: AbortSignal.timeout(20_000) })
    ).json()) as { status: string; tokens?: number };
  let state = await get();
  const deadline = Date.now() + 30_000;
  while (state.status !== 'encoding' && state.status !== 'ready' && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 20));
    state = await get();
  }
  assert.equal(state.status, 'encoding', 'caught the encoder at work');
  await pipe.kill('encoder', 'SIGKILL');
  await pipe.startService('encoder');
  const readyBy = Date.now() + 90_000;
  while (state.status !== 'ready' && Date.now() < readyBy) {
    assert.notEqual(state.status, 'failed', JSON.stringify(state));
    await new Promise((r) => setTimeout(r, 200));
    state = await get();
  }
  assert.equal(state.status, 'ready');
  assert.equal(state.tokens, Buffer.byteLength(text));
});

e2e('Redis down: readiness and completions answer 503 promptly; service resumes when Redis is back', async () => {
  const port = pipe.redis.port;
  const redisProc = pipe.redis.process;
  await new Promise<void>((resolve) => {
    redisProc.once('exit', () => resolve());
    redisProc.kill('SIGKILL');
  });
  const t0 = Date.now();
  const ready = await fetch(`${pipe.url}/readyz`, { signal: AbortSignal.timeout(20_000) });
  assert.equal(ready.status, 503);
  const completion = await fetch(`${pipe.url}/v1/completions`, {
    method: 'POST',
    signal: AbortSignal.timeout(20_000),
    headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', prompt: 'x', max_tokens: 2 }),
  });
  assert.equal(completion.status, 503);
  assert.ok(Date.now() - t0 < 12_000, `503s took ${Date.now() - t0} ms`);
  const { startLocalRedis } = await import('@csa2/jobs');
  mkdirSync(join(pipe.dir, 'redis-2'), { recursive: true });
  const again = await startLocalRedis({ port, dir: join(pipe.dir, 'redis-2') });
  Object.assign(pipe, { redis: again });
  const deadline = Date.now() + 30_000;
  let ok = false;
  while (!ok && Date.now() < deadline) {
    ok = (await fetch(`${pipe.url}/readyz`, { signal: AbortSignal.timeout(20_000) })).ok;
    if (!ok) await new Promise((r) => setTimeout(r, 200));
  }
  assert.ok(ok, 'ready again');
  const out = await client.completions.create({ model: 'tiny', prompt: 'back again ', max_tokens: 4, temperature: 0, seed: 1 });
  assert.equal(out.usage?.completion_tokens, 4);
});
