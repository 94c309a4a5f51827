/** ByteBudget: first come first served within the capacity, an oversize body alone, waiters that leave; the small-body lane. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Hono } from 'hono';
import { ByteBudget, bodyBudget } from './body-budget.js';

test('bodies within the budget run together; the next waits until enough is released, in order', async () => {
  const budget = new ByteBudget(100);
  const a = await budget.acquire(60);
  const b = await budget.acquire(40);
  const order: string[] = [];
  const c = budget.acquire(50).then((r) => (order.push('c'), r));
  const d = budget.acquire(10).then((r) => (order.push('d'), r));
  await new Promise((r) => setTimeout(r, 10));
  assert.deepEqual(order, [], 'both wait: d queues behind c even though it would fit');
  assert.equal(budget.waiting, 2);
  a();
  a(); // twice: a no-op
  const releaseC = await c;
  const releaseD = await d;
  assert.deepEqual(order, ['c', 'd']);
  assert.equal(budget.usedBytes, 100);
  b();
  releaseC();
  releaseD();
  assert.equal(budget.usedBytes, 0);
});

test('a body larger than the budget runs alone; a waiter whose client left gives up its place', async () => {
  const budget = new ByteBudget(100);
  const big = await budget.acquire(500);
  assert.equal(budget.usedBytes, 500);
  const gone = new AbortController();
  const leaving = budget.acquire(10, gone.signal);
  const staying = budget.acquire(10);
  gone.abort();
  await assert.rejects(leaving);
  assert.equal(budget.waiting, 1);
  big();
  (await staying)();
  assert.equal(budget.usedBytes, 0);
});

test('a small body does not wait behind large ones: it takes the small lane while a large one waits its turn', async () => {
  const budget = new ByteBudget(100);
  const small = new ByteBudget(3 * 10);
  const app = new Hono();
  const held: (() => void)[] = [];
  app.use('*', bodyBudget({ budget, maxBodyBytes: 1000, small: { budget: small, maxBodyBytes: 10 } }));
  app.post('/hold', async (c) => {
    await new Promise<void>((r) => held.push(r));
    return c.text('held');
  });
  app.post('/quick', (c) => c.text('quick'));
  const post = async (path: string, body: string, headers: Record<string, string> = {}): Promise<Response> =>
    app.request(path, { method: 'POST', body, headers: { 'content-length': String(Buffer.byteLength(body)), ...headers } });
  // one large body holds the whole budget; a second one waits
  const first = post('/hold', 'x'.repeat(100));
  await new Promise((r) => setTimeout(r, 10));
  assert.equal(budget.usedBytes, 100);
  let secondDone = false;
  const second = post('/quick', 'y'.repeat(60)).then((r) => ((secondDone = true), r));
  await new Promise((r) => setTimeout(r, 10));
  assert.equal(budget.waiting, 1);
  // the small one goes through at once, in its own lane
  const quick = await post('/quick', 'hi');
  assert.equal(await quick.text(), 'quick');
  assert.equal(small.usedBytes, 0, 'released');
  assert.equal(secondDone, false, 'the large one still waits');
  held.shift()?.();
  assert.equal(await (await first).text(), 'held');
  assert.equal(await (await second).text(), 'quick');
  assert.equal(budget.usedBytes, 0);
});
