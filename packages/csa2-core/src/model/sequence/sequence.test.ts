import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Sequence } from './sequence.js';
import { PackedRowStore } from './packed-rows.js';
import { TokenBuffer } from './token-buffer.js';

test('PackedRowStore appends whole rows, grows by a sixteenth, reserves exactly, views, gathers', () => {
  const s = new PackedRowStore(3, 1);
  s.append(Uint8Array.of(1, 2, 3, 4, 5, 6));
  assert.equal(s.rows, 2);
  assert.deepEqual(Array.from(s.view()), [1, 2, 3, 4, 5, 6]);
  assert.deepEqual(Array.from(s.row(1)), [4, 5, 6]);
  assert.deepEqual(Array.from(s.range(1, 1)), [4, 5, 6]);
  assert.deepEqual(Array.from(s.gather([1, 0, 1])), [4, 5, 6, 1, 2, 3, 4, 5, 6]);
  const out = new Uint8Array(12).fill(9);
  s.gather([0], out, 2);
  assert.deepEqual(Array.from(out), [9, 9, 9, 9, 9, 9, 1, 2, 3, 9, 9, 9]);
  assert.throws(() => s.append(Uint8Array.of(1, 2)), /not a whole number of 3-byte rows/);
  assert.throws(() => s.gather([2]), /row 2 of 2/);
  assert.throws(() => s.view(3), /3 rows asked, 2 stored/);

  const big = new PackedRowStore(10, 1);
  big.reserve(1000);
  assert.equal(big.capacityBytes, 10_000, 'reserve is exact');
  for (let i = 0; i < 1000; i++) big.append(new Uint8Array(10).fill(i & 0xff));
  assert.equal(big.capacityBytes, 10_000, 'appends within the reservation do not grow it');
  big.append(new Uint8Array(10));
  assert.ok(big.capacityBytes <= 10_000 * 1.07, `grew to ${big.capacityBytes} bytes: by about a sixteenth, not doubling`);
  assert.equal(big.row(999)[0], 999 & 0xff);
  big.truncate(5);
  assert.equal(big.rows, 5);
});

test('PackedRowStore.freeze and shareFrom: forks read the prefix in place, keep their tails apart, copy only across the boundary', () => {
  const a = new PackedRowStore(2, 4);
  a.append(Uint8Array.of(1, 1, 2, 2, 3, 3));
  a.freeze();
  assert.deepEqual([a.rows, a.sharedRowCount, a.sharedBytes], [3, 3, 6]);
  a.append(Uint8Array.of(4, 4));
  const b = new PackedRowStore(2);
  b.shareFrom(a);
  assert.deepEqual([b.rows, b.sharedRowCount], [4, 3], 'the prefix shared, the private row copied');
  b.append(Uint8Array.of(9, 9, 8, 8));
  a.append(Uint8Array.of(5, 5));
  assert.deepEqual(Array.from(a.view()), [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]);
  assert.deepEqual(Array.from(b.view()), [1, 1, 2, 2, 3, 3, 4, 4, 9, 9, 8, 8]);
  // in place within a segment: the shared prefix is one buffer for both stores
  assert.equal(a.range(0, 3).buffer, b.range(0, 3).buffer);
  assert.equal(b.range(1, 2).byteOffset, a.range(1, 2).byteOffset);
  assert.notEqual(a.range(3, 1).buffer, b.range(3, 1).buffer);
  assert.deepEqual([b.segmentEnd(0), b.segmentEnd(2), b.segmentEnd(3)], [3, 3, 6]);
  assert.deepEqual(Array.from(b.range(2, 3)), [3, 3, 4, 4, 9, 9], 'across the boundary: a copy');
  assert.deepEqual(Array.from(b.gather([5, 0, 3, 2])), [8, 8, 1, 1, 4, 4, 3, 3]);
  // consecutive rows move as one copy, split where the shared prefix ends
  assert.deepEqual(Array.from(b.gather([1, 2, 3, 4, 5, 0, 1])), [2, 2, 3, 3, 4, 4, 9, 9, 8, 8, 1, 1, 2, 2]);
  assert.throws(() => b.gather([4, 5, 6]), /row 6 of 6/);
  // whole blocks of 2 rows (the last one cut at a limit of 5 rows): what gather of their positions copies, across the boundary too
  const into = new Uint8Array(20).fill(0xee);
  b.gatherBlocks([2, 0, 1], 2, 5, into, 1);
  assert.deepEqual(Array.from(into), [0xee, 0xee, ...b.gather([4, 0, 1, 2, 3]), 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee]);
  assert.throws(() => b.gatherBlocks([3], 2, 6, new Uint8Array(4)), /block 3 of 2 rows, 6 rows/);
  const out = new Uint8Array(8);
  b.copyRange(1, 4, out);
  assert.deepEqual(Array.from(out), [2, 2, 3, 3, 4, 4, 9, 9]);
  // freezing again joins prefix and tail into a new prefix; the old one is untouched
  b.freeze();
  assert.deepEqual([b.sharedRowCount, b.capacityBytes > 0], [6, true]);
  assert.deepEqual(Array.from(b.view()), [1, 1, 2, 2, 3, 3, 4, 4, 9, 9, 8, 8]);
  // truncating into the prefix keeps a private copy
  b.truncate(2);
  assert.deepEqual([b.rows, b.sharedRowCount], [2, 0]);
  b.append(Uint8Array.of(7, 7));
  assert.deepEqual(Array.from(b.view()), [1, 1, 2, 2, 7, 7]);
  assert.deepEqual(Array.from(a.view()), [1, 1, 2, 2, 3, 3, 4, 4, 5, 5], 'the other store never sees it');
  assert.throws(() => b.shareFrom(a), /not empty/);
  assert.throws(() => new PackedRowStore(3).shareFrom(a), /2-byte rows into a 3-byte store/);
});

