/**
 * The encoder's slot policy: the pure rule, and the reserved slots on a real BullMQ worker and a real
 * redis-server (the processor is a stand-in that holds each job until the test releases it, so what
 * runs when is exact).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Queue, Worker, connectRedis, startLocalRedis, type LocalRedis, type Redis } from '@csa2/jobs';
import { PrefillSlots, mayTakeReservedSlot, peekNextJob, slotJobOf, type SlotJob } from './slots.js';

const doc = (tenant: string): SlotJob => ({ kind: 'document', tenant, batch: false });
const prompt = (tenant: string, batch = false): SlotJob => ({ kind: 'prompt', tenant, batch });

test('the rule: base slots take anything; a reserved slot takes an interactive prompt, or a document of a tenant that runs none here', () => {
  const limits = { baseSlots: 2, reservedSlots: 2 };
  assert.equal(mayTakeReservedSlot(doc('a'), [doc('a')], limits), true, 'a base slot is free');
  const full = [doc('a'), doc('a')];
  assert.equal(mayTakeReservedSlot(doc('a'), full, limits), false, 'the flooding tenant waits for a base slot');
  assert.equal(mayTakeReservedSlot(prompt('a'), full, limits), true, 'its own prompt does not wait for its documents');
  assert.equal(mayTakeReservedSlot(doc('b'), full, limits), true, 'another tenant\'s document does not wait for them');
  assert.equal(mayTakeReservedSlot(doc('b'), [...full, prompt('b')], limits), true, 'a running prompt of b does not count against its documents');
  assert.equal(mayTakeReservedSlot(doc('b'), [...full, doc('b')], limits), false, 'one reserved slot per tenant\'s documents');
  assert.equal(mayTakeReservedSlot(prompt('a', true), full, limits), false, 'a batch line waits');
  assert.equal(mayTakeReservedSlot(prompt('c'), [...full, doc('b'), prompt('a')], limits), false, 'never past base + reserved');
  assert.equal(mayTakeReservedSlot(prompt('a'), full, { baseSlots: 2, reservedSlots: 0 }), false, 'no reserved slots');
});

test('slot fields are read from a payload, and anything else is not a slot job', () => {
  assert.deepEqual(slotJobOf({ kind: 'prompt', tenant: 't', batch: true, v: 1 }), prompt('t', true));
  assert.deepEqual(slotJobOf({ kind: 'document', tenant: 't' }), doc('t'));
  for (const bad of [null, 'x', 7, {}, { kind: 'decode', tenant: 't' }, { kind: 'prompt', tenant: '' }, { kind: 'prompt', tenant: 3 }]) assert.equal(slotJobOf(bad), null, JSON.stringify(bad));
});

let server: LocalRedis;
let redis: Redis;

before(async () => {
  server = await startLocalRedis();
  redis = connectRedis(server.url);
});
after(async () => {
  await redis?.quit();
  await server?.stop();
});

/** A BullMQ worker whose jobs run until the test releases them, with PrefillSlots attached. */
async function heldWorker(queueName: string, baseSlots: number, reservedSlots: number, queue?: Queue) {
  const started: string[] = [];
  const releases = new Map<string, () => void>();
  const slots = new PrefillSlots({ redis, queueName, reservedSlots, pollMs: 20, openTimeoutMs: 500, ...(queue !== undefined ? { queue } : {}) });
  const connection = connectRedis(server.url);
  const worker = new Worker(
    queueName,
    async (job) => {
      const id = job.id as string;
      const s = slotJobOf(job.data);
      if (s === null) throw new Error('not a slot job');
      slots.enter(id, s);
      started.push(id);
      try {
        await new Promise<void>((resolve) => releases.set(id, resolve));
      } finally {
        slots.leave(id);
      }
    },
    { connection, concurrency: baseSlots, lockDuration: 10_000, stalledInterval: 5000 },
  );
  await worker.waitUntilReady();
  slots.attach(worker);
  const waitStarted = async (id: string, timeoutMs = 5000): Promise<void> => {
    const deadline = Date.now() + timeoutMs;
    while (!started.includes(id)) {
      if (Date.now() > deadline) throw new Error(`${id} did not start within ${timeoutMs} ms (started: ${started.join(', ')})`);
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  const release = (id: string) => {
    const r = releases.get(id);
    assert.ok(r !== undefined, `${id} is running`);
    releases.delete(id);
    r();
  };
  const close = async () => {
    slots.close();
    for (const id of [...releases.keys()]) release(id);
    await worker.close();
    await connection.quit();
  };
  return { started, slots, worker, waitStarted, release, close };
}

test('a prompt and a starved tenant\'s document start in reserved slots while documents hold the base slots; the flood does not', async () => {
  const queueName = `slots-${Date.now()}`;
  const queue = new Queue(queueName, { connection: redis });
  const w = await heldWorker(queueName, 2, 2);
  try {
    const add = (id: string, data: unknown, priority: number) => queue.add('prefill', data, { jobId: id, priority });
    await add('a1', { kind: 'document', tenant: 'a' }, 1);
    await add('a2', { kind: 'document', tenant: 'a' }, 2);
    await add('a3', { kind: 'document', tenant: 'a' }, 3);
    await add('a4', { kind: 'document', tenant: 'a' }, 4);
    await w.waitStarted('a1');
    await w.waitStarted('a2');
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual(w.started, ['a1', 'a2'], 'a3, next in the queue, waits for a base slot');
    assert.equal(w.worker.concurrency, 2);

    // the prompt goes first in the queue (its flow's start tag) and takes a reserved slot
    await add('pa', { kind: 'prompt', tenant: 'a' }, 1);
    await w.waitStarted('pa');
    // another tenant's document likewise
    await add('b1', { kind: 'document', tenant: 'b' }, 1);
    await w.waitStarted('b1');
    assert.equal(w.started.length, 4);
    // both reserved slots taken: a second prompt waits
    await add('pb', { kind: 'prompt', tenant: 'b' }, 1);
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual(w.started, ['a1', 'a2', 'pa', 'b1'], 'no more than base + reserved at once');

    // the prompt ends: its reserved slot goes to the waiting prompt, not to a3
    w.release('pa');
    await w.waitStarted('pb');
    w.release('pb');
    w.release('b1');
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual(w.started, ['a1', 'a2', 'pa', 'b1', 'pb'], 'the flood gets no reserved slot when they free up');
    assert.equal(w.worker.concurrency, 2, 'back to the base slots');
    // a base slot frees: the flood goes on there
    w.release('a1');
    await w.waitStarted('a3');
    await new Promise((r) => setTimeout(r, 200));
    assert.ok(!w.started.includes('a4'), 'a4 waits: two documents in two base slots');
    assert.ok(w.slots.stats().reservedOpened >= 3, JSON.stringify(w.slots.stats()));
  } finally {
    await w.close();
    await queue.obliterate({ force: true });
    await queue.close();
  }
});

test('peekNextJob names the job BullMQ hands out next (wait list first, then the lowest priority)', async () => {
  const queueName = `peek-${Date.now()}`;
  const queue = new Queue(queueName, { connection: redis });
  try {
    assert.equal(await peekNextJob(redis, queueName), null, 'nothing waits');
    await queue.add('p', { kind: 'document', tenant: 'a' }, { jobId: 'late', priority: 9 });
    await queue.add('p', { kind: 'prompt', tenant: 'b' }, { jobId: 'early', priority: 2 });
    assert.deepEqual(await peekNextJob(redis, queueName), { id: 'early', job: prompt('b'), inWait: false });
    await queue.add('p', { kind: 'document', tenant: 'c' }, { jobId: 'plain' }); // no priority: the wait list
    assert.deepEqual(await peekNextJob(redis, queueName), { id: 'plain', job: doc('c'), inWait: true });
    await queue.add('p', { whatever: true }, { jobId: 'odd', lifo: true });
    assert.equal(await peekNextJob(redis, queueName), null, 'an unreadable payload is nobody\'s');
  } finally {
    await queue.obliterate({ force: true });
    await queue.close();
  }
});

test('jobs back from a dead worker (BullMQ puts them at the head of the wait list) are put back in priority order: a prompt behind a stalled document still gets a reserved slot', async () => {
  const queueName = `stalled-${Date.now()}`;
  const queue = new Queue(queueName, { connection: redis });
  const w = await heldWorker(queueName, 1, 1, queue);
  try {
    await queue.add('prefill', { kind: 'document', tenant: 'a' }, { jobId: 'a1', priority: 1 });
    await w.waitStarted('a1');
    // as moveStalledJobsToWait leaves them: a prompt and, at the popping end, a document of the flood
    await queue.add('prefill', { kind: 'prompt', tenant: 'a' }, { jobId: 'pa', priority: 3 });
    await queue.add('prefill', { kind: 'document', tenant: 'a' }, { jobId: 'a2', priority: 9 });
    const key = (k: string) => `bull:${queueName}:${k}`;
    for (const id of ['pa', 'a2']) {
      await redis.zrem(key('prioritized'), id);
      await redis.rpush(key('wait'), id);
    }
    assert.deepEqual((await peekNextJob(redis, queueName))?.id, 'a2');
    await w.waitStarted('pa');
    await new Promise((r) => setTimeout(r, 200));
    assert.deepEqual(w.started, ['a1', 'pa'], 'the document waits for a base slot');
    assert.equal(await redis.llen(key('wait')), 0);
    assert.equal(await redis.zscore(key('prioritized'), 'a2') !== null, true, 'a2 is among the prioritized jobs again');
  } finally {
    await w.close();
    await queue.obliterate({ force: true });
    await queue.close();
  }
});
