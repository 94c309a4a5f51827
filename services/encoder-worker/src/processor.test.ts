/**
 * The prefill processor's handling of a request cancelled while its long prompt is being encoded, on
 * real BullMQ and a real redis-server with a filesystem store; the engine is a fake that encodes in
 * steps of 256 tokens, as the model does between two chunks, and honours its abort signal there.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FsObjectStore, manifestObjectKey, putTokenList } from '@csa2/artifacts';
import type { IngestHooks, IngestOutcome, IngestRequest } from '@csa2/engine';
import {
  DEFAULT_PREFILL_JOB_OPTIONS,
  MAX_INLINE_TOKEN_IDS,
  PREFILL_JOB_NAME,
  Queue,
  Worker,
  cancelKey,
  connectRedis,
  promptDocumentId,
  requestDecodeJobId,
  silentLogger,
  startLocalRedis,
  type LocalRedis,
  type PrefillJob,
  type PrefillProgress,
  type PrefillResult,
  type Redis,
} from '@csa2/jobs';
import { readStreamEntries, waitForJobSettled } from '@csa2/jobs/testing';
import { DOCUMENT_ENGINE_PRIORITY, PROMPT_ENGINE_PRIORITY, createEncodeProcessor, type EncodeEngine } from './processor.js';

const STEP_TOKENS = 256;
const STEP_MS = 30;

let server: LocalRedis;
let redis: Redis;
let workerRedis: Redis;
let storeDir: string;
let store: FsObjectStore;
let prefillQueue: Queue;
let decodeQueue: Queue;
let worker: Worker;
/** What the fake engine saw, per document id: the steps it encoded and whether it was stopped. */
const runs = new Map<string, { steps: number; aborted: boolean; req: IngestRequest }>();
/** Called by the fake engine after its last step (before it returns), per document id. */
const atEnd = new Map<string, () => Promise<void>>();

const engine: EncodeEngine = {
  alive: true,
  async close() {},
  async ingest(req: IngestRequest, hooks: IngestHooks = {}): Promise<IngestOutcome> {
    const total = req.tokenIds?.length ?? 0;
    const run = { steps: 0, aborted: false, req };
    runs.set(req.documentId, run);
    for (let done = 0; done < total; done = Math.min(total, done + STEP_TOKENS)) {
      if (hooks.signal?.aborted === true) {
        run.aborted = true;
        throw Object.assign(new Error(`ingest of ${req.documentId} was cancelled`), { code: 'runtime' });
      }
      await new Promise((r) => setTimeout(r, STEP_MS));
      run.steps++;
      hooks.onProgress?.({ tokensDone: Math.min(total, done + STEP_TOKENS), tokensTotal: total, reusedTokens: 0 });
    }
    await store.put(manifestObjectKey(req.tenant, req.documentId), new TextEncoder().encode('{}'));
    await atEnd.get(req.documentId)?.();
    return {
      documentId: req.documentId,
      tokens: total,
      bytesWritten: 2,
      artifactBytes: 2,
      tailBytes: 0,
      tailReplayTokens: 0,
      reusedTokens: 0,
      chunksWritten: 1,
      chunksSkipped: 0,
      chunksRepaired: 0,
      bytesPerToken: 1,
    };
  },
};

before(async () => {
  server = await startLocalRedis();
  redis = connectRedis(server.url);
  workerRedis = connectRedis(server.url);
  storeDir = mkdtempSync(join(tmpdir(), 'csa2-encoder-processor-'));
  store = new FsObjectStore(storeDir, { durable: false });
  const queueName = `test-prefill-${randomUUID()}`;
  prefillQueue = new Queue(queueName, { connection: redis });
  decodeQueue = new Queue(`test-decode-${randomUUID()}`, { connection: redis });
  const processor = createEncodeProcessor({
    redis,
    engine: async () => engine,
    log: silentLogger,
    decodeQueue,
    store,
    progressIntervalMs: 0,
    cancelPollMs: 10,
  });
  worker = new Worker(queueName, processor, { connection: workerRedis, concurrency: 2 });
  await worker.waitUntilReady();
});

after(async () => {
  await worker?.close();
  await prefillQueue?.close();
  await decodeQueue?.close();
  workerRedis?.disconnect();
  redis?.disconnect();
  await server?.stop();
  rmSync(storeDir, { recursive: true, force: true });
});

/** A prompt job; a prefix longer than a payload may carry goes through the store, as the gateway sends it. */
async function promptJob(requestId: string, prefixTokens: number): Promise<PrefillJob> {
  const ids = Array.from({ length: prefixTokens }, (_, i) => i % 250);
  return {
    v: 1,
    kind: 'prompt',
    tenant: 'acme',
    requestId,
    model: 'tiny',
    ...(prefixTokens > MAX_INLINE_TOKEN_IDS ? { tokensRef: await putTokenList(store, 'acme', `req.${requestId}.prefill`, ids) } : { tokenIds: ids }),
    decode: {
      v: 1,
      requestId,
      tenant: 'acme',
      model: 'tiny',
      promptIds: [7],
      documentId: promptDocumentId(requestId),
      sampling: { temperature: 0, topP: 1, seed: 1 },
      maxTokens: 4,
      stop: [],
      ignoreEos: false,
      replayTokens: null,
      acceptedAtMs: Date.now(),
    },
    acceptedAtMs: Date.now(),
  };
}

