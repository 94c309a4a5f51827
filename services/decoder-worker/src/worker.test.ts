/**
 * The decoder worker end to end on a real redis-server, real BullMQ and the tiny model in an engine
 * thread: stream contents against `host.generate`, exactly-once under retries, cancellation, the
 * error policy, engine restarts and shutdown.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { fixturesRoot } from '@csa2/core/testing';
import { EngineHost, type GenerateRequest } from '@csa2/engine';
import {
  DECODE_JOB_NAME,
  DECODE_QUEUE,
  DEFAULT_DECODE_JOB_OPTIONS,
  Queue,
  appendStreamEntry,
  cancelKey,
  choiceStreamId,
  connectRedis,
  silentLogger,
  startLocalRedis,
  type DecodeJob,
  type LocalRedis,
  type Redis,
  type StreamEntry,
} from '@csa2/jobs';
import { readStreamEntries, waitForJobSettled, waitForStreamLength } from '@csa2/jobs/testing';
import type { DecoderConfig } from './config.js';
import { startDecoderWorker, type DecoderWorker } from './worker.js';

const TINY = join(fixturesRoot(), 'deepseek-v41-tiny-a');
const PROMPT = [12, 200, 31, 7, 99, 140, 3, 250, 18, 64];
const SAMPLING = { temperature: 0.8, topP: 0.9, seed: 7 };

let server: LocalRedis;
let redis: Redis;
let queue: Queue;
let ref: EngineHost;
let worker: DecoderWorker;
let config: DecoderConfig;
let seq = 0;
const storeDir = mkdtempSync(join(tmpdir(), 'csa2-decoder-test-'));
const STORE = pathToFileURL(storeDir).href;

before(async () => {
  server = await startLocalRedis();
  redis = connectRedis(server.url);
  queue = new Queue(DECODE_QUEUE, { connection: redis });
  config = {
    redisUrl: server.url,
    modelDir: TINY,
    storeUrl: STORE,
    concurrency: 1,
    scheduler: {},
    lockDurationMs: 30_000,
    lockRenewMs: 15_000,
    stalledIntervalMs: 30_000,
    threads: 'auto',
    scanThreads: 'auto',
    provider: 'cpu',
    shutdownGraceMs: 10_000,
    cancelPollMs: 20,
    logLevel: 'error',
    httpHost: '127.0.0.1',
    httpPort: 0,
    readyTimeoutMs: 1000,
  };
  [ref, worker] = await Promise.all([EngineHost.start({ modelDir: TINY, store: STORE, chunkTokens: 32 }), startDecoderWorker(config, { log: silentLogger })]);
});

after(async () => {
  await worker?.close();
  await ref?.close();
  await queue?.close();
  await redis?.quit();
  await server?.stop();
  rmSync(storeDir, { recursive: true, force: true });
});

function decodeJob(over: Partial<DecodeJob> = {}): DecodeJob {
  return {
    v: 1,
    requestId: `r${++seq}-${Date.now()}`,
    tenant: 'acme',
    model: 'tiny',
    promptIds: PROMPT,
    documentId: null,
    sampling: SAMPLING,
    maxTokens: 12,
    stop: [],
    ignoreEos: true,
    replayTokens: null,
    acceptedAtMs: Date.now(),
    ...over,
  };
}

function reference(job: DecodeJob) {
  const req: GenerateRequest = {
    promptIds: job.promptIds,
    maxTokens: job.maxTokens,
    sampling: job.sampling,
    ignoreEos: job.ignoreEos,
    ...(job.stop.length > 0 ? { stopSequences: job.stop } : {}),
  };
  return ref.generate(req);
}

async function enqueue(job: unknown, jobId: string, options: { backoffMs?: number } = {}) {
  const backoff = options.backoffMs !== undefined ? { backoff: { type: 'fixed', delay: options.backoffMs } } : {};
  await queue.add(DECODE_JOB_NAME, job, { ...DEFAULT_DECODE_JOB_OPTIONS, ...backoff, jobId });
  return jobId;
}

/** Token entries must be exactly 0..n-1, once each, followed by one end entry. */
function splitStream(entries: { entry: StreamEntry }[]) {
  const tokens = entries.slice(0, -1).map((e) => e.entry);
  tokens.forEach((e, i) => assert.ok(e.kind === 'token' && e.index === i, `entry ${i}: ${JSON.stringify(e)}`));
  const end = entries.at(-1)?.entry;
  assert.ok(end !== undefined && end.kind !== 'token', 'the stream ends with a final or error entry');
  return { tokens: tokens as Extract<StreamEntry, { kind: 'token' }>[], end };
}

