/**
 * The encoder worker end to end on a real redis-server, real BullMQ, a filesystem object store and
 * the tiny model: document ingestion with progress, long prompts handed on to decode exactly once,
 * cancelled requests, the error policy, shutdown. (Decoding stored documents: decoder-worker's tests.)
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { fixturesRoot } from '@csa2/core/testing';
import { FsObjectStore, manifestObjectKey, parseManifest } from '@csa2/artifacts';
import {
  DECODE_QUEUE,
  DEFAULT_PREFILL_JOB_OPTIONS,
  PREFILL_JOB_NAME,
  PREFILL_QUEUE,
  Queue,
  FAIR_UNIT_TOKENS,
  cancelKey,
  decodeCostTokens,
  fairStateKey,
  connectRedis,
  parseDecodeJob,
  promptDocumentId,
  requestDecodeJobId,
  silentLogger,
  startLocalRedis,
  type DecodeJob,
  type LocalRedis,
  type PrefillJob,
  type PrefillProgress,
  type PrefillResult,
  type Redis,
} from '@csa2/jobs';
import { readStreamEntries, waitForJobSettled } from '@csa2/jobs/testing';
import type { EncoderConfig } from './config.js';
import { startEncoderWorker, type EncoderWorker } from './worker.js';

const TINY = join(fixturesRoot(), 'deepseek-v41-tiny-a');
const TENANT = 'acme';
const SAMPLING = { temperature: 0.8, topP: 0.9, seed: 11 };

let server: LocalRedis;
let redis: Redis;
let prefillQueue: Queue;
let decodeQueue: Queue;
let encoder: EncoderWorker;
let storeDir: string;
let config: EncoderConfig;
let seq = 0;

/** Deterministic pseudo-random token ids in [3, 253). */
function ids(n: number, seed: number): number[] {
  let x = seed;
  return Array.from({ length: n }, () => {
    x = (x * 1103515245 + 12345) % 2147483648;
    return 3 + (x % 250);
  });
}

before(async () => {
  server = await startLocalRedis();
  redis = connectRedis(server.url);
  prefillQueue = new Queue(PREFILL_QUEUE, { connection: redis });
  decodeQueue = new Queue(DECODE_QUEUE, { connection: redis });
  storeDir = mkdtempSync(join(tmpdir(), 'csa2-encoder-test-'));
  config = {
    redisUrl: server.url,
    modelDir: TINY,
    storeUrl: pathToFileURL(storeDir).href,
    concurrency: 1,
    scheduler: {},
    chunkTokens: 32,
    lockDurationMs: 30_000,
    lockRenewMs: 15_000,
    stalledIntervalMs: 30_000,
    threads: 'auto',
    scanThreads: 'auto',
    provider: 'cpu',
    shutdownGraceMs: 10_000,
    progressIntervalMs: 0,
    cancelPollMs: 20,
    reservedSlots: 2,
    slotPollMs: 50,
    logLevel: 'error',
    httpHost: '127.0.0.1',
    httpPort: 0,
    readyTimeoutMs: 1000,
  };
  encoder = await startEncoderWorker(config, { log: silentLogger });
});

after(async () => {
  await encoder?.close();
  await prefillQueue?.close();
  await decodeQueue?.close();
  await redis?.quit();
  await server?.stop();
  if (storeDir !== undefined) rmSync(storeDir, { recursive: true, force: true });
});

function nextId(prefix: string): string {
  return `${prefix}${++seq}-${Date.now()}`;
}

async function prefill(job: unknown, jobId: string): Promise<void> {
  await prefillQueue.add(PREFILL_JOB_NAME, job, { ...DEFAULT_PREFILL_JOB_OPTIONS, jobId });
}

function documentJob(documentId: string, input: { text: string } | { tokenIds: number[] }): PrefillJob {
  return { v: 1, kind: 'document', tenant: TENANT, documentId, model: 'tiny', input, acceptedAtMs: Date.now() };
}

function decodePayload(requestId: string, promptIds: number[], over: Partial<DecodeJob> = {}): DecodeJob {
  return {
    v: 1,
    requestId,
    tenant: TENANT,
    model: 'tiny',
    promptIds,
    documentId: null,
    sampling: SAMPLING,
    maxTokens: 8,
    stop: [],
    ignoreEos: true,
    replayTokens: null,
    acceptedAtMs: Date.now(),
    ...over,
  };
}

