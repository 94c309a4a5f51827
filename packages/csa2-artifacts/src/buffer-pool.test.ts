/**
 * @module buffer-pool.test
 * buffer-pool: reuse of released buffers (smallest that fits), exact sizes, the idle bound, refusals.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BufferPool } from './buffer-pool.js';

test('a released buffer is handed out again, as a view of exactly the size asked for', () => {
  const pool = new BufferPool({ maxFree: 2 });
  const a = pool.acquire(1000);
  assert.equal(a.byteLength, 1000);
  pool.release(a);
  assert.equal(pool.idle, 1);
  const b = pool.acquire(600);
  assert.equal(b.buffer, a.buffer, 'reused');
  assert.equal(b.byteLength, 600);
  assert.equal(pool.idle, 0);
  const c = pool.acquire(600);
  assert.notEqual(c.buffer, a.buffer, 'a buffer held is never handed out twice');
  pool.release(b);
  const d = pool.acquire(1000);
  assert.equal(d.buffer, a.buffer, 'releasing a view gives back the whole buffer');
  assert.equal(d.byteLength, 1000);
});

test('the smallest idle buffer that fits is taken; too small ones stay; at most maxFree idle', () => {
  const pool = new BufferPool({ maxFree: 3 });
  const big = pool.acquire(4000);
  const mid = pool.acquire(2000);
  const tiny = pool.acquire(10);
  for (const b of [big, mid, tiny]) pool.release(b);
  assert.equal(pool.acquire(1500).buffer, mid.buffer);
  assert.equal(pool.acquire(3000).buffer, big.buffer);
  assert.notEqual(pool.acquire(3000).buffer, tiny.buffer);
  assert.equal(pool.idle, 1);
  pool.release(tiny);
  assert.equal(pool.idle, 1, 'releasing twice does not list it twice');
  const many = [pool.acquire(5), pool.acquire(5), pool.acquire(5), pool.acquire(5)];
  for (const b of many) pool.release(b);
  assert.equal(pool.idle, 3);
  assert.equal(new BufferPool({ maxFree: 0 }).acquire(3).byteLength, 3);
  assert.throws(() => pool.acquire(-1), RangeError);
  assert.throws(() => new BufferPool({ maxFree: -1 }), RangeError);
});