test('a decode job streams the tokens host.generate makes, indexes 0..n-1, then the final entry', async () => {
  const job = decodeJob();
  const [expected] = await Promise.all([reference(job), enqueue(job, `j-${job.requestId}`)]);
  const { state, job: done } = await waitForJobSettled(queue, `j-${job.requestId}`);
  assert.equal(state, 'completed');
  const { tokens, end } = splitStream(await readStreamEntries(redis, job.requestId));
  assert.deepEqual(
    tokens.map((t) => t.id),
    expected.tokens,
  );
  assert.ok(end.kind === 'final');
  assert.equal(tokens.map((t) => t.text).join('') + (end.text ?? ''), expected.text);
  assert.equal(end.finishReason, 'length');
  assert.equal(end.tokens, 12);
  assert.deepEqual(end.usage, {
    prompt_tokens: PROMPT.length,
    completion_tokens: 12,
    total_tokens: PROMPT.length + 12,
    prompt_tokens_details: { cached_tokens: 0 },
  });
  assert.equal(end.timing?.attempt, 1);
  assert.ok((end.timing?.prefillMs ?? -1) >= 0 && (end.timing?.decodeMs ?? -1) >= 0);
  assert.deepEqual(done.returnvalue, { finishReason: 'length', promptTokens: PROMPT.length, cachedTokens: 0, completionTokens: 12 });
  assert.ok((await redis.pttl(`csa2:stream:${job.requestId}`)) > 3_000_000, 'the stream has its TTL');
});

test('stop sequences: finish_reason stop, the streamed text equals host.generate text', async () => {
  const plain = await reference(decodeJob({ maxTokens: 24 }));
  // a stop string taken from the middle of the plain output, so generation must stop there
  const stop = plain.text.slice(6, 8);
  assert.ok(stop.length === 2, `the reference produced text to cut (${JSON.stringify(plain.text)})`);
  const job = decodeJob({ maxTokens: 24, stop: [stop] });
  const expected = await reference(job);
  await enqueue(job, `j-${job.requestId}`);
  assert.equal((await waitForJobSettled(queue, `j-${job.requestId}`)).state, 'completed');
  const { tokens, end } = splitStream(await readStreamEntries(redis, job.requestId));
  assert.ok(end.kind === 'final');
  assert.equal(end.finishReason, 'stop');
  assert.equal(expected.finishReason, 'stop');
  assert.deepEqual(
    tokens.map((t) => t.id),
    expected.tokens,
  );
  assert.equal(tokens.map((t) => t.text).join('') + (end.text ?? ''), expected.text);
  assert.ok(!expected.text.includes(stop));
});

test('a retried job writes only the indexes the stream lacks (the first k entries stay as they were)', async () => {
  const job = decodeJob({ maxTokens: 10 });
  const expected = await reference(job);
  const k = 4;
  // what a first attempt that died after k tokens left behind (texts marked, to see they stay)
  for (let i = 0; i < k; i++) {
    await appendStreamEntry(redis, job.requestId, { kind: 'token', index: i, id: expected.tokens[i] as number, text: `p${i}` });
  }
  const before = await readStreamEntries(redis, job.requestId);
  await enqueue(job, `j-${job.requestId}`);
  assert.equal((await waitForJobSettled(queue, `j-${job.requestId}`)).state, 'completed');
  const entries = await readStreamEntries(redis, job.requestId);
  const { tokens, end } = splitStream(entries);
  assert.deepEqual(
    tokens.map((t) => t.id),
    expected.tokens,
  );
  assert.deepEqual(entries.slice(0, k), before, 'pre-existing entries are untouched (same Redis ids and texts)');
  assert.ok(end.kind === 'final' && end.tokens === 10 && end.usage.completion_tokens === 10);
});