function promptJob(requestId: string, prefix: number[], suffix: number[], over: Partial<DecodeJob> = {}): PrefillJob {
  return {
    v: 1,
    kind: 'prompt',
    tenant: TENANT,
    requestId,
    model: 'tiny',
    tokenIds: prefix,
    decode: decodePayload(requestId, suffix, over),
    acceptedAtMs: Date.now(),
  };
}

const DOC_ID = 'handbook';
const DOC = ids(150, 5);

test('a document job ingests with progress and returns PrefillResult; ingesting it again writes nothing new', async () => {
  const progress: PrefillProgress[] = [];
  const onProgress = (_job: unknown, p: unknown) => progress.push(p as PrefillProgress);
  encoder.worker.on('progress', onProgress);
  try {
    await prefill(documentJob(DOC_ID, { tokenIds: DOC }), `doc-1`);
    const { state, job } = await waitForJobSettled(prefillQueue, 'doc-1');
    assert.equal(state, 'completed', job.failedReason);
    const result = job.returnvalue as PrefillResult;
    assert.equal(result.documentId, DOC_ID);
    assert.equal(result.tokens, 150);
    assert.equal(result.reusedTokens, 0);
    assert.ok((result.tailBytes ?? 0) > 0, 'the encoder tail is stored beside the chunks');
    assert.ok(result.bytesWritten > 0 && result.artifactBytes + (result.tailBytes ?? 0) >= result.bytesWritten, JSON.stringify(result));
    assert.deepEqual(progress.at(-1), { tokensDone: 150, tokensTotal: 150, reusedTokens: 0 });
    assert.ok(progress.every((p, i) => p.tokensTotal === 150 && (i === 0 || p.tokensDone >= (progress[i - 1] as PrefillProgress).tokensDone)));
    assert.deepEqual(job.progress, { tokensDone: 150, tokensTotal: 150, reusedTokens: 0 }, 'the last progress is stored with the job');

    await prefill(documentJob(DOC_ID, { tokenIds: DOC }), `doc-2`);
    const again = await waitForJobSettled(prefillQueue, 'doc-2');
    assert.equal(again.state, 'completed');
    const second = again.job.returnvalue as PrefillResult;
    assert.equal(second.bytesWritten, 0, 'every chunk, the tail and the manifest exist already');
    assert.equal(second.artifactBytes, result.artifactBytes);
  } finally {
    encoder.worker.off('progress', onProgress);
  }
});

test('a document given as text is tokenized by the engine (byte-level tokenizer: one token per byte)', async () => {
  await prefill(documentJob('notes', { text: 'Long documents, asked many times.' }), 'doc-text');
  const { state, job } = await waitForJobSettled(prefillQueue, 'doc-text');
  assert.equal(state, 'completed', job.failedReason);
  assert.equal((job.returnvalue as PrefillResult).tokens, 'Long documents, asked many times.'.length);
});

test('an empty document fails at once without retry: input-invalid', async () => {
  await prefill(documentJob('empty', { tokenIds: [] }), 'doc-empty');
  const { state, job } = await waitForJobSettled(prefillQueue, 'doc-empty');
  assert.equal(state, 'failed');
  assert.equal(job.attemptsMade, 1, 'no retry');
  assert.match(job.failedReason, /^\[input-invalid\] .*empty/);
});

test('a malformed prompt job fails at once without retry and its request stream gets an error entry', async () => {
  const requestId = nextId('bad');
  await prefill({ v: 1, kind: 'prompt', tenant: TENANT, requestId, tokenIds: 'nope' }, `p-${requestId}`);
  const { state, job } = await waitForJobSettled(prefillQueue, `p-${requestId}`);
  assert.equal(state, 'failed');
  assert.equal(job.attemptsMade, 1);
  assert.match(job.failedReason, /^\[payload-invalid\] malformed prefill job/);
  const entries = await readStreamEntries(redis, requestId);
  assert.equal(entries.length, 1);
  assert.ok(entries[0]?.entry.kind === 'error' && entries[0].entry.code === 'payload-invalid');
});

test('a prompt job whose decode part names another document is refused (payload-invalid)', async () => {
  const requestId = nextId('other');
  await prefill(promptJob(requestId, ids(40, 1), [7], { documentId: DOC_ID }), `p-${requestId}`);
  const { state, job } = await waitForJobSettled(prefillQueue, `p-${requestId}`);
  assert.equal(state, 'failed');
  assert.equal(job.attemptsMade, 1);
  assert.match(job.failedReason, /^\[payload-invalid\] .*decode\.documentId/);
  assert.equal((await readStreamEntries(redis, requestId))[0]?.entry.kind, 'error');
  assert.equal(await decodeQueue.getJob(requestDecodeJobId(requestId)), undefined);
});

