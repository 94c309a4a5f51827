/**
 * @module chunk-cache.test
 * chunk-cache: LRU order, the byte bound, counters, shared and failed loads.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ChunkCache } from './chunk-cache.js';

const bytes = (n: number, fill = 1): Uint8Array => new Uint8Array(n).fill(fill);

test('least recently used entries go first, and the byte bound always holds', () => {
  const cache = new ChunkCache({ maxBytes: 100 });
  assert.equal(cache.set('a', bytes(40)), true);
  cache.set('b', bytes(40));
  assert.equal(cache.get('a')?.length, 40); // a is now the most recent
  cache.set('c', bytes(40)); // 120 > 100: evict the least recent, b
  assert.equal(cache.has('a'), true);
  assert.equal(cache.has('b'), false);
  assert.equal(cache.has('c'), true);
  assert.equal(cache.stats.bytes, 80);
  cache.set('d', bytes(90)); // evicts a and c
  assert.deepEqual([cache.has('a'), cache.has('c'), cache.has('d')], [false, false, true]);
  assert.deepEqual(cache.stats, { hits: 1, misses: 0, evictions: 3, entries: 1, bytes: 90, maxBytes: 100 });
  assert.equal(cache.get('zzz'), undefined);
  assert.equal(cache.stats.misses, 1);
});

test('an object larger than maxBytes is not cached and evicts nothing; replacing a key updates the byte count', () => {
  const cache = new ChunkCache({ maxBytes: 50 });
  cache.set('a', bytes(30));
  assert.equal(cache.set('big', bytes(51)), false);
  assert.equal(cache.has('a'), true);
  assert.equal(cache.stats.evictions, 0);
  cache.set('a', bytes(10));
  assert.equal(cache.stats.bytes, 10);
  cache.delete('a');
  assert.deepEqual([cache.stats.bytes, cache.stats.entries], [0, 0]);
  assert.throws(() => new ChunkCache({ maxBytes: -1 }), RangeError);
});

test('getOrLoad: one load for concurrent callers, hits afterwards, failures cached nowhere', async () => {
  const cache = new ChunkCache({ maxBytes: 1000 });
  let loads = 0;
  const load = async (): Promise<Uint8Array> => {
    loads++;
    await new Promise((r) => setTimeout(r, 5));
    return bytes(10, 7);
  };
  const got = await Promise.all([cache.getOrLoad('k', load), cache.getOrLoad('k', load), cache.getOrLoad('k', load)]);
  assert.equal(loads, 1);
  for (const g of got) assert.equal(g[0], 7);
  await cache.getOrLoad('k', load);
  assert.equal(loads, 1);
  assert.deepEqual([cache.stats.hits, cache.stats.misses], [3, 1]);

  let failing = 0;
  const fail = async (): Promise<Uint8Array> => {
    failing++;
    await Promise.resolve();
    throw new Error('store down');
  };
  const results = await Promise.allSettled([cache.getOrLoad('x', fail), cache.getOrLoad('x', fail)]);
  assert.deepEqual(
    results.map((r) => r.status),
    ['rejected', 'rejected'],
  );
  assert.equal(failing, 1);
  assert.equal(cache.has('x'), false);
  await assert.rejects(cache.getOrLoad('x', fail), /store down/);
  assert.equal(failing, 2, 'a failed load is retried by the next caller');
});
