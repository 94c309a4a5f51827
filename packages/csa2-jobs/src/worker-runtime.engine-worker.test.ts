/**
 * startEngineWorker on a real Redis with a stand-in engine: the HTTP server (liveness during the
 * engine load, readiness = engine loaded + Redis answering + taking jobs, /metrics by outcome), and
 * the log context that puts a job's reqId/requestId/jobId on every line logged for it.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Queue, UnrecoverableError } from 'bullmq';
import type { Redis } from 'ioredis';
import { jsonLogger } from './log-line.js';
import { waitForJobSettled } from './testing/queue-support.js';
import { connectRedis, freePort, startLocalRedis, type LocalRedis } from './redis.js';
import { startEngineWorker, type EngineWorker } from './worker-runtime.js';

class StandInEngine {
  alive = true;
  async close(): Promise<void> {
    this.alive = false;
  }
}

let server: LocalRedis;
let redis: Redis;
let queue: Queue;
let worker: EngineWorker<StandInEngine, string>;
let engine: StandInEngine;
let port: number;
const lines: Record<string, unknown>[] = [];
const queueName = `test-${randomUUID()}`;
const releaseEngine: { resolve: () => void } = { resolve: () => undefined };

/** The value of the series `name` whose labels include `labels` (any order), or undefined. */
function sample(text: string, name: string, labels: Readonly<Record<string, string>>): number | undefined {
  for (const line of text.split('\n')) {
    const m = /^([a-z_0-9]+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (m === null || m[1] !== name) continue;
    const have = new Map([...(m[2] ?? '').matchAll(/([a-z_]+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => have.get(k) === v)) return Number(m[3]);
  }
  return undefined;
}

const get = async (path: string) => {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, { signal: AbortSignal.timeout(10_000) });
  return { status: res.status, text: await res.text(), type: res.headers.get('content-type') ?? '' };
};

before(async () => {
  server = await startLocalRedis();
  redis = connectRedis(server.url);
  queue = new Queue(queueName, { connection: redis });
  port = await freePort();
  const loaded = new Promise<void>((resolve) => (releaseEngine.resolve = resolve));
  const starting = startEngineWorker<StandInEngine, string>({
    name: 'test worker',
    service: 'test-worker',
    queue: queueName,
    config: {
      redisUrl: server.url,
      modelDir: '/models/x',
      concurrency: 2,
      lockDurationMs: 30_000,
      lockRenewMs: 15_000,
      stalledIntervalMs: 30_000,
      shutdownGraceMs: 2000,
      httpHost: '127.0.0.1',
      httpPort: port,
      readyTimeoutMs: 300,
    },
    log: jsonLogger('test-worker', 'debug', { write: (s: string) => lines.push(JSON.parse(s) as Record<string, unknown>) }),
    startEngine: async () => {
      await loaded;
      engine = new StandInEngine();
      return engine;
    },
    setup: ({ log }) => ({
      processor: async (job) => {
        const data = job.data as { fail?: boolean };
        log('info', 'working');
        await new Promise<void>((resolve) =>
          setTimeout(() => {
            log('info', 'from a timer the job started');
            resolve();
          }, 10),
        );
        if (data.fail === true) throw new UnrecoverableError('[input-invalid] no');
        return 'done';
      },
    }),
  });
  // while the engine loads: alive, not ready
  let health = await get('/healthz').catch(() => null);
  for (let i = 0; health === null && i < 100; i++) {
    await new Promise((r) => setTimeout(r, 20));
    health = await get('/healthz').catch(() => null);
  }
  assert.equal(health?.status, 200);
  const loading = await get('/readyz');
  assert.equal(loading.status, 503);
  assert.equal((JSON.parse(loading.text) as { checks: { engine: string } }).checks.engine, 'starting');
  releaseEngine.resolve();
  worker = await starting;
});

after(async () => {
  await worker?.close();
  await queue?.close();
  redis?.disconnect();
  await server?.stop();
});

test('liveness, readiness and metrics on CSA2_WORKER_HTTP_PORT', async () => {
  assert.equal(worker.http.port, port);
  assert.deepEqual(await get('/healthz'), { status: 200, text: '{"status":"ok"}', type: 'application/json; charset=utf-8' });
  const ready = await get('/readyz');
  assert.equal(ready.status, 200, ready.text);
  assert.deepEqual(JSON.parse(ready.text), { status: 'ready', checks: { engine: 'ok', redis: 'ok', worker: 'ok' } });
  const metrics = await get('/metrics');
  assert.match(metrics.type, /^text\/plain/);
  assert.equal(sample(metrics.text, 'csa2_worker_engine_starts', { service: 'test-worker' }), 1);
  assert.ok((sample(metrics.text, 'csa2_worker_process_cpu_seconds_total', { service: 'test-worker' }) ?? -1) >= 0);
  assert.equal((await get('/nothing')).status, 404);
});

test('every line logged for a job carries its reqId, requestId and jobId; metrics count it by outcome', async () => {
  await queue.add('x', { reqId: 'trace-abc.1', requestId: 'cmpl-1', v: 1 }, { jobId: 'job-ok' });
  await queue.add('x', { reqId: 'trace-abc.2', requestId: 'cmpl-2', fail: true }, { jobId: 'job-bad' });
  await queue.add('x', { reqId: 'not a valid id!', requestId: 'cmpl-3' }, { jobId: 'job-odd' });
  assert.equal((await waitForJobSettled(queue, 'job-ok')).state, 'completed');
  assert.equal((await waitForJobSettled(queue, 'job-bad')).state, 'failed');
  assert.equal((await waitForJobSettled(queue, 'job-odd')).state, 'completed');
  const of = (jobId: string) => lines.filter((l) => l['jobId'] === jobId && l['msg'] !== 'job failed');
  for (const [jobId, reqId, requestId] of [
    ['job-ok', 'trace-abc.1', 'cmpl-1'],
    ['job-bad', 'trace-abc.2', 'cmpl-2'],
  ] as const) {
    const mine = of(jobId);
    assert.deepEqual(
      mine.map((l) => l['msg']),
      ['working', 'from a timer the job started'],
    );
    for (const l of mine) {
      assert.equal(l['reqId'], reqId);
      assert.equal(l['requestId'], requestId);
      assert.equal(l['service'], 'test-worker');
      assert.equal(l['level'], 'info');
      assert.match(String(l['time']), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    }
  }
  assert.equal(of('job-odd')[0]?.['reqId'], undefined, 'a malformed reqId is not logged');
  assert.equal(lines.find((l) => l['msg'] === 'test worker started')?.['reqId'], undefined, 'lines outside a job carry none');
  const failed = lines.find((l) => l['msg'] === 'job failed');
  assert.equal(failed?.['reqId'], 'trace-abc.2', "BullMQ's failed event is logged with the job's fields too");
  const metrics = (await get('/metrics')).text;
  const labels = { queue: queueName, service: 'test-worker' };
  assert.equal(sample(metrics, 'csa2_worker_jobs_total', { ...labels, outcome: 'completed' }), 2);
  assert.equal(sample(metrics, 'csa2_worker_jobs_total', { ...labels, outcome: 'failed' }), 1);
  assert.equal(sample(metrics, 'csa2_worker_job_duration_seconds_count', { ...labels, outcome: 'completed' }), 2);
  assert.equal(sample(metrics, 'csa2_worker_active_jobs', labels), 0);
});

test('readiness follows Redis and the engine: 503 naming what is wrong, 200 again once it is back', async () => {
  const pauser = connectRedis(server.url);
  try {
    await pauser.call('CLIENT', 'PAUSE', '1500', 'ALL');
    const paused = await get('/readyz');
    assert.equal(paused.status, 503);
    assert.match((JSON.parse(paused.text) as { checks: { redis: string } }).checks.redis, /^unavailable: no answer within 300 ms$/);
    assert.equal((await get('/healthz')).status, 200, 'still alive');
  } finally {
    await pauser.call('CLIENT', 'UNPAUSE').catch(() => undefined);
    pauser.disconnect();
  }
  assert.equal((await get('/readyz')).status, 200);
  engine.alive = false; // the engine thread died: not ready until a job restarts it
  const dead = await get('/readyz');
  assert.equal(dead.status, 503);
  assert.equal((JSON.parse(dead.text) as { checks: { engine: string } }).checks.engine, 'starting');
  await worker.engine();
  assert.equal((await get('/readyz')).status, 200);
  assert.equal(sample((await get('/metrics')).text, 'csa2_worker_engine_starts', { service: 'test-worker' }), 2);
});

test('a port that is taken fails start with an error naming CSA2_WORKER_HTTP_PORT', async () => {
  await assert.rejects(
    startEngineWorker({
      name: 'second worker',
      queue: `test-${randomUUID()}`,
      config: {
        redisUrl: server.url,
        modelDir: '/m',
        concurrency: 1,
        lockDurationMs: 30_000,
        lockRenewMs: 15_000,
        stalledIntervalMs: 30_000,
        shutdownGraceMs: 100,
        httpHost: '127.0.0.1',
        httpPort: port,
        readyTimeoutMs: 300,
      },
      log: () => undefined,
      startEngine: async () => new StandInEngine(),
      setup: () => ({ processor: async () => 'x' }),
    }),
    /cannot serve \/healthz, \/readyz and \/metrics on 127\.0\.0\.1:\d+ .*set CSA2_WORKER_HTTP_PORT/,
  );
});