const LONG_PREFIX = ids(100, 9);
const SUFFIX = [17, 201, 33];
let longRequestId = '';

test('a prompt job encodes the prefix and enqueues exactly one decode job, also when it runs twice', async () => {
  longRequestId = nextId('long');
  const job = promptJob(longRequestId, LONG_PREFIX, SUFFIX);
  await prefill(job, `p-${longRequestId}-a`);
  const first = await waitForJobSettled(prefillQueue, `p-${longRequestId}-a`);
  assert.equal(first.state, 'completed', first.job.failedReason);
  assert.deepEqual(first.job.returnvalue, {
    ...(first.job.returnvalue as PrefillResult),
    documentId: promptDocumentId(longRequestId),
    tokens: 100,
    reusedTokens: 0,
  });
  // the same job once more (a retry, or a duplicate enqueue under another id)
  await prefill(job, `p-${longRequestId}-b`);
  const second = await waitForJobSettled(prefillQueue, `p-${longRequestId}-b`);
  assert.equal(second.state, 'completed', second.job.failedReason);
  assert.equal((second.job.returnvalue as PrefillResult).reusedTokens, 96, 'three full chunks of 32 were already stored');

  const counts = await decodeQueue.getJobCounts('waiting', 'active', 'delayed', 'prioritized', 'completed', 'failed');
  assert.equal(
    Object.values(counts).reduce((a, b) => a + b, 0),
    1,
    JSON.stringify(counts),
  );
  const decodeJob = await decodeQueue.getJob(requestDecodeJobId(longRequestId));
  assert.ok(decodeJob !== undefined);
  const data = parseDecodeJob(decodeJob.data);
  assert.equal(data.documentId, promptDocumentId(longRequestId));
  assert.deepEqual(data.promptIds, SUFFIX);
  assert.equal(data.cachedTokens, 0, 'nothing of the prompt was stored before the request: nothing is cached');
  assert.equal(decodeJob.opts.attempts, 5);
  assert.equal(await redis.exists(`csa2:stream:${longRequestId}`), 0, 'the encoder writes no tokens');
});

test("a batch line's prompt job hands its decode job on in the tenant's batch flow, at its weight", async () => {
  const requestId = nextId('batchflow');
  const interactiveBefore = await redis.hget(fairStateKey(decodeQueue.name), `f:${TENANT}`);
  await prefillQueue.add(
    PREFILL_JOB_NAME,
    { ...promptJob(requestId, ids(40, 5), [7]), batch: true, weight: 0.01 },
    { ...DEFAULT_PREFILL_JOB_OPTIONS, jobId: `p-${requestId}` },
  );
  const { state, job } = await waitForJobSettled(prefillQueue, `p-${requestId}`);
  assert.equal(state, 'completed', job.failedReason);
  const decodeJob = await decodeQueue.getJob(requestDecodeJobId(requestId));
  assert.ok(decodeJob !== undefined && (decodeJob.opts.priority ?? 0) >= 1, 'a fair-share priority');
  // the batch flow's finish tag advanced by the decode job's cost / 0.01; the interactive flow's did not move
  const tags = await redis.hgetall(fairStateKey(decodeQueue.name));
  const cost = decodeCostTokens(parseDecodeJob(decodeJob.data)) / FAIR_UNIT_TOKENS;
  assert.ok(Number(tags[`f:${TENANT}/batch`]) >= cost / 0.01 - 1e-9, JSON.stringify(tags));
  assert.equal(tags[`f:${TENANT}`] ?? null, interactiveBefore, 'the interactive flow was not charged');
  await decodeJob.remove();
});