test('a retry continues after the tokens the stream holds: they are fed to the engine, not generated again', async () => {
  const job = decodeJob({ maxTokens: 6 });
  const expected = await reference(job);
  // the earlier attempt's tokens, one of them not what greedy decoding would pick: it is kept and fed
  const held = [expected.tokens[0] as number, ((expected.tokens[1] as number) + 1) % 256];
  await appendStreamEntry(redis, job.requestId, { kind: 'token', index: 0, id: held[0] as number, text: 'a' });
  await appendStreamEntry(redis, job.requestId, { kind: 'token', index: 1, id: held[1] as number, text: 'b' });
  await enqueue(job, `j-${job.requestId}`);
  assert.equal((await waitForJobSettled(queue, `j-${job.requestId}`)).state, 'completed');
  const { tokens, end } = splitStream(await readStreamEntries(redis, job.requestId));
  const host = await worker.engine();
  const continued = await host.generate({ promptIds: job.promptIds, maxTokens: 6, sampling: job.sampling, ignoreEos: job.ignoreEos, resumeTokens: held });
  assert.deepEqual(
    tokens.map((t) => t.id),
    continued.tokens,
  );
  assert.deepEqual(
    tokens.slice(0, 2).map((t) => t.text),
    ['a', 'b'],
    'the held entries stay as they were',
  );
  assert.ok(end.kind === 'final' && end.tokens === 6);
});

test('a job naming a document continues it: tokens as host.generate on the document, cached_tokens = its tokens', async () => {
  const doc = Array.from({ length: 120 }, (_, i) => 3 + ((i * 89 + 7) % 250));
  await ref.ingest({ tenant: 'acme', documentId: 'manual', tokenIds: doc });
  const job = decodeJob({ documentId: 'manual', promptIds: [40, 41, 42], maxTokens: 6 });
  const expected = await ref.generate({
    promptIds: [40, 41, 42],
    document: { tenant: 'acme', documentId: 'manual' },
    maxTokens: 6,
    sampling: SAMPLING,
    ignoreEos: true,
  });
  await enqueue(job, `j-${job.requestId}`);
  const { state, job: done } = await waitForJobSettled(queue, `j-${job.requestId}`);
  assert.equal(state, 'completed', done.failedReason);
  const { tokens, end } = splitStream(await readStreamEntries(redis, job.requestId));
  assert.deepEqual(
    tokens.map((t) => t.id),
    expected.tokens,
  );
  assert.ok(end.kind === 'final');
  assert.deepEqual(end.usage, { prompt_tokens: 123, completion_tokens: 6, total_tokens: 129, prompt_tokens_details: { cached_tokens: 120 } });
  assert.equal(done.returnvalue.cachedTokens, 120);
});

test('a job naming a document with cachedTokens reports that many cached tokens (a long prompt encoded for the request)', async () => {
  const job = decodeJob({ documentId: 'manual', promptIds: [40], maxTokens: 2, cachedTokens: 64 });
  await enqueue(job, `j-${job.requestId}`);
  const { state, job: done } = await waitForJobSettled(queue, `j-${job.requestId}`);
  assert.equal(state, 'completed', done.failedReason);
  const { end } = splitStream(await readStreamEntries(redis, job.requestId));
  assert.ok(end.kind === 'final');
  assert.deepEqual(end.usage, { prompt_tokens: 121, completion_tokens: 2, total_tokens: 123, prompt_tokens_details: { cached_tokens: 64 } });
  assert.equal(done.returnvalue.cachedTokens, 64);
});

