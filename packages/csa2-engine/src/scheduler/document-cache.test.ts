/**
 * The document cache: one load per document for all its concurrent questions, leases that pin,
 * least-recently-used eviction of idle entries, a document that cannot fit beside leased ones is not
 * cached, a failed load caches nothing. Then through Engine: questions on a shared document give
 * exactly what questions on private copies give (cache off), and their KV admission counts only what
 * each adds.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Sequence, SeededRandom } from '@csa2/core';
import { fixturesRoot } from '@csa2/core/testing';
import { Engine } from '../engine.js';
import { DocumentCache, MAX_TAIL_REPLAY, MAX_TAILS_PER_DOCUMENT } from './document-cache.js';
import type { PrimedTail } from './stored-tail.js';
import { globalCacheBytes, sequenceBytes } from './work-context.js';

function seqOf(rows: number): Sequence {
  const s = new Sequence({ numLayers: 1, window: 2, headDim: 32, indexHeadDim: 32, kvSources: [{ layer: 0, ratio: 1 }] });
  const c = s.cache(0);
  for (let i = 0; i < rows; i++) {
    c.mainKv.append(new Uint8Array(c.mainKv.rowBytes).fill(i & 0xff));
    c.indexK.append(new Uint8Array(c.indexK.rowBytes));
  }
  return s;
}

test('DocumentCache arena: a document that replaces an evicted one is written into its memory; a failed load gives its memory back', async () => {
  const shape = { numLayers: 1, window: 2, headDim: 32, indexHeadDim: 32, kvSources: [{ layer: 0, ratio: 1 }] };
  const ROWS = 4096; // 18-byte main-KV rows and 17-byte index-K rows: 72 KB and 68 KB, regions of the arena each
  const bytes = ROWS * (18 + 17);
  const cache = new DocumentCache(bytes + 1000);
  const arena = cache.arena;
  assert.ok(arena !== null, 'on by default');
  assert.equal(new DocumentCache(bytes, { arena: false }).arena, null);
  assert.equal(new DocumentCache(0).arena, null, 'no cache, no arena');
  const load = (fill: number) => async () => {
    const seq = cache.loadSequence(new Sequence(shape));
    seq.reserveTokens(ROWS);
    const c = seq.cache(0);
    c.mainKv.append(new Uint8Array(ROWS * c.mainKv.rowBytes).fill(fill));
    c.indexK.append(new Uint8Array(ROWS * c.indexK.rowBytes).fill(fill + 1));
    return seq;
  };
  const a = await cache.acquire('a', bytes, load(3));
  assert.ok(a !== null);
  const afterA = arena.stats;
  assert.deepEqual([afterA.regions, afterA.usedBytes >= bytes, afterA.taken], [2, true, 2]);
  a.release();
  // 'b' evicts 'a' (only one fits): its rows go where a's were, no memory beyond it touched
  const b = await cache.acquire('b', bytes, load(9));
  assert.ok(b !== null);
  assert.equal(cache.stats.evictions, 1);
  assert.equal(a.seq.globalCacheBytes(), 0, 'the evicted document holds no rows');
  assert.deepEqual([arena.stats.regions, arena.stats.taken, arena.stats.touchedBytes], [2, 4, afterA.touchedBytes]);
  const c = b.seq.cache(0);
  assert.deepEqual(c.mainKv.range(ROWS - 1, 1), new Uint8Array(18).fill(9));
  assert.deepEqual(c.indexK.range(0, 1), new Uint8Array(17).fill(10));
  assert.ok(cache.stats.arena !== null && cache.stats.arena.usedBytes === arena.stats.usedBytes);
  b.release();
  cache.clear();
  assert.equal(arena.stats.usedBytes, 0, 'cleared entries give their rows back');
  // a load that fails after taking memory gives it back (discard)
  await assert.rejects(
    cache.acquire('e', bytes, async () => {
      const seq = cache.loadSequence(new Sequence(shape));
      seq.reserveTokens(ROWS);
      cache.discard(seq);
      throw new Error('fetch failed');
    }),
    /fetch failed/,
  );
  assert.equal(arena.stats.usedBytes, 0);
});

test('DocumentCache: concurrent acquires share one load; leases pin; idle entries go oldest first; no room → not cached; a failed load caches nothing', async () => {
  const cache = new DocumentCache(1000);
  let loads = 0;
  const load = (rows: number) => async () => {
    loads++;
    await new Promise((r) => setTimeout(r, 5));
    return seqOf(rows);
  };
  const [a, b] = await Promise.all([cache.acquire('a', 400, load(3)), cache.acquire('a', 400, load(3))]);
  assert.ok(a !== null && b !== null);
  assert.equal(loads, 1, 'one load for both');
  assert.equal(a.seq, b.seq);
  assert.equal(a.seq.sharedBytes(), a.seq.globalCacheBytes(), 'the loaded sequence is frozen');
  assert.deepEqual([cache.stats.misses, cache.stats.hits, cache.stats.entries, cache.stats.leased, cache.stats.bytes], [1, 1, 1, 1, 400]);
  const c = await cache.acquire('c', 500, load(2));
  assert.ok(c !== null);
  // 'a' and 'c' are leased: 'd' (300) does not fit beside them
  assert.equal(cache.canHold('d', 300), false);
  assert.equal(await cache.acquire('d', 300, load(1)), null);
  assert.equal(cache.stats.bypassed, 1);
  a.release();
  a.release(); // twice is once
  b.release();
  // 'a' is idle now: it is evicted (the oldest) to make room for 'd'
  const d = await cache.acquire('d', 300, load(1));
  assert.ok(d !== null);
  assert.deepEqual([cache.stats.evictions, cache.stats.entries, cache.stats.bytes], [1, 2, 800]);
  c.release();
  d.release();
  // a load that fails: rejected, nothing cached, the next acquire loads again
  await assert.rejects(
    cache.acquire('e', 100, async () => {
      throw new Error('store down');
    }),
    /store down/,
  );
  assert.equal(cache.stats.entries, 2);
  const e = await cache.acquire('e', 100, load(1));
  assert.ok(e !== null);
  e.release();
  assert.ok(cache.stats.bytes <= 1000);
  // a document larger than the cache is never cached; off (0) caches nothing
  assert.equal(await cache.acquire('big', 2000, load(1)), null);
  assert.equal(await new DocumentCache(0).acquire('a', 1, load(1)), null);
  assert.throws(() => new DocumentCache(-1), /non-negative/);
});

const TINY = join(fixturesRoot(), 'deepseek-v41-tiny-a');
const greedy = { temperature: 0, topP: 1, seed: 0 };

function ids(n: number, seed: number): number[] {
  const rng = new SeededRandom(seed);
  return Array.from({ length: n }, () => 3 + Math.floor(rng.nextUniform() * 250));
}

test('DocumentCache encoder tails: kept within the bytes, at most a few replay lengths a document, none for long replays or after release; counted and dropped with their document', async () => {
  const cache = new DocumentCache(1000);
  const tailOf = (bytes: number): PrimedTail => ({
    state: { tokenCount: 0, indexKSlot: null, windows: [], pending: [] },
    stream: { start: 0, rows: 0, X: new Float32Array(0), pre: new Float32Array(0) },
    sources: null,
    bytes,
  });
  const a = await cache.acquire('a', 300, async () => seqOf(3));
  assert.ok(a !== null);
  assert.equal(a.tail(128), null);
  a.storeTail(128, tailOf(100));
  a.storeTail(128, tailOf(50)); // one tail per replay length: the first stays
  assert.equal(a.tail(128)?.bytes, 100);
  a.storeTail(MAX_TAIL_REPLAY + 1, tailOf(10));
  assert.equal(a.tail(MAX_TAIL_REPLAY + 1, false), null, 'no tail for a replay longer than MAX_TAIL_REPLAY');
  a.storeTail(256, tailOf(700));
  assert.equal(a.tail(256, false), null, 'a tail that does not fit the bytes is not kept');
  for (let i = 1; i < MAX_TAILS_PER_DOCUMENT + 2; i++) a.storeTail(128 + i, tailOf(10));
  assert.equal([128, 129, 130, 131, 132].filter((r) => a.tail(r, false) !== null).length, MAX_TAILS_PER_DOCUMENT);
  let s = cache.stats;
  assert.deepEqual([s.bytes, s.tailBytes, s.tailsStored, s.tailHits], [300, 100 + 10 * (MAX_TAILS_PER_DOCUMENT - 1), MAX_TAILS_PER_DOCUMENT, 1]);
  a.release();
  a.storeTail(512, tailOf(10));
  assert.equal(cache.stats.tailsStored, MAX_TAILS_PER_DOCUMENT, 'a released lease stores nothing');
  // the document and its tails leave together: a 900-byte document evicts the idle one
  const b = await cache.acquire('b', 900, async () => seqOf(9));
  assert.ok(b !== null);
  s = cache.stats;
  assert.deepEqual([s.entries, s.evictions, s.bytes, s.tailBytes], [1, 1, 900, 0]);
  b.release();
});

test('questions on a shared loaded document equal questions on private copies, logit for logit; the document is loaded once and counted once', async () => {
  const store = pathToFileURL(mkdtempSync(join(tmpdir(), 'csa2-doccache-'))).href;
  const shared = await Engine.open({ modelDir: TINY, store, chunkTokens: 32 });
  const privateCopies = await Engine.open({ modelDir: TINY, store, chunkTokens: 32, documentCacheBytes: 0 });
  try {
    const doc = { tenant: 't', documentId: 'manual' };
    await shared.ingest({ ...doc, tokenIds: ids(200, 1) });
    const questions = [ids(5, 2), ids(9, 3), ids(1, 4), ids(30, 5)].map((promptIds, i) => ({
      promptIds,
      document: doc,
      maxTokens: 10 + i,
      sampling: i === 2 ? { temperature: 0.8, topP: 0.9, seed: 7 } : greedy,
      keepLogits: true,
      ignoreEos: true,
      replayTokens: 16 + 8 * i,
    }));
    const want: Awaited<ReturnType<Engine['generate']>>[] = [];
    for (const q of questions) want.push(await privateCopies.generate(q));
    let peakKv = 0;
    const got = await Promise.all(
      questions.map((q) =>
        shared.generate(q, {
          onToken: () => {
            peakKv = Math.max(peakKv, shared.stats().kvBytesInUse);
          },
        }),
      ),
    );
    got.forEach((g, i) => {
      const w = want[i]!;
      assert.deepEqual(g.tokens, w.tokens, `question ${i}: tokens`);
      assert.equal(g.cachedTokens, 200);
      g.logits.forEach((row, j) => assert.deepEqual(row, w.logits[j], `question ${i}: logits row ${j}`));
    });
    const s = shared.stats().documentCache;
    assert.deepEqual([s.misses, s.hits, s.entries, s.leased], [1, 3, 1, 0], 'one load, three questions served from it, idle now');
    assert.ok(s.bytes > 0);
    // each question's KV admission counts what it adds, not the document's rows again
    const sharedKv = questions.reduce((n, q) => n + sequenceBytes(shared.model, 200 + q.promptIds.length + q.maxTokens, 200), 0);
    const privateKv = questions.reduce((n, q) => n + sequenceBytes(shared.model, 200 + q.promptIds.length + q.maxTokens), 0);
    assert.equal(privateKv - sharedKv, 4 * s.bytes);
    assert.ok(peakKv > 0 && peakKv <= sharedKv, `peak KV in use ${peakKv} B; the questions add ${sharedKv} B, with private copies ${privateKv} B`);
    assert.deepEqual([privateCopies.stats().documentCache.entries, privateCopies.stats().documentCache.bypassed], [0, 4]);
    // a re-ingested document with other tokens is another entry: the old one is never served for it
    await shared.ingest({ ...doc, tokenIds: ids(190, 9) });
    const after = await shared.generate(questions[0]!);
    const fresh = await privateCopies.generate(questions[0]!);
    assert.deepEqual(after.tokens, fresh.tokens);
    assert.equal(after.cachedTokens, 190);
    assert.equal(shared.stats().documentCache.misses, 2);
  } finally {
    await shared.close();
    await privateCopies.close();
  }
});

test('documents that evict each other are loaded into the memory the evicted one used, and answer exactly as private copies do', async () => {
  const store = pathToFileURL(mkdtempSync(join(tmpdir(), 'csa2-docarena-'))).href;
  const privateCopies = await Engine.open({ modelDir: TINY, store, chunkTokens: 32, documentCacheBytes: 0 });
  // room for one 200-token document (and its encoder tail), not two
  const oneDocument = Math.floor(1.5 * globalCacheBytes(privateCopies.model, 200));
  const arena = await Engine.open({ modelDir: TINY, store, chunkTokens: 32, documentCacheBytes: oneDocument });
  try {
    const docs = [
      { tenant: 't', documentId: 'a' },
      { tenant: 't', documentId: 'b' },
    ];
    await privateCopies.ingest({ ...docs[0]!, tokenIds: ids(200, 21) });
    await privateCopies.ingest({ ...docs[1]!, tokenIds: ids(200, 22) });
    const question = (document: (typeof docs)[number], seed: number) => ({
      promptIds: ids(6, seed),
      document,
      maxTokens: 6,
      sampling: greedy,
      keepLogits: true,
      ignoreEos: true,
    });
    let touched = 0;
    for (const [i, document] of [docs[0]!, docs[1]!, docs[0]!, docs[1]!, docs[0]!].entries()) {
      const q = question(document, 30 + i);
      const want = await privateCopies.generate(q);
      const got = await arena.generate(q);
      assert.deepEqual(got.tokens, want.tokens, `question ${i} on ${document.documentId}: tokens`);
      got.logits.forEach((row, j) => assert.deepEqual(row, want.logits[j], `question ${i}: logits row ${j}`));
      const s = arena.stats().documentCache;
      assert.ok(s.arena !== null && s.arena.taken > 0, 'the document was loaded into the arena');
      assert.equal(s.arena.declined, 0, 'every load found room in the arena: the evicted document gave its memory back');
      // from the second document on, each load reuses the evicted one's memory: none beyond it is touched
      if (i === 0) touched = s.arena.touchedBytes;
      else assert.equal(s.arena.touchedBytes, touched, `question ${i}: the arena's touched bytes`);
      assert.deepEqual([s.misses, s.evictions], [i + 1, i], `question ${i}: loaded, evicting the other`);
    }
  } finally {
    await arena.close();
    await privateCopies.close();
  }
});

test('documentPrefaultBytes faults the document memory in at open; it needs the arena', async () => {
  const engine = await Engine.open({ modelDir: TINY, chunkTokens: 32, documentCacheBytes: 1 << 20, documentPrefaultBytes: 300_000 });
  try {
    const ms = engine.info().documentPrefaultMs;
    assert.ok(ms !== null && ms >= 0, 'timed');
    assert.equal(engine.stats().documentCache.arena?.touchedBytes, 300_032, 'the prefaulted bytes (rounded up to 64) are resident');
  } finally {
    await engine.close();
  }
  const plain = await Engine.open({ modelDir: TINY, chunkTokens: 32 });
  assert.equal(plain.info().documentPrefaultMs, null);
  await plain.close();
  await assert.rejects(
    Engine.open({ modelDir: TINY, documentCacheBytes: 1 << 20, documentArena: false, documentPrefaultBytes: 4096 }),
    /need the document cache and its arena/,
  );
  await assert.rejects(Engine.open({ modelDir: TINY, documentCacheBytes: 0, documentPrefaultBytes: 4096 }), /need the document cache and its arena/);
});
