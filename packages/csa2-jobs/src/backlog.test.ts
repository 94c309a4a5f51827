/**
 * The backlog metrics on a real redis-server with real BullMQ queues: waiting, prioritized, delayed
 * (by option and by a retry's backoff) jobs count; active, completed and failed ones do not; prefill
 * tokens add up exactly; the Prometheus text says the same.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Queue, Worker, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import { connectRedis, startLocalRedis, type LocalRedis } from './redis.js';
import { BACKLOG_METRIC_NAMES, collectBacklog, createBacklogCollector, estimatePrefillTokens, renderBacklogMetrics, type Backlog } from './backlog.js';

let server: LocalRedis;
let redis: Redis;
const closers: (() => Promise<unknown>)[] = [];
before(async () => {
  server = await startLocalRedis();
  redis = connectRedis(server.url);
});
after(async () => {
  for (const close of closers.reverse()) await close();
  await redis?.quit();
  await server?.stop();
});

function queuesForTest(): { prefill: Queue; decode: Queue; worker: (q: Queue) => Worker; names: { prefillQueue: string; decodeQueue: string } } {
  const id = randomUUID();
  const names = { prefillQueue: `test-prefill-${id}`, decodeQueue: `test-decode-${id}` };
  const connection = { host: '127.0.0.1', port: server.port, maxRetriesPerRequest: null };
  const prefill = new Queue(names.prefillQueue, { connection });
  const decode = new Queue(names.decodeQueue, { connection });
  closers.push(
    () => prefill.close(),
    () => decode.close(),
  );
  const worker = (q: Queue): Worker => {
    // no processor: jobs are taken by hand (getNextJob) so the test decides what is active
    const w = new Worker(q.name, null, { connection, autorun: false });
    closers.push(() => w.close(true));
    return w;
  };
  return { prefill, decode, worker, names };
}

async function take(worker: Worker, token: string): Promise<Job> {
  const job = (await worker.getNextJob(token, { block: false })) as Job | undefined;
  assert.ok(job !== undefined, 'a job to take');
  return job;
}

const ids = (n: number): number[] => Array.from({ length: n }, (_, i) => i + 1);
const doc = (tokenIds: number[]) => ({
  v: 1,
  kind: 'document',
  tenant: 't',
  documentId: `d${tokenIds.length}`,
  model: 'm',
  input: { tokenIds },
  acceptedAtMs: 0,
});
const docText = (text: string) => ({ v: 1, kind: 'document', tenant: 't', documentId: 'dt', model: 'm', input: { text }, acceptedAtMs: 0 });
const prompt = (tokenIds: number[], promptIds: number[]) => ({
  v: 1,
  kind: 'prompt',
  tenant: 't',
  requestId: `r${tokenIds.length}`,
  model: 'm',
  tokenIds,
  decode: { promptIds },
  acceptedAtMs: 0,
});

test('estimatePrefillTokens: token ids exactly, text as UTF-8 bytes + 1, prompts by the encoded prefix only', () => {
  assert.equal(estimatePrefillTokens(doc(ids(7))), 7);
  // h é l l o ␠ w ö r l d ␠ ✓ 🙂 = 1+2+1+1+1+1+1+2+1+1+1+1+3+4 = 21 bytes
  assert.equal(estimatePrefillTokens(docText('héllo wörld ✓🙂')), 22);
  assert.equal(estimatePrefillTokens(docText('')), 1);
  assert.equal(estimatePrefillTokens(prompt(ids(5), ids(100))), 5);
  assert.equal(estimatePrefillTokens({ kind: 'document', input: {} }), null);
  assert.equal(estimatePrefillTokens({ hello: 'world' }), null);
  assert.equal(estimatePrefillTokens(null), null);
});

test('the backlog counts waiting, prioritized and delayed jobs (retries included) and their prefill tokens; active and finished ones are not backlog', async () => {
  const { prefill, decode, worker, names } = queuesForTest();
  const prefillWorker = worker(prefill);
  const decodeWorker = worker(decode);

  // prefill: one job completed, one running halfway, then the backlog
  await prefill.add('prefill', doc(ids(1000)));
  const done = await take(prefillWorker, 'tok-p1');
  await done.moveToCompleted({ ok: true }, 'tok-p1', false);
  await prefill.add('prefill', doc(ids(40)));
  const running = await take(prefillWorker, 'tok-p2');
  await running.updateProgress({ tokensDone: 10, tokensTotal: 40 });

  await prefill.add('prefill', doc(ids(100))); // wait
  await prefill.add('prefill', docText('héllo wörld ✓🙂')); // wait: 21 bytes + 1
  await prefill.add('prefill', prompt(ids(50), ids(9))); // wait: the 9 prompt ids are the decoder's
  await prefill.add('prefill', doc(ids(30)), { priority: 5 }); // prioritized
  await prefill.add('prefill', prompt(ids(20), ids(3)), { delay: 60_000 }); // delayed
  await prefill.add('prefill', { hello: 'not a prefill job' }); // wait, unrecognized: a job, 0 tokens

  // decode: one completed, one failed for good, one retrying (delayed by its backoff), one running
  await decode.add('decode', { n: 0 });
  await (await take(decodeWorker, 'tok-d1')).moveToCompleted('ok', 'tok-d1', false);
  await decode.add('decode', { n: 1 }, { attempts: 1 });
  await (await take(decodeWorker, 'tok-d2')).moveToFailed(new Error('deterministic'), 'tok-d2', false);
  await decode.add('decode', { n: 2 }, { attempts: 3, backoff: { type: 'fixed', delay: 60_000 } });
  await (await take(decodeWorker, 'tok-d3')).moveToFailed(new Error('transient'), 'tok-d3', false);
  await decode.add('decode', { n: 3 });
  await take(decodeWorker, 'tok-d4');
  await decode.add('decode', { n: 4 }); // wait
  await decode.add('decode', { n: 5 }); // wait
  await decode.add('decode', { n: 6 }, { priority: 2 }); // prioritized
  await decode.add('decode', { n: 7 }, { priority: 9 }); // prioritized
  await decode.add('decode', { n: 8 }, { delay: 30_000 }); // delayed

  // what BullMQ itself says, to pin the seeded states
  assert.deepEqual(await decode.getJobCounts('wait', 'prioritized', 'delayed', 'active', 'completed', 'failed'), {
    wait: 2,
    prioritized: 2,
    delayed: 2,
    active: 1,
    completed: 1,
    failed: 1,
  });

  const backlog = await collectBacklog(redis, names);
  assert.deepEqual(backlog.prefill, {
    queue: 'prefill',
    queueName: names.prefillQueue,
    waitJobs: 4,
    prioritizedJobs: 1,
    delayedJobs: 1,
    backlogJobs: 6,
    activeJobs: 1,
    paused: false,
    backlogTokens: 100 + 22 + 50 + 30 + 20,
    activeTokens: 40 - 10,
    unrecognizedJobs: 1,
  });
  assert.deepEqual(backlog.decode, {
    queue: 'decode',
    queueName: names.decodeQueue,
    waitJobs: 2,
    prioritizedJobs: 2,
    delayedJobs: 2,
    backlogJobs: 6,
    activeJobs: 1,
    paused: false,
  });
  // KEDA's redis-list trigger would have seen only the wait list
  assert.equal(await redis.llen(`bull:${names.decodeQueue}:wait`), 2);

  const text = renderBacklogMetrics(backlog);
  for (const line of [
    'csa2_queue_backlog_jobs{queue="prefill"} 6',
    'csa2_queue_backlog_jobs{queue="decode"} 6',
    'csa2_queue_backlog_jobs_by_state{queue="decode",state="prioritized"} 2',
    'csa2_queue_backlog_jobs_by_state{queue="decode",state="delayed"} 2',
    'csa2_queue_active_jobs{queue="decode"} 1',
    'csa2_queue_paused{queue="prefill"} 0',
    'csa2_prefill_backlog_tokens 222',
    'csa2_prefill_active_tokens 30',
  ]) {
    assert.ok(text.split('\n').includes(line), `missing "${line}" in:\n${text}`);
  }
});

test('a collector re-reads a job whose id came back with a new payload, forgets finished ones, and reports a paused queue', async () => {
  const { prefill, decode, names } = queuesForTest();
  const collector = createBacklogCollector(redis, names);
  await prefill.add('prefill', doc(ids(10)), { jobId: 'doc.t.same' });
  await prefill.add('prefill', doc(ids(5)), { jobId: 'doc.t.other' });
  assert.equal((await collector.collect()).prefill.backlogTokens, 15);

  // the same job id, re-ingested with another document
  await (await prefill.getJob('doc.t.same'))?.remove();
  await new Promise((r) => setTimeout(r, 5)); // a new timestamp
  await prefill.add('prefill', doc(ids(70)), { jobId: 'doc.t.same' });
  await (await prefill.getJob('doc.t.other'))?.remove();
  let b = await collector.collect();
  assert.equal(b.prefill.backlogTokens, 70);
  assert.equal(b.prefill.backlogJobs, 1);

  await decode.add('decode', { n: 1 });
  await decode.pause();
  b = await collector.collect();
  assert.equal(b.decode.paused, true);
  assert.equal(b.decode.backlogJobs, 1, 'a paused queue keeps its jobs in wait, and they count');
  assert.ok(renderBacklogMetrics(b).includes('csa2_queue_paused{queue="decode"} 1\n'));
});

test('an empty pipeline reports zeros for every metric (absent keys are not errors)', async () => {
  const b = await collectBacklog(redis, { prefillQueue: `none-${randomUUID()}`, decodeQueue: `none-${randomUUID()}` });
  assert.equal(b.prefill.backlogJobs + b.prefill.activeJobs + b.prefill.backlogTokens + b.decode.backlogJobs + b.decode.activeJobs, 0);
});

test('renderBacklogMetrics writes valid exposition text: HELP and TYPE once per metric, one sample per queue', () => {
  const b: Backlog = {
    prefill: {
      queue: 'prefill',
      queueName: 'p',
      waitJobs: 1,
      prioritizedJobs: 2,
      delayedJobs: 3,
      backlogJobs: 6,
      activeJobs: 4,
      paused: false,
      backlogTokens: 123456,
      activeTokens: 7,
      unrecognizedJobs: 0,
    },
    decode: { queue: 'decode', queueName: 'd', waitJobs: 0, prioritizedJobs: 0, delayedJobs: 9, backlogJobs: 9, activeJobs: 0, paused: true },
    collectedAtMs: 0,
  };
  const lines = renderBacklogMetrics(b).trimEnd().split('\n');
  for (const name of Object.values(BACKLOG_METRIC_NAMES)) {
    assert.equal(lines.filter((l) => l === `# TYPE ${name} gauge`).length, 1, name);
    assert.equal(lines.filter((l) => l.startsWith(`# HELP ${name} `)).length, 1, name);
  }
  const samples = lines.filter((l) => !l.startsWith('#'));
  for (const s of samples) assert.match(s, /^[a-z_][a-z0-9_]*(\{[a-z]+="[a-z]+"(,[a-z]+="[a-z]+")*\})? \d+$/);
  assert.equal(samples.length, 2 + 6 + 2 + 2 + 1 + 1);
  assert.ok(samples.includes('csa2_queue_backlog_jobs{queue="decode"} 9'));
  assert.ok(samples.includes('csa2_queue_paused{queue="decode"} 1'));
  assert.ok(samples.includes('csa2_prefill_backlog_tokens 123456'));
});