test('a chunk lost from the store fails the job at once as artifact-missing (a storage error, not not-found)', async () => {
  const doc = Array.from({ length: 80 }, (_, i) => 3 + ((i * 31 + 5) % 250));
  await ref.ingest({ tenant: 'acme', documentId: 'lossy', tokenIds: doc });
  const manifest = JSON.parse(readFileSync(join(storeDir, 'tenants/acme/documents/lossy/manifest.json'), 'utf8')) as { chunks: { key: string }[] };
  const lost = manifest.chunks[1]?.key ?? '';
  unlinkSync(join(storeDir, 'tenants/acme/chunks', lost.slice(0, 2), lost));
  const job = decodeJob({ documentId: 'lossy', promptIds: [40], maxTokens: 2 });
  await enqueue(job, `j-${job.requestId}`);
  const { state, job: failed } = await waitForJobSettled(queue, `j-${job.requestId}`);
  assert.equal(state, 'failed');
  assert.equal(failed.attemptsMade, 1, 'no retry');
  assert.match(failed.failedReason, /^\[artifact-missing\]/);
  const entries = await readStreamEntries(redis, job.requestId);
  assert.ok(entries.length === 1 && entries[0]?.entry.kind === 'error' && entries[0].entry.code === 'artifact-missing', JSON.stringify(entries));
});

test("a job naming a missing document (or another tenant's) fails at once without retry: not-found + error entry", async () => {
  const job = decodeJob({ tenant: 'someone-else', documentId: 'manual' });
  await enqueue(job, `j-${job.requestId}`);
  const { state, job: failed } = await waitForJobSettled(queue, `j-${job.requestId}`);
  assert.equal(state, 'failed');
  assert.equal(failed.attemptsMade, 1, 'no retry');
  assert.match(failed.failedReason, /^\[not-found\]/);
  const entries = await readStreamEntries(redis, job.requestId);
  assert.ok(entries.length === 1 && entries[0]?.entry.kind === 'error' && entries[0].entry.code === 'not-found', JSON.stringify(entries));
});

test('a stream that already ended: the job returns its result at once, nothing regenerated', async () => {
  const job = decodeJob({ maxTokens: 200 });
  for (let i = 0; i < 3; i++) await appendStreamEntry(redis, job.requestId, { kind: 'token', index: i, id: 65 + i, text: 'x' });
  const usage = { prompt_tokens: PROMPT.length, completion_tokens: 3, total_tokens: PROMPT.length + 3, prompt_tokens_details: { cached_tokens: 0 } };
  await appendStreamEntry(redis, job.requestId, { kind: 'final', finishReason: 'stop', usage, tokens: 3 });
  const before = await readStreamEntries(redis, job.requestId);
  await enqueue(job, `j-${job.requestId}`);
  const { state, job: done } = await waitForJobSettled(queue, `j-${job.requestId}`);
  assert.equal(state, 'completed');
  assert.deepEqual(done.returnvalue, { finishReason: 'stop', promptTokens: PROMPT.length, cachedTokens: 0, completionTokens: 3 });
  assert.deepEqual(await readStreamEntries(redis, job.requestId), before);
  // 200 tokens at ~8 ms each would take > 1 s; returning from the stream takes a few ms
  assert.ok((done.finishedOn ?? 0) - (done.processedOn ?? 0) < 500, `took ${(done.finishedOn ?? 0) - (done.processedOn ?? 0)} ms`);
});

