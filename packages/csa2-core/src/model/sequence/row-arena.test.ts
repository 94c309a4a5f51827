/**
 * RowArena hands out aligned, zeroed regions first fit and joins what it takes back; a PackedRowStore
 * on an arena takes its buffers from it, gives back what it replaces, and on release gives back its
 * own regions only (a fork's shared prefix is its parent's).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PackedRowStore } from './packed-rows.js';
import { MIN_REGION_BYTES, RowArena } from './row-arena.js';

const K = MIN_REGION_BYTES;

test('RowArena: first fit, 64-byte aligned, zeroed when handed out again, joined when taken back', () => {
  const arena = new RowArena(10 * K + 100);
  assert.equal(arena.capacityBytes, 10 * K + 64, 'capacity rounded down to the alignment');
  assert.equal(arena.take(K - 1), null, 'below MIN_REGION_BYTES: declined');
  const a = arena.take(3 * K + 1) as Uint8Array;
  const b = arena.take(2 * K) as Uint8Array;
  const c = arena.take(K) as Uint8Array;
  assert.deepEqual([a.byteOffset, b.byteOffset, c.byteOffset], [0, 3 * K + 64, 5 * K + 64]);
  assert.equal(a.length, 3 * K + 1);
  assert.ok(a.buffer instanceof SharedArrayBuffer && a.buffer === b.buffer);
  assert.equal(arena.take(5 * K), null, 'no free run fits');
  assert.deepEqual(arena.stats, { capacityBytes: 10 * K + 64, usedBytes: 6 * K + 64, touchedBytes: 6 * K + 64, regions: 3, taken: 3, declined: 1 });
  b.fill(7);
  assert.equal(arena.give(b), true);
  assert.equal(arena.give(b), false, 'a region is taken back once');
  assert.equal(arena.give(new Uint8Array(K)), false, "an ordinary allocation is not the arena's");
  assert.equal(arena.give(a.subarray(64)), false, 'nor a part of a region');
  // the freed run is the first that fits, and comes back zeroed
  const d = arena.take(2 * K) as Uint8Array;
  assert.equal(d.byteOffset, 3 * K + 64);
  assert.ok(
    d.every((v) => v === 0),
    'a reused region reads as zeros',
  );
  // taking back a, d and c joins everything into one run again
  for (const v of [a, c, d]) assert.ok(arena.give(v));
  assert.deepEqual(arena.freeRuns(), [[0, 10 * K + 64]]);
  assert.equal(arena.stats.usedBytes, 0);
  assert.equal((arena.take(10 * K) as Uint8Array).byteOffset, 0, 'the whole arena in one region');
});

test('RowArena: runs on both sides of a region taken back are joined with it', () => {
  const arena = new RowArena(4 * K);
  const [a, b, c, d] = [0, 1, 2, 3].map(() => arena.take(K) as Uint8Array) as [Uint8Array, Uint8Array, Uint8Array, Uint8Array];
  arena.give(a);
  arena.give(c);
  assert.deepEqual(arena.freeRuns(), [
    [0, K],
    [2 * K, 3 * K],
  ]);
  arena.give(b);
  assert.deepEqual(arena.freeRuns(), [[0, 3 * K]]);
  arena.give(d);
  assert.deepEqual(arena.freeRuns(), [[0, 4 * K]]);
});

test('a PackedRowStore on an arena: rows in a region, the region replaced on growth, frozen in place, released once nothing reads it', () => {
  const R = 36;
  const arena = new RowArena(1 << 20);
  const rows = (n: number, seed: number) => new Uint8Array(n * R).map((_, i) => (i * 13 + seed) & 255);
  const doc = new PackedRowStore(R);
  doc.useArena(arena);
  doc.reserve(4096);
  assert.equal(arena.stats.regions, 1, 'the reserve took a region');
  const first = rows(4096, 1);
  doc.append(first);
  // growth past the reserve: a bigger region, the old one given back
  doc.append(rows(100, 2));
  assert.equal(arena.stats.regions, 1);
  // (capacity grows by 1/16: 4,096 + 256 rows)
  assert.equal(arena.stats.usedBytes, Math.ceil(((4096 + 256) * R) / 64) * 64);
  assert.deepEqual(doc.range(0, 4096), first);
  doc.freeze();
  const fork = new PackedRowStore(R);
  fork.shareFrom(doc);
  fork.append(rows(3, 3));
  assert.deepEqual(fork.range(0, 4096), first, 'a fork reads the frozen rows in place');
  const held = arena.stats.usedBytes;
  fork.release();
  assert.equal(arena.stats.usedBytes, held, "a fork gives back nothing of its parent's");
  doc.release();
  assert.equal(arena.stats.usedBytes, 0, "the document's regions are back");
  assert.equal(doc.rows, 0);
  assert.throws(() => doc.range(0, 1), /rows \[0, 1\) of 0/);
  // the next document is written into the same memory, and reads only its own rows
  const next = new PackedRowStore(R);
  next.useArena(arena);
  next.reserve(2048);
  const second = rows(2048, 9);
  next.append(second);
  assert.deepEqual(next.range(0, 2048), second);
  assert.equal(arena.stats.regions, 1);
  assert.throws(() => next.useArena(arena), /not empty/);
});

test('a store without an arena, or one too full, allocates as before', () => {
  const arena = new RowArena(K);
  const s = new PackedRowStore(17, undefined, { shareable: true });
  s.useArena(arena);
  s.reserve(100_000); // 1.7 MB: more than the arena holds
  assert.deepEqual([arena.stats.regions, arena.stats.declined], [0, 1]);
  s.append(new Uint8Array(17 * 10).fill(5));
  assert.deepEqual(s.range(9, 1), new Uint8Array(17).fill(5));
  s.release();
  assert.equal(s.rows, 0);
});

test('RowArena.prefault: the first bytes resident at once; regions after it still zeroed; capped at the capacity', () => {
  const arena = new RowArena(8 * K);
  const a = arena.take(2 * K) as Uint8Array;
  a.fill(5);
  assert.ok(arena.prefault(5 * K) >= 0);
  assert.equal(arena.stats.touchedBytes, 5 * K);
  assert.ok(
    a.every((v) => v === 5),
    'a region handed out keeps its bytes',
  );
  const b = arena.take(2 * K) as Uint8Array;
  assert.ok(b.every((v) => v === 0));
  arena.prefault(100 * K);
  assert.equal(arena.stats.touchedBytes, 8 * K, 'no further than the capacity');
  assert.throws(() => arena.prefault(-1), /non-negative/);
});
