/**
 * Chaos suite (the items of tools/faults/README.md): the whole pipeline as real processes (redis-server, gateway, encoder and
 * decoder workers, a filesystem store) with faults injected from outside — a client that leaves
 * during a long prefill, a byte flipped in a stored chunk, Redis frozen with SIGSTOP, a decoder
 * SIGKILLed mid-stream, one tenant flooding the queues — each asserting the fixed behaviour. Every
 * wait is bounded; figures (times, sizes) are printed as diagnostics, never asserted.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connectRedis, readStreamState, type Redis } from '@csa2/jobs';
import { API_KEY, OTHER_API_KEY, Pipeline, seededTestModel } from '../harness/pipeline.js';
import { getJson, largestPayload, postJson, readSse, sleep, until } from './support.js';

const LIMITED_KEY = 'test-key-limited-0003';
let pipe: Pipeline;
let redis: Redis;
let modelRoot: string;
let storeDir: string;

before(async () => {
  modelRoot = mkdtempSync(join(tmpdir(), 'csa2-chaos-model-'));
  const modelDir = await seededTestModel(modelRoot, 20_000);
  pipe = await Pipeline.start({
    modelDir,
    env: {
      CSA2_API_KEYS: `${API_KEY}:acme,${OTHER_API_KEY}:other,${LIMITED_KEY}:limited;queued_documents=2`,
      CSA2_REDIS_COMMAND_TIMEOUT_MS: '1000', // a frozen Redis fails the gateway's reads within 2 s
      CSA2_PROGRESS_INTERVAL_MS: '0', // prefill progress after every chunk
    },
  });
  redis = connectRedis(pipe.redis.url);
  redis.on('error', () => undefined);
  storeDir = fileURLToPath(pipe.storeUrl);
});

after(async () => {
  redis?.disconnect();
  await pipe?.stop();
  if (modelRoot !== undefined) rmSync(modelRoot, { recursive: true, force: true });
});

function chaos(name: string, fn: (t: { diagnostic(msg: string): void }) => Promise<void>): void {
  test(name, { timeout: 120_000 }, async (t) => {
    try {
      await fn(t);
    } catch (err) {
      pipe.dumpLogs();
      throw err;
    }
  });
}

/** Ids of the request jobs a queue has (req.<requestId>.<kind>). */
async function requestIds(queue: 'csa2-prefill' | 'csa2-decode', kind: 'prefill' | 'decode'): Promise<Set<string>> {
  const prefix = `bull:${queue}:req.`;
  return new Set((await redis.keys(`${prefix}*.${kind}`)).map((k) => k.slice(prefix.length, -(kind.length + 1))));
}

async function documentReady(id: string, key = API_KEY, timeoutMs = 60_000): Promise<Record<string, unknown>> {
  return until(
    `document ${id} ready`,
    async () => {
      const { body } = await getJson(pipe, `/v1/documents/${id}`, key);
      assert.notEqual(body['status'], 'failed', JSON.stringify(body));
      return body['status'] === 'ready' ? body : undefined;
    },
    timeoutMs,
    100,
  );
}

chaos('item 2: a client that leaves during a 16,000-token prefill stops the encoder between chunks, and no prompt artifact is left or visible', async (t) => {
  const before = await requestIds('csa2-prefill', 'prefill');
  const leave = new AbortController();
  const res = await postJson(
    pipe,
    '/v1/completions',
    { model: 'tiny', prompt: 'x '.padEnd(16_000, 'a long prompt to encode '), max_tokens: 8, stream: true },
    API_KEY,
    { signal: leave.signal },
  );
  assert.equal(res.status, 200);
  const sse = readSse(res);
  const requestId = await until('the prefill job', async () => [...(await requestIds('csa2-prefill', 'prefill'))].find((id) => !before.has(id)));
  const jobKey = `bull:csa2-prefill:req.${requestId}.prefill`;
  // the client leaves once the encoder has done its first chunk
  await until(
    'the first encoded chunk',
    async () => {
      const p = JSON.parse((await redis.hget(jobKey, 'progress')) ?? 'null') as { tokensDone?: number } | null;
      return (p?.tokensDone ?? 0) >= 256 ? true : undefined;
    },
    30_000,
    5,
  );
  const leftAt = Date.now();
  leave.abort();
  await sse.cancel();
  await until('the prefill job to finish', async () => ((await redis.hget(jobKey, 'finishedOn')) !== null ? true : undefined), 60_000);
  const progress = JSON.parse((await redis.hget(jobKey, 'progress')) ?? 'null') as { tokensDone: number; tokensTotal: number };
  const result = JSON.parse((await redis.hget(jobKey, 'returnvalue')) ?? 'null') as { tokens: number };
  t.diagnostic(`the encoder stopped at ${progress.tokensDone} of ${progress.tokensTotal} tokens, ${Date.now() - leftAt} ms after the client left`);
  assert.ok(progress.tokensDone < progress.tokensTotal, `stopped before the end: ${progress.tokensDone} of ${progress.tokensTotal}`);
  assert.equal(result.tokens, 0, 'no artifact was produced');
  const state = await readStreamState(redis, requestId);
  assert.ok(state.end?.kind === 'final' && state.end.finishReason === 'cancelled', JSON.stringify(state.end));
  assert.equal(existsSync(join(storeDir, 'tenants/acme/documents', `prompt-${requestId}`, 'manifest.json')), false, 'no prompt manifest in the store');
  const asDocument = await getJson(pipe, `/v1/documents/prompt-${requestId}`);
  assert.equal(asDocument.status, 404, 'never visible as a document');
  assert.equal(await redis.exists(`bull:csa2-decode:req.${requestId}.decode`), 0, 'no decode job');
});