test('a malformed job fails at once without retry and its stream gets an error entry', async () => {
  const requestId = `bad-${Date.now()}`;
  await enqueue({ v: 1, requestId, tenant: 'acme', maxTokens: -3 }, `j-${requestId}`);
  const { state, job } = await waitForJobSettled(queue, `j-${requestId}`);
  assert.equal(state, 'failed');
  assert.equal(job.attemptsMade, 1, 'no retry');
  assert.match(job.failedReason, /^\[payload-invalid\] malformed decode job: .*maxTokens/);
  const entries = await readStreamEntries(redis, requestId);
  assert.equal(entries.length, 1);
  const e = entries[0]?.entry;
  assert.ok(e?.kind === 'error' && e.code === 'payload-invalid' && /promptIds/.test(e.message), JSON.stringify(e));
});

test('an input the engine refuses (token id beyond the vocabulary) fails without retry: input-invalid', async () => {
  const job = decodeJob({ promptIds: [1, 999] });
  await enqueue(job, `j-${job.requestId}`);
  const { state, job: failed } = await waitForJobSettled(queue, `j-${job.requestId}`);
  assert.equal(state, 'failed');
  assert.equal(failed.attemptsMade, 1);
  assert.match(failed.failedReason, /^\[input-invalid\]/);
  const entries = await readStreamEntries(redis, job.requestId);
  assert.deepEqual(
    entries.map((e) => e.entry.kind),
    ['error'],
  );
  assert.ok(entries[0]?.entry.kind === 'error' && entries[0].entry.code === 'input-invalid');
});

test('setting the cancel key stops generation: final entry cancelled after a gap-free prefix', async () => {
  const job = decodeJob({ maxTokens: 400 });
  await enqueue(job, `j-${job.requestId}`);
  await waitForStreamLength(redis, job.requestId, 3);
  await redis.set(cancelKey(job.requestId), '1', 'EX', 60);
  const { state, job: done } = await waitForJobSettled(queue, `j-${job.requestId}`);
  assert.equal(state, 'completed');
  const { tokens, end } = splitStream(await readStreamEntries(redis, job.requestId));
  assert.ok(end.kind === 'final');
  assert.equal(end.finishReason, 'cancelled');
  assert.ok(tokens.length >= 3 && tokens.length < 100, `${tokens.length} tokens before the cancel took effect`);
  assert.equal(end.tokens, tokens.length);
  assert.equal(done.returnvalue.finishReason, 'cancelled');
});

test('a request cancelled before its job starts gets a final cancelled entry and no tokens', async () => {
  const job = decodeJob();
  await redis.set(cancelKey(job.requestId), '1', 'EX', 60);
  await enqueue(job, `j-${job.requestId}`);
  assert.equal((await waitForJobSettled(queue, `j-${job.requestId}`)).state, 'completed');
  const entries = await readStreamEntries(redis, job.requestId);
  assert.equal(entries.length, 1);
  assert.ok(entries[0]?.entry.kind === 'final' && entries[0].entry.finishReason === 'cancelled' && entries[0].entry.tokens === 0);
});

test('the engine thread exits mid-job: the job is retried on a restarted engine and the stream stays exactly-once', async () => {
  const job = decodeJob({ maxTokens: 40 });
  const expected = await reference(job);
  await enqueue(job, `j-${job.requestId}`, { backoffMs: 10 });
  await waitForStreamLength(redis, job.requestId, 5);
  // the thread goes away under the running job (closing it is the way to do that without killing
  // the process: terminating a thread inside onnxruntime aborts the whole process)
  const host = await worker.engine();
  await host.close();
  assert.equal(host.alive, false);
  const { state, job: done } = await waitForJobSettled(queue, `j-${job.requestId}`);
  assert.equal(state, 'completed');
  // attemptsMade counts finished attempts: the one that lost its engine, then the one that completed
  assert.equal(done.attemptsMade, 2, JSON.stringify(done.stacktrace));
  assert.match(done.stacktrace?.[0] ?? '', /\[runtime\] /);
  assert.equal(worker.engineStarts(), 2);
  const { tokens, end } = splitStream(await readStreamEntries(redis, job.requestId));
  assert.deepEqual(
    tokens.map((t) => t.id),
    expected.tokens,
  );
  assert.ok(end.kind === 'final' && end.finishReason === 'length' && end.timing?.attempt === 2);
});