test('cached tokens of a long prompt are the chunks stored before the request, also when the job is retried', async () => {
  // another request with the same prefix: the three full chunks the first one stored are cached
  const again = nextId('same');
  await prefill(promptJob(again, LONG_PREFIX, [9, 9]), `p-${again}`);
  assert.equal((await waitForJobSettled(prefillQueue, `p-${again}`)).state, 'completed');
  assert.equal(parseDecodeJob((await decodeQueue.getJob(requestDecodeJobId(again)))?.data).cachedTokens, 96);

  // a retried job: its first attempt found nothing stored (its progress says so), so the chunks it
  // wrote before it was interrupted are not cached either
  const retried = nextId('retried');
  const prefix = ids(70, 31);
  const first = await waitForJobSettledAfter(async () => {
    await prefillQueue.add(PREFILL_JOB_NAME, promptJob(`${retried}x`, prefix, [4]), { ...DEFAULT_PREFILL_JOB_OPTIONS, jobId: `p-${retried}x` });
  }, `p-${retried}x`);
  assert.equal(first, 'completed'); // the "interrupted attempt": its chunks are stored now
  await prefillQueue.add(PREFILL_JOB_NAME, promptJob(retried, prefix, [4]), { ...DEFAULT_PREFILL_JOB_OPTIONS, jobId: `p-${retried}`, delay: 400 });
  const waiting = await prefillQueue.getJob(`p-${retried}`);
  await waiting?.updateProgress({ tokensDone: 32, tokensTotal: 70, reusedTokens: 0 } satisfies PrefillProgress);
  const { state, job } = await waitForJobSettled(prefillQueue, `p-${retried}`);
  assert.equal(state, 'completed', job.failedReason);
  assert.equal((job.returnvalue as PrefillResult).reusedTokens, 64, 'the retry loaded the two full chunks');
  assert.equal(parseDecodeJob((await decodeQueue.getJob(requestDecodeJobId(retried)))?.data).cachedTokens, 0);
  assert.equal((job.progress as PrefillProgress).reusedTokens, 0, "the progress keeps the first attempt's count");
});

async function waitForJobSettledAfter(add: () => Promise<void>, jobId: string): Promise<string> {
  await add();
  return (await waitForJobSettled(prefillQueue, jobId)).state;
}

test('a prompt job of a cancelled request encodes nothing, enqueues nothing, and ends the stream cancelled', async () => {
  const requestId = nextId('gone');
  await redis.set(cancelKey(requestId), '1', 'EX', 60);
  await prefill(promptJob(requestId, ids(60, 3), [5]), `p-${requestId}`);
  const { state, job } = await waitForJobSettled(prefillQueue, `p-${requestId}`);
  assert.equal(state, 'completed');
  assert.equal((job.returnvalue as PrefillResult).tokens, 0);
  assert.equal(await decodeQueue.getJob(requestDecodeJobId(requestId)), undefined);
  const entries = await readStreamEntries(redis, requestId);
  assert.equal(entries.length, 1);
  assert.ok(entries[0]?.entry.kind === 'final' && entries[0].entry.finishReason === 'cancelled');
});

test("the encoded prompt is a stored document of the request's tenant that generation can continue", async () => {
  const host = await encoder.engine();
  const out = await host.generate({
    promptIds: SUFFIX,
    document: { tenant: TENANT, documentId: promptDocumentId(longRequestId) },
    maxTokens: 2,
    sampling: SAMPLING,
    ignoreEos: true,
  });
  assert.equal(out.cachedTokens, 100);
  assert.equal(out.promptTokens, 103);
  await assert.rejects(
    host.generate({ promptIds: SUFFIX, document: { tenant: 'other-tenant', documentId: promptDocumentId(longRequestId) }, maxTokens: 1, sampling: SAMPLING }),
    (err: unknown) => (err as { code?: string }).code === 'not-found',
  );
});

test("a document's manifest records when the document was accepted, so its created_at stays the same once it is ready", async () => {
  const acceptedAtMs = Date.now() - 90_000;
  await prefill({ ...documentJob('dated', { tokenIds: ids(40, 21) }), acceptedAtMs }, 'doc-dated');
  const { state, job } = await waitForJobSettled(prefillQueue, 'doc-dated');
  assert.equal(state, 'completed', job.failedReason);
  const store = new FsObjectStore(storeDir);
  const key = manifestObjectKey(TENANT, 'dated');
  const manifest = parseManifest(key, await store.get(key));
  assert.equal(Date.parse(manifest.createdAt), acceptedAtMs);
});

test('close() lets the running ingest finish', async () => {
  const active = new Promise<void>((resolve) => encoder.worker.once('active', () => resolve()));
  await prefill(documentJob('big', { tokenIds: ids(250, 13) }), 'doc-big');
  await active;
  await encoder.close();
  const job = await prefillQueue.getJob('doc-big');
  assert.equal(await job?.getState(), 'completed');
  assert.equal((job as NonNullable<typeof job>).returnvalue.tokens, 250);
});