chaos('item 6: one corrupt chunk does not block its prefix: posting the text again (or another sharing it) re-encodes and replaces it', async () => {
  const text = 'A stored chunk rots in place. '.padEnd(5000, 'lorem ipsum dolor sit amet ');
  const post = async (id: string, body: string) => assert.equal((await postJson(pipe, '/v1/documents', { id, text: body })).status, 202);
  await post('rotting', text);
  await documentReady('rotting');
  const manifest = JSON.parse(readFileSync(join(storeDir, 'tenants/acme/documents/rotting/manifest.json'), 'utf8')) as { chunks: { key: string }[] };
  const first = manifest.chunks[0]?.key ?? '';
  const file = join(storeDir, 'tenants/acme/chunks', first.slice(0, 2), first);
  const bytes = readFileSync(file);
  bytes[Math.floor(bytes.length / 2)] = (bytes[Math.floor(bytes.length / 2)] as number) ^ 0x01;
  writeFileSync(file, bytes);

  const del = await fetch(`${pipe.url}/v1/documents/rotting`, { method: 'DELETE', headers: { authorization: `Bearer ${API_KEY}` } });
  assert.equal(del.status, 200);
  await post('rotting', text);
  const again = await documentReady('rotting');
  assert.equal(again['tokens'], 5000);
  await post('rotting-sibling', `${text.slice(0, 4096)}${'a different ending '.repeat(20)}`); // shares the first 4,096 tokens
  await documentReady('rotting-sibling');
  const answer = await postJson(pipe, '/v1/completions', { model: 'tiny', prompt: ' and so', max_tokens: 4, document_id: 'rotting' });
  assert.equal(answer.status, 200, await answer.clone().text());
  assert.notDeepEqual(readFileSync(file), bytes, 'the corrupt chunk was replaced');
});

chaos('item 9: job payloads stay small — big token lists go through the object store, stop strings are bounded', async (t) => {
  const memoryBefore = Number(/used_memory:(\d+)/.exec(await redis.info('memory'))?.[1]);
  const longDoc = await postJson(pipe, '/v1/documents', { id: 'long-payload', text: 'x '.padEnd(12_000, 'a long document ') });
  assert.equal(longDoc.status, 202);
  const answers = await Promise.all(
    Array.from({ length: 5 }, (_, i) =>
      postJson(pipe, '/v1/completions', {
        model: 'tiny',
        prompt: `${i} `.padEnd(9_000, 'a long prompt '),
        max_tokens: 2,
        stop: ['s'.repeat(512), 't'.repeat(512), 'u'.repeat(512), 'v'.repeat(512)],
      }),
    ),
  );
  for (const a of answers) assert.equal(a.status, 200, await a.clone().text());
  await documentReady('long-payload');
  const prefill = await largestPayload(redis, 'csa2-prefill');
  const decode = await largestPayload(redis, 'csa2-decode');
  const memoryAfter = Number(/used_memory:(\d+)/.exec(await redis.info('memory'))?.[1]);
  t.diagnostic(
    `largest payloads: prefill ${prefill.bytes} B (${prefill.jobId}), decode ${decode.bytes} B; Redis used_memory ${((memoryAfter - memoryBefore) / 1e6).toFixed(2)} MB more after a 12,000-token document and 5 × 9,000-token prompts`,
  );
  assert.ok(prefill.bytes < 4096, `the largest prefill payload is ${prefill.bytes} bytes (${prefill.jobId})`);
  assert.ok(decode.bytes < 4096, `the largest decode payload is ${decode.bytes} bytes`);
  const inputs = join(storeDir, 'tenants/acme/inputs');
  await until('the stored token lists to be deleted', async () => (!existsSync(inputs) || readdirSync(inputs).length === 0 ? true : undefined), 20_000);
  const tooLong = await postJson(pipe, '/v1/completions', { model: 'tiny', prompt: 'x', max_tokens: 2, stop: ['w'.repeat(4 * 1024 * 1024)] });
  assert.equal(tooLong.status, 400);
  assert.match(((await tooLong.json()) as { error: { param: string } }).error.param, /^stop/);
});