test("n = 3 with logprobs: one stream per choice, each equal to host.generate's choice, logprobs included; choice i is the n = 1 run with seed + i", async () => {
  const job = decodeJob({ n: 3, logprobs: 2, maxTokens: 8 });
  const events: { choice: number; index: number; logprob: number | undefined; top: unknown }[] = [];
  const expected = await ref.generate(
    { promptIds: job.promptIds, maxTokens: 8, sampling: job.sampling, ignoreEos: true, n: 3, logprobs: 2 },
    { onToken: (t) => void (t.id >= 0 && events.push({ choice: t.choice, index: t.index, logprob: t.logprob, top: t.topLogprobs })) },
  );
  await enqueue(job, `j-${job.requestId}`);
  const { state, job: done } = await waitForJobSettled(queue, `j-${job.requestId}`);
  assert.equal(state, 'completed', done.failedReason);
  for (let c = 0; c < 3; c++) {
    const { tokens, end } = splitStream(await readStreamEntries(redis, choiceStreamId(job.requestId, c)));
    assert.deepEqual(
      tokens.map((t) => t.id),
      expected.choices[c]?.tokens,
      `choice ${c}`,
    );
    assert.equal(tokens.map((t) => t.text).join('') + (end.kind === 'final' ? (end.text ?? '') : ''), expected.choices[c]?.text);
    for (const t of tokens) {
      const e = events.find((x) => x.choice === c && x.index === t.index);
      assert.equal(t.logprob, e?.logprob, `choice ${c} token ${t.index}`);
      assert.deepEqual(t.top, e?.top);
    }
    assert.ok(end.kind === 'final' && end.tokens === 8 && end.usage.prompt_tokens === PROMPT.length);
    const alone = await reference({ ...job, sampling: { ...SAMPLING, seed: SAMPLING.seed + c } });
    assert.deepEqual(
      tokens.map((t) => t.id),
      alone.tokens,
      `choice ${c} = n 1 with seed ${SAMPLING.seed + c}`,
    );
  }
  assert.deepEqual(done.returnvalue, { finishReason: 'length', promptTokens: PROMPT.length, cachedTokens: 0, completionTokens: 24 });
});

test("prompt logprobs (echo): the prompt entry opens choice 0's stream with the engine's values; maxTokens 0 writes no token", async () => {
  const job = decodeJob({ promptLogprobs: 3, maxTokens: 0, n: 2 });
  const expected = await ref.generate({ promptIds: job.promptIds, maxTokens: 1, sampling: job.sampling, ignoreEos: true, promptLogprobs: 3 });
  await enqueue(job, `j-${job.requestId}`);
  const { state, job: done } = await waitForJobSettled(queue, `j-${job.requestId}`);
  assert.equal(state, 'completed', done.failedReason);
  const entries = (await readStreamEntries(redis, job.requestId)).map((e) => e.entry);
  assert.deepEqual(
    entries.map((e) => e.kind),
    ['prompt', 'final'],
  );
  const prompt = entries[0];
  assert.ok(prompt?.kind === 'prompt');
  assert.equal(prompt.logprobs.length, PROMPT.length);
  assert.equal(prompt.logprobs[0], null, 'the first token has no context');
  assert.deepEqual(
    prompt.logprobs.slice(1),
    expected.promptLogprobs?.slice(1).map((p) => p && { id: p.id, logprob: p.logprob, top: p.topLogprobs }),
  );
  assert.ok(prompt.logprobs.slice(1).every((p) => p !== null && Number.isFinite(p.logprob) && p.logprob <= 0 && p.top.length === 3));
  assert.deepEqual(
    (await readStreamEntries(redis, choiceStreamId(job.requestId, 1))).map((e) => e.entry.kind),
    ['final'],
  );
  assert.deepEqual(done.returnvalue, { finishReason: 'length', promptTokens: PROMPT.length, cachedTokens: 0, completionTokens: 0 });
});

