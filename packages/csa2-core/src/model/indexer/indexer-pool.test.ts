/**
 * The hierarchical indexer scoring only the candidate pool (the default) gives the lists of the
 * official score-everything-then-mask path (indexerPool: false), bit for bit, and so the same logits:
 * on the tiny-a fixture, and on a seeded model whose pools (topBlocks × blockSize) are smaller than
 * top-k, where rows must pick outside their pool (the scan's -inf picks), in prefill and decode.
 */
import { test } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import assert from 'node:assert/strict';
import { goldenFixtures } from '../../testing/fixtures.js';
import { bundledConfig, withSeededCheckpoint } from '../../testing/seeded-model.js';
import { loadCheckpoint, type Checkpoint } from '../../weights/checkpoint.js';
import { SeededRandom } from '../../weights/init-model.js';
import { Csa2Model } from '../model.js';
import { argmax } from '../generation/sampler.js';
import { candidatePool, completePicks, poolBlocks, PoolKeyCache, poolKeyCacheStats, poolPartStats, poolPushStats, poolRanges } from './indexer-pool.js';
import { PackedRowStore } from '../sequence/packed-rows.js';

interface Trace {
  readonly topk: Map<number, number[][]>;
  readonly logits: Float32Array[];
}

async function trace(
  ckpt: Checkpoint,
  indexerPool: boolean,
  prompt: readonly number[],
  steps: number,
  chunkTokens: number,
  indexerKeyChunk?: number,
  share = false,
): Promise<Trace> {
  const model = await Csa2Model.create(
    ckpt.config,
    ckpt.plan,
    { get: (n) => ckpt.tensor(n).data },
    { indexerPool, chunkTokens, ...(indexerKeyChunk !== undefined ? { indexerKeyChunk } : {}) },
  );
  const topk = new Map<number, number[][]>();
  model.observer = { topk: (l, _p0, _rows, _kk, t) => (topk.get(l) ?? topk.set(l, []).get(l))!.push(Array.from(t)) };
  const prefilled = model.createSequence();
  const logits = [await model.prefillExact(prefilled, prompt)];
  // share: decode on a fork that reads the prompt's rows as a frozen prefix (a document shared by questions)
  if (share) prefilled.freeze();
  const seq = share ? prefilled.fork() : prefilled;
  if (share) assert.ok(seq.sharedBytes() > 0 && seq.sharedBytes() === prefilled.globalCacheBytes());
  for (let s = 0; s < steps; s++) logits.push(await model.step(seq, argmax(logits[logits.length - 1] as Float32Array)));
  await model.dispose();
  return { topk, logits };
}

function sameTrace(a: Trace, b: Trace): void {
  assert.deepEqual([...a.topk.keys()], [...b.topk.keys()]);
  for (const [l, lists] of a.topk) assert.deepEqual(lists, b.topk.get(l), `layer ${l} top-k lists`);
  a.logits.forEach((row, i) => assert.deepEqual(row, b.logits[i], `logits row ${i}`));
}

test('tiny-a: scoring only the candidate pool gives the full scan top-k lists and logits, bit for bit', async () => {
  const dir = goldenFixtures().find((d) => d.endsWith('deepseek-v41-tiny-a')) ?? (goldenFixtures()[0] as string);
  const ckpt = await loadCheckpoint(dir);
  const prompt = Array.from({ length: 48 }, (_, i) => (i * 37 + 11) % 256);
  sameTrace(await trace(ckpt, true, prompt, 16, 256), await trace(ckpt, false, prompt, 16, 256));
  ckpt.close();
});

test('pools smaller than top-k: rows pick outside their pool exactly as the scan does (prefill chunks and decode)', async () => {
  // 40 layers, Reindex at 24/28/32/36; pools of 2 blocks × 2 = 4 positions, top-k 6
  const config = { ...bundledConfig('v41-tiny-40l'), window_size: 8, index_topk: 6, candidate_topk_blocks: 2, candidate_block_size: 2, max_seq_len: 512 };
  await withSeededCheckpoint(config, 11, async (ckpt) => {
    const rng = new SeededRandom(5);
    const prompt = Array.from({ length: 70 }, () => rng.nextU32() % 256);
    const before = { ...poolPartStats };
    const pool = await trace(ckpt, true, prompt, 6, 32);
    sameTrace(pool, await trace(ckpt, false, prompt, 6, 32));
    // both kinds of part ran: prefill chunks' rows share few of their 2-block pools (scored row by row), decode rows are parts of one
    assert.ok(poolPartStats.ownRowParts > before.ownRowParts, 'rows scored one by one over their own blocks');
    assert.ok(poolPartStats.unionParts > before.unionParts, 'parts scored over their union');
    // the case is exercised: at a Reindex layer some pick lies outside its row's 4-position pool
    const lists = pool.topk.get(24) ?? [];
    assert.ok(
      lists.some((l) => l.filter((p) => p >= 0).length > 4),
      'some row picks more entries than its pool holds',
    );
  });
});

