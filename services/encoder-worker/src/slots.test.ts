/**
 * The encoder's slot policy: the pure rule, and the reserved slots on a real BullMQ worker and a real
 * redis-server (the processor is a stand-in that holds each job until the test releases it, so what
 * runs when is exact).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Queue, Worker, connectRedis, startLocalRedis, type LocalRedis, type Redis } from '@csa2/jobs';
import { PrefillSlots, mayTakeReservedSlot, moveToHead, readSlotJob, slotJobOf, waitingJobIds, type SlotJob } from './slots.js';

const doc = (tenant: string): SlotJob => ({ kind: 'document', tenant, batch: false });
const prompt = (tenant: string, batch = false): SlotJob => ({ kind: 'prompt', tenant, batch });

test('the rule: base slots take anything; a reserved slot takes an interactive prompt, or a document of a tenant that runs none here', () => {
  const limits = { baseSlots: 2, reservedSlots: 2 };
  assert.equal(mayTakeReservedSlot(doc('a'), [doc('a')], limits), true, 'a base slot is free');
  const full = [doc('a'), doc('a')];
  assert.equal(mayTakeReservedSlot(doc('a'), full, limits), false, 'the flooding tenant waits for a base slot');
  assert.equal(mayTakeReservedSlot(prompt('a'), full, limits), true, 'its own prompt does not wait for its documents');
  assert.equal(mayTakeReservedSlot(doc('b'), full, limits), true, "another tenant's document does not wait for them");
  assert.equal(mayTakeReservedSlot(doc('b'), [...full, prompt('b')], limits), true, 'a running prompt of b does not count against its documents');
  assert.equal(mayTakeReservedSlot(doc('b'), [...full, doc('b')], limits), false, "one reserved slot per tenant's documents");
  assert.equal(mayTakeReservedSlot(prompt('a', true), full, limits), false, 'a batch line waits');
  assert.equal(mayTakeReservedSlot(prompt('c'), [...full, doc('b'), prompt('a')], limits), false, 'never past base + reserved');
  assert.equal(mayTakeReservedSlot(prompt('a'), full, { baseSlots: 2, reservedSlots: 0 }), false, 'no reserved slots');
});

test('slot fields are read from a payload, and anything else is not a slot job', () => {
  assert.deepEqual(slotJobOf({ kind: 'prompt', tenant: 't', batch: true, v: 1 }), prompt('t', true));
  assert.deepEqual(slotJobOf({ kind: 'document', tenant: 't' }), doc('t'));
  for (const bad of [null, 'x', 7, {}, { kind: 'decode', tenant: 't' }, { kind: 'prompt', tenant: '' }, { kind: 'prompt', tenant: 3 }])
    assert.equal(slotJobOf(bad), null, JSON.stringify(bad));
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
async function heldWorker(queueName: string, baseSlots: number, reservedSlots: number) {
  const started: string[] = [];
  const releases = new Map<string, () => void>();
  const slots = new PrefillSlots({ redis, queueName, reservedSlots, pollMs: 20, openTimeoutMs: 500 });
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

test("a prompt and a starved tenant's document start in reserved slots while documents hold the base slots; the flood does not", async () => {
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

test('waiting jobs in the order BullMQ hands them out (wait list first, then the lowest priority); a job moved to the head is next', async () => {
  const queueName = `order-${Date.now()}`;
  const queue = new Queue(queueName, { connection: redis });
  try {
    assert.deepEqual(await waitingJobIds(redis, queueName, 8), [], 'nothing waits');
    await queue.add('p', { kind: 'document', tenant: 'a' }, { jobId: 'late', priority: 9 });
    await queue.add('p', { kind: 'prompt', tenant: 'b' }, { jobId: 'early', priority: 2 });
    await queue.add('p', { kind: 'document', tenant: 'c' }, { jobId: 'plain' }); // no priority: the wait list
    await queue.add('p', { whatever: true }, { jobId: 'odd' });
    assert.deepEqual(await waitingJobIds(redis, queueName, 8), ['plain', 'odd', 'early', 'late']);
    assert.deepEqual(await waitingJobIds(redis, queueName, 3), ['plain', 'odd', 'early']);
    assert.deepEqual(await readSlotJob(redis, queueName, 'early'), prompt('b'));
    assert.equal(await readSlotJob(redis, queueName, 'odd'), null, "an unreadable payload is nobody's");
    assert.equal(await readSlotJob(redis, queueName, 'gone'), null);
    assert.equal(await moveToHead(redis, queueName, 'late'), true);
    assert.deepEqual(await waitingJobIds(redis, queueName, 8), ['late', 'plain', 'odd', 'early']);
    assert.equal(await moveToHead(redis, queueName, 'odd'), true, 'from inside the wait list too');
    assert.deepEqual(await waitingJobIds(redis, queueName, 8), ['odd', 'late', 'plain', 'early']);
    assert.equal(await moveToHead(redis, queueName, 'gone'), false);
    const connection = connectRedis(server.url);
    const worker = new Worker(queueName, async (job) => job.id, { connection, concurrency: 1 });
    const first = await new Promise<string>((resolve) => worker.once('completed', (job) => resolve(job.id as string)));
    await worker.close();
    await connection.quit();
    assert.equal(first, 'odd', 'BullMQ hands out the job at the head first');
  } finally {
    await queue.obliterate({ force: true });
    await queue.close();
  }
});

test('a prompt behind documents that may not take a reserved slot (here, as a dead worker leaves them: at the head of the wait list) is moved to the head and gets one', async () => {
  const queueName = `stalled-${Date.now()}`;
  const queue = new Queue(queueName, { connection: redis });
  const w = await heldWorker(queueName, 1, 1);
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
    await queue.add('prefill', { kind: 'document', tenant: 'a' }, { jobId: 'a3', priority: 1 }); // an earlier start tag than the prompt's
    assert.deepEqual(await waitingJobIds(redis, queueName, 8), ['a2', 'pa', 'a3']);
    await w.waitStarted('pa');
    await new Promise((r) => setTimeout(r, 200));
    assert.deepEqual(w.started, ['a1', 'pa'], 'the documents wait for a base slot');
    assert.deepEqual(await waitingJobIds(redis, queueName, 8), ['a2', 'a3'], 'in their order');
  } finally {
    await w.close();
    await queue.obliterate({ force: true });
    await queue.close();
  }
});
