/** Fair shares over real BullMQ priorities on a real redis-server: a flood does not starve a newcomer; weights give shares. */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Queue, Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import { fairPriority, fairStateKey } from './fair-priority.js';
import { connectRedis, startLocalRedis, type LocalRedis } from './redis.js';

let server: LocalRedis;
let redis: Redis;

before(async () => {
  server = await startLocalRedis();
  redis = connectRedis(server.url);
});
after(async () => {
  redis?.disconnect();
  await server?.stop();
});

/** Adds the jobs (tenant, cost) in order with fair priorities, then lets one worker run them all; returns the tenants in service order. */
async function serveInOrder(
  queueName: string,
  jobs: readonly { tenant: string; cost: number; weight?: number }[],
  addWhileRunning: readonly { afterServed: number; tenant: string; cost: number }[] = [],
): Promise<string[]> {
  const queue = new Queue(queueName, { connection: redis });
  const add = async (j: { tenant: string; cost: number; weight?: number }) =>
    queue.add(
      'j',
      { tenant: j.tenant },
      {
        priority: await fairPriority(redis, queueName, { tenant: j.tenant, costTokens: j.cost, ...(j.weight !== undefined ? { weight: j.weight } : {}) }),
        removeOnComplete: true,
      },
    );
  for (const j of jobs) await add(j);
  const served: string[] = [];
  const total = jobs.length + addWhileRunning.length;
  const connection = connectRedis(server.url);
  const done = new Promise<void>((resolve) => {
    const worker = new Worker(
      queueName,
      async (job) => {
        served.push((job.data as { tenant: string }).tenant);
        for (const late of addWhileRunning) if (late.afterServed === served.length) await add(late);
        if (served.length === total) setImmediate(() => void worker.close().then(() => resolve()));
      },
      { connection, concurrency: 1 },
    );
  });
  await done;
  connection.disconnect();
  await queue.close();
  return served;
}

test("a tenant that arrives behind another tenant's flood is served next, not after the flood", async () => {
  const flood = Array.from({ length: 60 }, () => ({ tenant: 'acme', cost: 1600 }));
  const served = await serveInOrder(`fair-${randomUUID()}`, flood, [{ afterServed: 5, tenant: 'other', cost: 2100 }]);
  const at = served.indexOf('other');
  assert.ok(at >= 5 && at <= 7, `served as job ${at + 1} of ${served.length}`);
});

test('equal tenants alternate; weights give proportional shares', async () => {
  // a's 30 jobs are queued first, then b's 30: they are served alternately
  const served = await serveInOrder(`fair-${randomUUID()}`, [
    ...Array.from({ length: 30 }, () => ({ tenant: 'a', cost: 512 })),
    ...Array.from({ length: 30 }, () => ({ tenant: 'b', cost: 512 })),
  ]);
  const firstTwenty = served.slice(0, 20);
  const a = firstTwenty.filter((t) => t === 'a').length;
  assert.ok(a >= 9 && a <= 11, `equal weights: a got ${a} of the first 20 (${firstTwenty.join('')})`);

  const weighted = [
    ...Array.from({ length: 40 }, () => ({ tenant: 'heavy', cost: 512, weight: 3 })),
    ...Array.from({ length: 40 }, () => ({ tenant: 'light', cost: 512, weight: 1 })),
  ];
  const order = await serveInOrder(`fair-${randomUUID()}`, weighted);
  const heavy = order.slice(0, 40).filter((t) => t === 'heavy').length;
  assert.ok(heavy >= 28 && heavy <= 32, `weight 3 vs 1: heavy got ${heavy} of the first 40`);
});

test('once the queue is empty the tags start again from 0', async () => {
  const queueName = `fair-${randomUUID()}`;
  await serveInOrder(
    queueName,
    Array.from({ length: 10 }, () => ({ tenant: 'acme', cost: 4096 })),
  );
  assert.equal(await fairPriority(redis, queueName, { tenant: 'acme', costTokens: 4096 }), 1, 'an empty queue: priority 1 again');
  const state = await redis.hgetall(fairStateKey(queueName));
  assert.equal(state['v'], '0');
});
