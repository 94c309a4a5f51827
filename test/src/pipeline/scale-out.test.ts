/**
 * Scale-out: one, then three decoder-worker processes against one Redis and one store drain a fixed
 * backlog of decode jobs. Every job completes exactly once (completed on its first and only attempt), every
 * stream holds indexes 0..n-1 and one final entry, and the speedup is printed. On this 2-core machine
 * the workers compete for the same cores, so the speedup is bounded by the cores, not by the queue.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  DECODE_QUEUE,
  DEFAULT_DECODE_JOB_OPTIONS,
  DECODE_JOB_NAME,
  Queue,
  connectRedis,
  readStreamState,
  requestDecodeJobId,
  type DecodeJob,
} from '@csa2/jobs';
import { Pipeline } from '../harness/pipeline.js';

const JOBS = 24;
const MAX_TOKENS = 24;
let pipe: Pipeline | undefined;

after(async () => {
  await pipe?.stop();
});

function decodeJob(requestId: string, i: number): DecodeJob {
  return {
    v: 1,
    requestId,
    tenant: 'acme',
    model: 'tiny',
    promptIds: Array.from({ length: 12 }, (_, k) => (i * 17 + k * 5) % 250),
    documentId: null,
    sampling: { temperature: 0.5, topP: 1, seed: i },
    maxTokens: MAX_TOKENS,
    stop: [],
    ignoreEos: true,
    replayTokens: null,
    acceptedAtMs: Date.now(),
  };
}

/** Starts `workers` decoder processes, enqueues the backlog, waits until all jobs completed; returns the drain time. */
async function drain(p: Pipeline, batch: string, workers: number, t: { diagnostic(msg: string): void }): Promise<number> {
  const redis = connectRedis(p.redis.url);
  const queue = new Queue(DECODE_QUEUE, { connection: redis });
  try {
    const ids = Array.from({ length: JOBS }, (_, i) => `${batch}-${i}`);
    await Promise.all(Array.from({ length: workers }, () => p.startService('decoder')));
    const t0 = performance.now();
    await queue.addBulk(
      ids.map((id, i) => ({ name: DECODE_JOB_NAME, data: decodeJob(id, i), opts: { ...DEFAULT_DECODE_JOB_OPTIONS, jobId: requestDecodeJobId(id) } })),
    );
    const deadline = Date.now() + 300_000;
    for (;;) {
      const states = await Promise.all(ids.map((id) => queue.getJobState(requestDecodeJobId(id))));
      assert.ok(!states.includes('failed'), `a job failed: ${states.join(',')}`);
      if (states.every((st) => st === 'completed')) break;
      assert.ok(Date.now() < deadline, 'backlog drained within 5 minutes');
      await new Promise((r) => setTimeout(r, 50));
    }
    const ms = performance.now() - t0;
    for (const id of ids) {
      const job = await queue.getJob(requestDecodeJobId(id));
      assert.equal(job?.attemptsMade, 1, `${id}: completed on its first and only attempt`);
      const s = await readStreamState(redis, id);
      assert.equal(s.tokenIds.length, MAX_TOKENS, `${id}: all tokens, each once`);
      assert.equal(s.end?.kind, 'final');
    }
    t.diagnostic(`${workers} decoder worker(s): ${JOBS} jobs x ${MAX_TOKENS} tokens drained in ${(ms / 1000).toFixed(1)} s`);
    return ms;
  } finally {
    await p.kill('decoder', 'SIGTERM');
    await queue.close();
    redis.disconnect();
  }
}

test('one, then three decoder workers drain the same backlog; every job completes exactly once', async (t) => {
  pipe = await Pipeline.start({ services: [] });
  const one = await drain(pipe, 'one', 1, t);
  const three = await drain(pipe, 'three', 3, t);
  t.diagnostic(`speedup 1 -> 3 workers: ${(one / three).toFixed(2)}x (this machine has 2 cores)`);
  assert.ok(one > 0 && three > 0);
});
