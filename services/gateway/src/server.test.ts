import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { pino } from 'pino';
import { DECODE_QUEUE, Worker, cancelKey, connectRedis, startLocalRedis, type DecodeJob, type DecodeResult, type LocalRedis, type Redis } from '@csa2/jobs';
import { startGateway, type RunningGateway } from './server.js';
import { MODEL_NAME, finalEntry, parseSse, testEnv, tokenEntries, waitFor, writeEntries } from './testing/harness.js';

/** Reads an SSE response until `predicate` holds for the text so far; returns that text. */
async function readUntil(reader: ReadableStreamDefaultReader<Uint8Array>, predicate: (text: string) => boolean): Promise<string> {
  const decoder = new TextDecoder();
  let text = '';
  while (!predicate(text)) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`stream ended before the expected data; got ${JSON.stringify(text)}`);
    text += decoder.decode(value, { stream: true });
  }
  return text;
}

describe('startGateway: a real listening server', () => {
  let localRedis: LocalRedis;
  let storeDir: string;
  let gw: RunningGateway;
  let redis: Redis;
  let workerConn: Redis;
  let worker: Worker<DecodeJob, DecodeResult>;
  /** Jobs the fake decoder has started (it writes one token and waits for the cancel key). */
  const started = new Map<string, DecodeJob>();
  const sawCancel = new Set<string>();

  before(async () => {
    localRedis = await startLocalRedis();
    storeDir = mkdtempSync(join(tmpdir(), 'csa2-gateway-server-'));
    const env = { ...testEnv(localRedis.url, storeDir), CSA2_API_KEYS: '' };
    delete (env as Record<string, string | undefined>)['CSA2_API_KEYS'];
    gw = await startGateway(env, { logger: pino({ level: 'silent' }) });
    redis = connectRedis(localRedis.url);
    workerConn = connectRedis(localRedis.url);
    worker = new Worker<DecodeJob, DecodeResult>(
      DECODE_QUEUE,
      async (job) => {
        started.set(job.data.requestId, job.data);
        await writeEntries(redis, job.data.requestId, tokenEntries('a'));
        // A real decoder polls the cancel key between steps; this one waits for it (or gives up after 10 s).
        const deadline = Date.now() + 10_000;
        while (Date.now() < deadline) {
          if ((await redis.exists(cancelKey(job.data.requestId))) === 1) {
            sawCancel.add(job.data.requestId);
            await writeEntries(redis, job.data.requestId, [finalEntry(job.data, 1, { finishReason: 'cancelled' })]);
            break;
          }
          await new Promise((r) => setTimeout(r, 20));
        }
        return { finishReason: 'cancelled', promptTokens: job.data.promptIds.length, cachedTokens: 0, completionTokens: 1 };
      },
      { connection: workerConn, concurrency: 8, drainDelay: 1 },
    );
    worker.on('error', () => undefined);
  });
  after(async () => {
    await worker?.close(true);
    workerConn?.disconnect();
    redis?.disconnect();
    await gw?.close();
    await localRedis?.stop();
    rmSync(storeDir, { recursive: true, force: true });
  });

  const authed = (init: RequestInit = {}): RequestInit => ({ ...init, headers: { 'content-type': 'application/json', authorization: `Bearer ${gw.apiKey}` } });

  test('without CSA2_API_KEYS a key is generated and handed to the caller; it authenticates', async () => {
    assert.match(gw.apiKey, /^sk-csa2-[A-Za-z0-9_-]{32}$/);
    assert.equal(gw.deps.apiKeys.get(gw.apiKey), 'default');
    const res = await fetch(`${gw.url}/v1/models`, authed());
    assert.equal(res.status, 200);
    assert.equal(((await res.json()) as { data: { id: string }[] }).data[0]?.id, MODEL_NAME);
    assert.equal((await fetch(`${gw.url}/v1/models`)).status, 401);
    assert.equal((await fetch(`${gw.url}/healthz`)).status, 200);
  });

  test('a client that disconnects from a stream sets the cancel key; the worker sees it', async () => {
    const ac = new AbortController();
    const res = await fetch(
      `${gw.url}/v1/completions`,
      authed({ method: 'POST', body: JSON.stringify({ model: MODEL_NAME, prompt: 'stream then leave', stream: true }), signal: ac.signal }),
    );
    assert.equal(res.status, 200);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const text = await readUntil(reader, (t) => t.includes('"text":"a"'));
    const requestId = (JSON.parse(parseSse(text)[0] ?? 'null') as { id: string }).id;
    assert.equal(await redis.exists(cancelKey(requestId)), 0, 'no cancel key while the client listens');
    ac.abort();
    await waitFor('the cancel key', async () => ((await redis.exists(cancelKey(requestId))) === 1 ? true : undefined), 2000);
    await waitFor('the worker to see it', async () => (sawCancel.has(requestId) ? true : undefined), 2000);
  });

  test('a client that disconnects while waiting for a non-streamed answer sets the cancel key', async () => {
    const ac = new AbortController();
    const pending = fetch(
      `${gw.url}/v1/completions`,
      authed({ method: 'POST', body: JSON.stringify({ model: MODEL_NAME, prompt: 'wait then leave' }), signal: ac.signal }),
    ).catch((err: unknown) => err);
    const job = await waitFor('the job to start', async () => [...started.values()].find((j) => Buffer.from(j.promptIds).toString() === 'wait then leave'));
    ac.abort();
    assert.ok((await pending) instanceof Error);
    await waitFor('the cancel key', async () => ((await redis.exists(cancelKey(job.requestId))) === 1 ? true : undefined), 2000);
  });

  test('an in-process stream cancelled by its reader sets the cancel key', async () => {
    const res = await gw.app.request(
      `${gw.url}/v1/chat/completions`,
      authed({ method: 'POST', body: JSON.stringify({ model: MODEL_NAME, messages: [{ role: 'user', content: 'cancel me' }], stream: true }) }),
    );
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const text = await readUntil(reader, (t) => t.includes('"content":"a"'));
    const requestId = (JSON.parse(parseSse(text)[0] ?? 'null') as { id: string }).id;
    await reader.cancel();
    await waitFor('the cancel key', async () => ((await redis.exists(cancelKey(requestId))) === 1 ? true : undefined), 2000);
  });

  test('close() ends open streams with a shutting_down error event, sets their cancel keys, and stops listening', async () => {
    const res = await fetch(
      `${gw.url}/v1/completions`,
      authed({ method: 'POST', body: JSON.stringify({ model: MODEL_NAME, prompt: 'still running at shutdown', stream: true }) }),
    );
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    let text = await readUntil(reader, (t) => t.includes('"text":"a"'));
    const requestId = (JSON.parse(parseSse(text)[0] ?? 'null') as { id: string }).id;
    const closing = gw.close();
    text += await readUntil(reader, (t) => t.includes('shutting_down')).catch((err: unknown) => String(err));
    const events = parseSse(text.slice(0, text.lastIndexOf('\n\n') + 2));
    assert.equal((JSON.parse(events.at(-1) ?? 'null') as { error: { code: string } }).error.code, 'shutting_down');
    await closing;
    assert.equal(await redis.exists(cancelKey(requestId)), 1);
    await assert.rejects(fetch(`${gw.url}/healthz`));
  });
});