chaos('item 3: after Redis froze, requests whose clients got an error are cancelled and the workers drop them', async (t) => {
  const before = await requestIds('csa2-decode', 'decode');
  const clients = Array.from({ length: 20 }, async (_, i) => {
    const r = await postJson(pipe, '/v1/completions', { model: 'tiny', prompt: `freeze ${i} `, max_tokens: 300, ignore_eos: true, stream: true });
    return r.text();
  });
  const ids = await until('20 decode jobs', async () => {
    const now = [...(await requestIds('csa2-decode', 'decode'))].filter((id) => !before.has(id));
    return now.length === 20 ? now : undefined;
  });
  await until('the first tokens', async () => ((await Promise.all(ids.map((id) => redis.xlen(`csa2:stream:${id}`)))).some((n) => n > 0) ? true : undefined));
  const pid = pipe.redis.process.pid as number;
  process.kill(pid, 'SIGSTOP');
  await sleep(3000);
  process.kill(pid, 'SIGCONT');
  const bodies = await Promise.all(clients);
  const errored = bodies.filter((b) => b.includes('"error"')).length;
  const t0 = Date.now();
  const small = await postJson(pipe, '/v1/completions', { model: 'tiny', prompt: 'after the freeze ', max_tokens: 4 });
  assert.equal(small.status, 200);
  t.diagnostic(`${errored} of 20 clients got an error; a new 4-token request then took ${Date.now() - t0} ms`);
  assert.ok(errored >= 15, `${errored} clients got an error`);
  const states = await until('every stream to end', async () => {
    const s = await Promise.all(ids.map((id) => readStreamState(redis, id)));
    return s.every((x) => x.end !== null) ? s : undefined;
  });
  const tokens = states.reduce((n, s) => n + s.tokenIds.length, 0);
  const cancelled = states.filter((s) => s.end?.kind === 'final' && s.end.finishReason === 'cancelled').length;
  t.diagnostic(`the 20 streams hold ${tokens} tokens (${20 * 300} if they had all been generated); ${cancelled} ended cancelled`);
  assert.ok(cancelled >= errored - 2, `${cancelled} streams ended cancelled, ${errored} clients got an error`);
  assert.ok(tokens < (20 * 300) / 2, `${tokens} tokens were generated for the 20 requests`);
});

chaos('item 7: the client of a stream whose decoder died sees progress (stalled, recovered), then the rest of its tokens', async (t) => {
  const res = await postJson(pipe, '/v1/completions', {
    model: 'tiny',
    prompt: 'stall test ',
    max_tokens: 200,
    ignore_eos: true,
    stream: true,
    stream_options: { include_usage: true },
  });
  const sse = readSse(res);
  await until('20 tokens', async () => (sse.data.length >= 20 ? true : undefined));
  await pipe.kill('decoder', 'SIGKILL');
  const killedAt = Date.now();
  try {
    // no decoder for now: once the dead worker's lock expired, the client is told its job stalled
    const stalled = await until(
      'a progress comment saying the job stalled',
      async () => sse.comments.find((c) => c.atMs > killedAt && c.text.startsWith('progress ') && c.text.includes('"stalled":true')),
      30_000,
    );
    t.diagnostic(`the client saw ${JSON.stringify(stalled.text)} ${stalled.atMs - killedAt} ms after the kill (lock 3 s)`);
  } finally {
    // a live decoder's stalled check takes the job back, and generation goes on
    await pipe.startService('decoder');
  }
  await sse.done;
  const during = sse.comments.filter((c) => c.atMs > killedAt).map((c) => c.text);
  t.diagnostic(`comments after the kill: ${[...new Set(during)].join(' | ')}`);
  assert.equal(sse.data.at(-1)?.data, '[DONE]');
  const usage = JSON.parse(sse.data.at(-2)?.data ?? 'null') as { usage?: { completion_tokens?: number } } | null;
  assert.equal(usage?.usage?.completion_tokens, 200, 'every token, once');
});

chaos("item 10: one tenant's flood of documents does not starve another tenant; a key past its queued-documents limit gets 429", async (t) => {
  const documents = Array.from({ length: 48 }, (_, i) => ({ id: `flood-${i}`, text: `${i} `.padEnd(1600, 'a flood of documents ') }));
  assert.equal((await postJson(pipe, '/v1/documents', { documents })).status, 202);
  const t0 = Date.now();
  const answer = await postJson(
    pipe,
    '/v1/completions',
    { model: 'tiny', prompt: 'q '.padEnd(2100, 'a question from another tenant '), max_tokens: 4 },
    OTHER_API_KEY,
  );
  assert.equal(answer.status, 200, await answer.clone().text());
  const waitedMs = Date.now() - t0;
  const statuses = await Promise.all(documents.map(async (d) => (await getJson(pipe, `/v1/documents/${d.id}`)).body['status']));
  const notReady = statuses.filter((s) => s !== 'ready').length;
  t.diagnostic(`tenant other's 2,100-token prompt was answered after ${waitedMs} ms, with ${notReady} of tenant acme's 48 documents not encoded yet`);
  assert.ok(notReady >= 24, `only ${notReady} of the 48 documents were still waiting: the other tenant waited for the flood`);

  const limited = await postJson(pipe, '/v1/documents', { documents: [{ text: 'one' }, { text: 'two' }, { text: 'three' }] }, LIMITED_KEY);
  assert.equal(limited.status, 429);
  assert.equal(((await limited.json()) as { error: { code: string } }).error.code, 'queued_documents_limit_exceeded');
  assert.ok(Number(limited.headers.get('retry-after')) >= 1);
});