test('TokenBuffer appends without spreading (a million ids), views and slices', () => {
  const t = new TokenBuffer(4);
  t.push(7);
  t.append([8, 9]);
  t.append(Uint32Array.of(10));
  assert.equal(t.length, 4);
  assert.deepEqual(Array.from(t.view()), [7, 8, 9, 10]);
  assert.deepEqual(Array.from(t.slice(1, 3)), [8, 9]);
  assert.equal(t.at(3), 10);
  assert.throws(() => t.at(4), /outside \[0, 4\)/);
  const million = Uint32Array.from({ length: 1_048_576 }, (_, i) => i % 1000);
  t.append(million);
  t.append(Array.from(million.subarray(0, 200_000))); // a plain array above V8's argument limit
  assert.equal(t.length, 4 + 1_048_576 + 200_000);
  assert.equal(t.at(4 + 1_048_575), 1_048_575 % 1000);
  t.truncate(2);
  assert.deepEqual(Array.from(t.view()), [7, 8]);
});

test('Sequence.fork copies every piece of state; the copies evolve independently', () => {
  const seq = new Sequence({ numLayers: 2, window: 4, headDim: 32, indexHeadDim: 32, kvSources: [{ layer: 1, ratio: 2 }] });
  seq.tokens.append([1, 2, 3]);
  seq.windows[0]!.write(2, new Float32Array(32).fill(0.5));
  const c = seq.cache(1);
  c.mainKv.append(new Uint8Array(c.mainKv.rowBytes).fill(3));
  c.indexK.append(new Uint8Array(c.indexK.rowBytes).fill(4));
  c.pendingGroup = 1;
  c.pendingCount = 1;
  c.pendingKv.fill(0.25);
  seq.indexKSlot = 1;
  const f = seq.fork();
  assert.deepEqual(Array.from(f.tokens.view()), [1, 2, 3]);
  assert.deepEqual(Array.from(f.windows[0]!.get(2)!), Array.from(seq.windows[0]!.get(2)!));
  assert.deepEqual(Array.from(f.cache(1).mainKv.view()), Array.from(c.mainKv.view()));
  assert.deepEqual(Array.from(f.cache(1).indexK.view()), Array.from(c.indexK.view()));
  assert.equal(f.cache(1).pendingGroup, 1);
  assert.equal(f.cache(1).pendingKv[5], 0.25);
  assert.equal(f.indexKSlot, 1);
  f.tokens.push(9);
  f.cache(1).mainKv.append(new Uint8Array(c.mainKv.rowBytes));
  f.windows[0]!.write(3, new Float32Array(32));
  assert.equal(seq.length, 3);
  assert.equal(seq.cache(1).entries, 1);
  assert.equal(seq.windows[0]!.get(3), null);
  assert.equal(seq.globalCacheBytes(), c.mainKv.rowBytes + c.indexK.rowBytes);
  assert.ok(seq.residentBytes() > seq.globalCacheBytes());
  assert.throws(() => seq.cache(0), /layer 0 is not a KV source/);
});

test('Sequence.freeze: forks read the global cache in place and own only what they add', () => {
  const seq = new Sequence({ numLayers: 2, window: 4, headDim: 32, indexHeadDim: 32, kvSources: [{ layer: 1, ratio: 1 }] });
  const c = seq.cache(1);
  seq.tokens.append(Array.from({ length: 1000 }, (_, i) => i));
  seq.reserveTokens(1000);
  for (let i = 0; i < 1000; i++) {
    c.mainKv.append(new Uint8Array(c.mainKv.rowBytes).fill(i & 0xff));
    c.indexK.append(new Uint8Array(c.indexK.rowBytes).fill(i & 0x7f));
  }
  const before = seq.residentBytes();
  seq.freeze();
  const forks = Array.from({ length: 8 }, () => seq.fork());
  for (const f of forks) {
    assert.equal(f.sharedBytes(), seq.globalCacheBytes());
    assert.ok(f.residentBytes() < before / 4, `a fork owns ${f.residentBytes()} bytes, the cache is ${seq.globalCacheBytes()}`);
    assert.equal(f.cache(1).mainKv.range(10, 1)[0], 10);
  }
  forks[0]!.cache(1).mainKv.append(new Uint8Array(c.mainKv.rowBytes).fill(0xee));
  assert.equal(forks[1]!.cache(1).entries, 1000);
  assert.equal(forks[0]!.cache(1).mainKv.row(1000)[0], 0xee);
});