async function cancelledEnd(requestId: string): Promise<void> {
  const entries = await readStreamEntries(redis, requestId);
  assert.equal(entries.length, 1, JSON.stringify(entries));
  assert.ok(entries[0]?.entry.kind === 'final' && entries[0].entry.finishReason === 'cancelled', JSON.stringify(entries));
}

test('a request cancelled during its prefill stops the encoder between two chunks: no manifest, no decode job, a cancelled end', async () => {
  const requestId = `cut-${randomUUID()}`;
  const tokens = 40 * STEP_TOKENS;
  const job0 = await promptJob(requestId, tokens);
  await prefillQueue.add(PREFILL_JOB_NAME, job0, { ...DEFAULT_PREFILL_JOB_OPTIONS, jobId: requestId });
  // the client goes away once the encoder is a few chunks in
  const deadline = Date.now() + 20_000;
  while ((runs.get(promptDocumentId(requestId))?.steps ?? 0) < 3) {
    if (Date.now() > deadline) throw new Error(`the job did not start: ${(await prefillQueue.getJob(requestId))?.failedReason ?? 'still waiting'}`);
    await new Promise((r) => setTimeout(r, 5));
  }
  await redis.set(cancelKey(requestId), '1', 'EX', 60);
  const { state, job } = await waitForJobSettled(prefillQueue, requestId);
  assert.equal(state, 'completed', job.failedReason);
  const run = runs.get(promptDocumentId(requestId));
  assert.ok(run?.aborted === true, 'the engine was stopped');
  assert.ok((run?.steps ?? 0) < 40, `stopped after ${run?.steps} of 40 chunks`);
  assert.ok((job.progress as PrefillProgress).tokensDone < tokens);
  assert.equal((job.returnvalue as PrefillResult).tokens, 0);
  assert.equal(await store.head(manifestObjectKey('acme', promptDocumentId(requestId))), null, 'no prompt artifact is left');
  assert.equal(await decodeQueue.getJob(requestDecodeJobId(requestId)), undefined, 'nothing to decode');
  await cancelledEnd(requestId);
  assert.ok(job0.kind === 'prompt' && job0.tokensRef !== undefined);
  assert.equal(await store.head(job0.tokensRef.key), null, 'its stored input token list is deleted once the job is done');
});

test('a request cancelled just as its prefill finished: the prompt artifact is removed and no decode job is added', async () => {
  const requestId = `late-${randomUUID()}`;
  // the cancel lands after the engine's last check between chunks, as it writes the manifest
  atEnd.set(promptDocumentId(requestId), async () => {
    await redis.set(cancelKey(requestId), '1', 'EX', 60);
  });
  await prefillQueue.add(PREFILL_JOB_NAME, await promptJob(requestId, 2 * STEP_TOKENS), { ...DEFAULT_PREFILL_JOB_OPTIONS, jobId: requestId });
  const { state, job } = await waitForJobSettled(prefillQueue, requestId);
  assert.equal(state, 'completed', job.failedReason);
  assert.equal(runs.get(promptDocumentId(requestId))?.aborted, false);
  assert.equal(await store.head(manifestObjectKey('acme', promptDocumentId(requestId))), null, 'the manifest it wrote is gone');
  assert.equal(await decodeQueue.getJob(requestDecodeJobId(requestId)), undefined);
  await cancelledEnd(requestId);
});

test('a request that is not cancelled gets its decode job and keeps its artifact', async () => {
  const requestId = `kept-${randomUUID()}`;
  await prefillQueue.add(PREFILL_JOB_NAME, await promptJob(requestId, 2 * STEP_TOKENS), { ...DEFAULT_PREFILL_JOB_OPTIONS, jobId: requestId });
  const { state, job } = await waitForJobSettled(prefillQueue, requestId);
  assert.equal(state, 'completed', job.failedReason);
  assert.notEqual(await store.head(manifestObjectKey('acme', promptDocumentId(requestId))), null);
  assert.notEqual(await decodeQueue.getJob(requestDecodeJobId(requestId)), undefined);
  // before its tenant's documents in the engine, and without an encoder tail (its one question computes it)
  const req = runs.get(promptDocumentId(requestId))?.req;
  assert.equal(req?.priority, PROMPT_ENGINE_PRIORITY);
  assert.equal(req?.tailReplayTokens, 0);
});

test("a document is ingested after its tenant's prompts in the engine, with its encoder tail", async () => {
  const documentId = `doc-${randomUUID()}`;
  const job: PrefillJob = { v: 1, kind: 'document', tenant: 'acme', documentId, model: 'tiny', input: { tokenIds: [1, 2, 3, 4, 5] }, acceptedAtMs: Date.now() };
  await prefillQueue.add(PREFILL_JOB_NAME, job, { ...DEFAULT_PREFILL_JOB_OPTIONS, jobId: documentId });
  const { state, job: done } = await waitForJobSettled(prefillQueue, documentId);
  assert.equal(state, 'completed', done.failedReason);
  const req = runs.get(documentId)?.req;
  assert.equal(req?.priority, DOCUMENT_ENGINE_PRIORITY);
  assert.ok(DOCUMENT_ENGINE_PRIORITY > PROMPT_ENGINE_PRIORITY);
  assert.equal(req?.tailReplayTokens, undefined, "the engine's default: a stored tail");
});