test('candidatePool and completePicks: the union of the rows blocks, per-row masks, and the fill order of the scan', () => {
  // 2 rows, blocks of 4; row 0 keeps blocks 2 and 0, row 1 keeps block 1 only (and one dropped pick)
  const cand = Int32Array.of(2, 0, 1, -1);
  const clen = Int32Array.of(10, 12);
  const pool = candidatePool(cand, 2, 2, 12, 4, clen);
  assert.deepEqual(Array.from(pool.positions), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
  const allowRow = (r: number) => Array.from(pool.allow.subarray(r * 12, (r + 1) * 12));
  assert.deepEqual(allowRow(0), [1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0], 'blocks 0 and 2, below clen 10');
  assert.deepEqual(allowRow(1), [0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0]);
  // row 1 has 4 allowed entries but must pick 6: then positions 0, 1 (outside its pool, still visible)
  const picks = Int32Array.of(9, 8, 3, 2, 1, 0, 7, 6, 5, 4, -1, -1);
  const topk = completePicks(picks, 2, 6, 6, clen, pool);
  assert.deepEqual(Array.from(topk), [0, 1, 2, 3, 8, 9, 0, 1, 4, 5, 6, 7]);
  // a single pool position gets a second, never-allowed column
  const one = candidatePool(Int32Array.of(0), 1, 1, 1, 4, Int32Array.of(1));
  assert.deepEqual(Array.from(one.positions), [0, 0]);
  assert.deepEqual(Array.from(one.allow), [1, 0]);
});

test("poolRanges and writePoolMask: each row's allowed columns (visible, in its blocks) as ranges and as a mask", () => {
  const rng = new SeededRandom(17);
  for (let trial = 0; trial < 50; trial++) {
    const [S, kb, bs] = [1 + (rng.nextU32() % 6), 1 + (rng.nextU32() % 5), 1 + (rng.nextU32() % 4)];
    const nVis = 1 + (rng.nextU32() % 40);
    const blocks = Math.ceil(nVis / bs) + 2; // a few blocks past the visible entries too
    const cand = Int32Array.from({ length: S * kb }, () => (rng.nextU32() % 4 === 0 ? -1 : rng.nextU32() % blocks));
    for (let r = 0; r < S; r++) {
      // a row's blocks are distinct (the candidate source's best kb)
      const seen = new Set<number>();
      for (let j = 0; j < kb; j++)
        if (seen.has(cand[r * kb + j] as number)) cand[r * kb + j] = -1;
        else seen.add(cand[r * kb + j] as number);
    }
    const clen = Int32Array.from({ length: S }, () => rng.nextU32() % (nVis + 1));
    const pool = candidatePool(cand, S, kb, nVis, bs, clen);
    const ranges = poolRanges(pool, clen);
    for (let r = 0; r < S; r++) {
      const fromRanges = new Array<number>(pool.columns).fill(0);
      const rg = ranges[r] as Int32Array;
      for (let j = 0; j < rg.length; j += 2) {
        assert.ok(
          (rg[j] as number) < (rg[j + 1] as number) && (j === 0 || (rg[j - 1] as number) < (rg[j] as number)),
          `trial ${trial} row ${r}: ranges ascending, apart, not empty`,
        );
        fromRanges.fill(1, rg[j], rg[j + 1]);
      }
      // from the definition: the column's position is visible to the row and in one of its blocks
      const own = new Set(Array.from(cand.subarray(r * kb, (r + 1) * kb)).filter((b) => b >= 0));
      const want = Array.from(pool.positions, (p, col) => (col < pool.size && p < (clen[r] as number) && own.has(Math.floor(p / bs)) ? 1 : 0));
      assert.deepEqual(fromRanges, want, `trial ${trial} row ${r}`);
      assert.deepEqual(Array.from(pool.allow.subarray(r * pool.columns, (r + 1) * pool.columns)), want, `trial ${trial} row ${r}: the mask`);
    }
  }
});

test('scans in chunks of keys (merged rankings) give the one-chunk lists and logits, bit for bit', async () => {
  const dir = goldenFixtures().find((d) => d.endsWith('deepseek-v41-tiny-a')) ?? (goldenFixtures()[0] as string);
  const ckpt = await loadCheckpoint(dir);
  const prompt = Array.from({ length: 48 }, (_, i) => (i * 29 + 5) % 256);
  // tiny-a: 24 ratio-2 and 48 ratio-1 entries; chunks of 4 and 8 keys (a leftover single key joins the last chunk)
  const whole = await trace(ckpt, true, prompt, 12, 256);
  for (const chunk of [4, 8]) sameTrace(await trace(ckpt, true, prompt, 12, 256, chunk), whole);
  ckpt.close();
  const config = { ...bundledConfig('v41-tiny-40l'), window_size: 8, index_topk: 6, candidate_topk_blocks: 2, candidate_block_size: 2, max_seq_len: 512 };
  await withSeededCheckpoint(config, 12, async (seeded) => {
    const rng = new SeededRandom(6);
    const long = Array.from({ length: 75 }, () => rng.nextU32() % 256);
    sameTrace(await trace(seeded, true, long, 5, 32, 6), await trace(seeded, true, long, 5, 32));
  });
});

test('decode on a fork that reads a frozen prefix in place gives the unshared lists and logits, bit for bit', async () => {
  const config = { ...bundledConfig('v41-tiny-40l'), window_size: 8, index_topk: 6, candidate_topk_blocks: 2, candidate_block_size: 2, max_seq_len: 512 };
  await withSeededCheckpoint(config, 12, async (seeded) => {
    const rng = new SeededRandom(7);
    // 75 and 77 tokens: ratio-4 prefixes of 18 and 19 rows (the scans split at a whole block, 18); key chunks of 6 and of all keys
    for (const n of [75, 77]) {
      const prompt = Array.from({ length: n }, () => rng.nextU32() % 256);
      for (const chunk of [6, undefined]) sameTrace(await trace(seeded, true, prompt, 9, 32, chunk, true), await trace(seeded, true, prompt, 9, 32, chunk));
    }
    const prompt = Array.from({ length: 77 }, () => rng.nextU32() % 256);
    sameTrace(await trace(seeded, false, prompt, 6, 32, 6, true), await trace(seeded, false, prompt, 6, 32, 6));
  });
});

test("pools of 64 blocks of 8 over 1,100 entries: the filtered pushes and the Reindex layers' reused pool keys give the scan's lists and logits, bit for bit", async () => {
  // decode rows' pools are 512 of layer 20's ~1,100 entries: pushAboveFloor applies (512 keys, top-k 16:
  // 16 groups of 32), and layers 28/32/36 take layer 24's gathered keys from the cache
  const config = { ...bundledConfig('v41-tiny-40l'), window_size: 8, index_topk: 16, candidate_topk_blocks: 64, candidate_block_size: 8, max_seq_len: 1280 };
  await withSeededCheckpoint(config, 13, async (ckpt) => {
    const rng = new SeededRandom(9);
    const prompt = Array.from({ length: 1100 }, () => rng.nextU32() % 256);
    const before = { ...poolPushStats, ...poolKeyCacheStats };
    const pool = await trace(ckpt, true, prompt, 5, 256);
    const filtered = poolPushStats.filtered - before.filtered;
    const hits = poolKeyCacheStats.hits - before.hits;
    sameTrace(pool, await trace(ckpt, false, prompt, 5, 256));
    assert.ok(filtered > 0, 'rows pushed through the floor filter');
    // 5 decode steps (the first 4 after the prefill's logits row) × 3 later Reindex layers at least
    assert.ok(hits >= 12, `pool keys reused across the Reindex layers (${hits} hits)`);
  });
});

test("a prefill chunk's rows take their pool keys from the first Reindex layer in the later ones, and the cache is empty between forward calls", async () => {
  // a chunk of 256 rows whose pools are 64 blocks of 8 of layer 20's 1,100 entries (8.7 KB a row): the three
  // later Reindex layers (28, 32, 36) find every row's keys that layer 24 gathered as a whole pool
  const config = { ...bundledConfig('v41-tiny-40l'), window_size: 8, index_topk: 16, candidate_topk_blocks: 64, candidate_block_size: 8, max_seq_len: 1280 };
  await withSeededCheckpoint(config, 13, async (ckpt) => {
    const rng = new SeededRandom(10);
    const prompt = Array.from({ length: 1100 }, () => rng.nextU32() % 256);
    const model = await Csa2Model.create(ckpt.config, ckpt.plan, { get: (n) => ckpt.tensor(n).data }, { chunkTokens: 256 });
    try {
      const seq = model.createSequence();
      const before = { ...poolKeyCacheStats };
      const logits = await model.prefillExact(seq, prompt);
      const hits = poolKeyCacheStats.hits - before.hits;
      const misses = poolKeyCacheStats.misses - before.misses;
      assert.ok(misses > 0, 'pools gathered whole');
      assert.equal(hits, 3 * misses, `each gathered pool served the three later Reindex layers (${hits} hits, ${misses} misses)`);
      assert.equal(model.poolKeyBytes, 0, 'no pool keys held after the prefill');
      await model.step(seq, argmax(logits));
      assert.equal(model.poolKeyBytes, 0, 'none after a decode step');
    } finally {
      await model.dispose();
    }
  });
});

test('PoolKeyCache: a hit only for the same store, generation, visible entries and blocks; oldest dropped beyond its bytes', () => {
  const rowBytes = 17;
  const store = new PackedRowStore(rowBytes);
  const rows = new Uint8Array(64 * rowBytes).map((_, i) => (i * 7) & 255);
  store.append(rows);
  const poolOf = (blocks: number[], nVis = 64) => poolBlocks(Int32Array.from(blocks), 1, blocks.length, nVis, 8);
  const gathered = (blocks: number[], nVis = 64) => store.gatherBlocks(Int32Array.from(blocks), 8, nVis, new Uint8Array(blocks.length * 8 * rowBytes));
  const cache = new PoolKeyCache(3 * 8 * rowBytes * 2);
  const a = poolOf([1, 3]);
  cache.keep(store, a, gathered([1, 3]));
  assert.deepEqual(cache.find(store, poolOf([1, 3])), gathered([1, 3]));
  assert.equal(cache.find(store, poolOf([1, 4])), null, 'other blocks');
  assert.equal(cache.find(store, poolOf([1, 3], 60)), null, 'other visible entries');
  assert.equal(cache.find(new PackedRowStore(rowBytes), a), null, 'another store');
  // rows rewritten after a truncate: the old copy is not reused
  store.truncate(32);
  store.append(new Uint8Array(32 * rowBytes).fill(9));
  assert.equal(cache.find(store, a), null, 'a truncated store');
  cache.keep(store, a, gathered([1, 3]));
  assert.deepEqual(cache.find(store, a), gathered([1, 3]));
  // the bytes bound: three 2-block entries fit, a fourth drops the oldest
  cache.keep(store, poolOf([0, 2]), gathered([0, 2]));
  cache.keep(store, poolOf([5, 6]), gathered([5, 6]));
  assert.equal(cache.heldBytes, 3 * 2 * 8 * rowBytes);
  cache.keep(store, poolOf([4, 7]), gathered([4, 7]));
  assert.equal(cache.find(store, a), null, 'the oldest entry was dropped');
  assert.deepEqual(cache.find(store, poolOf([4, 7])), gathered([4, 7]));
  assert.equal(cache.heldBytes, 3 * 2 * 8 * rowBytes);
});

test("PoolKeyCache holds no store: a finished question's rows (and the document it reads) can be collected", async () => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const cache = new PoolKeyCache();
  const kept = (() => {
    const store = new PackedRowStore(17);
    store.append(new Uint8Array(64 * 17).fill(3));
    const pool = poolBlocks(Int32Array.of(0, 5), 1, 2, 64, 8);
    cache.keep(store, pool, store.gatherBlocks(pool.blocks, 8, 64, new Uint8Array(2 * 8 * 17)));
    return new WeakRef(store);
  })();
  assert.equal(cache.heldBytes, 2 * 8 * 17);
  for (let i = 0; i < 10 && kept.deref() !== undefined; i++) {
    await new Promise((resolve) => setImmediate(resolve));
    gc();
  }
  assert.equal(kept.deref(), undefined, 'the store was collected while its gathered keys stay cached');
});
