/** ByteBudget: first come first served within the capacity, an oversize body alone, waiters that leave. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ByteBudget } from './body-budget.js';

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