test('a retry with n = 2 resumes each choice after the tokens its stream holds (fed to the engine, not generated again)', async () => {
  const job = decodeJob({ n: 2, maxTokens: 6 });
  const expected = await ref.generate({ promptIds: job.promptIds, maxTokens: 6, sampling: job.sampling, ignoreEos: true, n: 2 });
  // the first attempt left choice 0 with 3 tokens and choice 1 with 1 token it did not pick undisturbed
  const held = [expected.choices[0]?.tokens.slice(0, 3) ?? [], [((expected.choices[1]?.tokens[0] ?? 0) + 1) % 256]];
  for (const [c, ids] of held.entries()) {
    for (const [i, id] of ids.entries()) await appendStreamEntry(redis, choiceStreamId(job.requestId, c), { kind: 'token', index: i, id, text: `h${i}` });
  }
  await enqueue(job, `j-${job.requestId}`);
  assert.equal((await waitForJobSettled(queue, `j-${job.requestId}`)).state, 'completed');
  const continued = await ref.generate({ promptIds: job.promptIds, maxTokens: 6, sampling: job.sampling, ignoreEos: true, n: 2, resumeChoices: held });
  for (const c of [0, 1]) {
    const { tokens, end } = splitStream(await readStreamEntries(redis, choiceStreamId(job.requestId, c)));
    assert.deepEqual(
      tokens.map((t) => t.id),
      continued.choices[c]?.tokens,
      `choice ${c}`,
    );
    assert.deepEqual(
      tokens.slice(0, held[c]?.length).map((t) => t.text),
      held[c]?.map((_, i) => `h${i}`),
      'the held entries stay',
    );
    assert.ok(end.kind === 'final' && end.tokens === 6);
  }
  assert.deepEqual(continued.choices[0]?.tokens, expected.choices[0]?.tokens, 'choice 0 resumed on its own tokens is undisturbed');
});

test('close() stops taking jobs and lets the running job finish', async () => {
  const running = decodeJob({ maxTokens: 30 });
  const queued = decodeJob();
  await enqueue(running, `j-${running.requestId}`);
  await waitForStreamLength(redis, running.requestId, 2);
  await enqueue(queued, `j-${queued.requestId}`);
  await worker.close();
  const job = await queue.getJob(`j-${running.requestId}`);
  assert.equal(await job?.getState(), 'completed');
  const { tokens, end } = splitStream(await readStreamEntries(redis, running.requestId));
  assert.ok(end.kind === 'final' && end.finishReason === 'length' && tokens.length === 30);
  const left = await queue.getJob(`j-${queued.requestId}`);
  assert.equal(await left?.getState(), 'waiting', 'the queued job stays for another worker');
  await left?.remove();
});

test('close() past its grace period hands the running job back to the queue (no attempt used, no end entry)', async () => {
  const job = decodeJob({ maxTokens: 100 });
  const short = await startDecoderWorker({ ...config, shutdownGraceMs: 50 }, { log: silentLogger });
  try {
    await enqueue(job, `j-${job.requestId}`);
    await waitForStreamLength(redis, job.requestId, 3);
  } finally {
    await short.close();
  }
  const handedBack = await queue.getJob(`j-${job.requestId}`);
  assert.ok(['waiting', 'delayed', 'prioritized'].includes((await handedBack?.getState()) ?? ''), `state ${await handedBack?.getState()}`);
  assert.equal(handedBack?.attemptsMade, 0, 'handing back does not use an attempt');
  const partial = await readStreamEntries(redis, job.requestId);
  assert.ok(partial.length >= 3 && partial.length < 100 && partial.every((e) => e.entry.kind === 'token'), `${partial.length} entries`);
  assert.ok((handedBack?.failedReason ?? '') === '', 'not failed');
});
