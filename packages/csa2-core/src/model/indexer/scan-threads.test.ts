/**
 * Scans shared with scan threads (model/indexer/scan-threads, indexer-scan's scoreKeys) give the main thread's
 * lists bit for bit: top-k and candidate blocks of a decode row over 300,004 keys, of 40 causal rows,
 * of a shared prefix read by two forks, with 1 and 3 threads, prompt ones and slow ones (each task
 * held back 30 ms, so that the main thread takes most slices); a scan the threads decline (queries that
 * are not MXFP4) and slices a thread took before it failed are scored on the main thread, with the same
 * lists. Criterion: equality of every list (the threads run the same kernel on the same bytes; the
 * merge of bounded heaps over a total order is exact).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { LayerPlanEntry } from '../../config/layer-plan.js';
import { parseModelConfig, type ModelConfig } from '../../config/model-config.js';
import { indexKRowBytes } from '../../numerics/formats.js';
import { openGraphSession } from '../../runtime/ort-session.js';
import { bundledConfig } from '../../testing/seeded-model.js';
import { SeededRandom } from '../../weights/init-model.js';
import { buildIndexScoresGraph } from '../graphs/indexer-graphs.js';
import type { IndexerContext, IndexerJob } from './indexer-job.js';
import { scanSplit, scanSplitShared, threadScanStats, type ScanResult } from './indexer-scan.js';
import { IndexScorer } from './indexer-scores.js';
import { MAX_AUTO_SCAN_THREADS, ScanThreads, keysIn, resolveScanThreads } from './scan-threads.js';
import { KvSourceCache } from '../sequence/sequence.js';

const config: ModelConfig = parseModelConfig(bundledConfig('v41-tiny-40l'));
const { indexNumHeads: hI, indexHeadDim: dI } = config;
const R = indexKRowBytes(dI);
const E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6];
const source = { isCandidateSource: true } as LayerPlanEntry;
const later = { isCandidateSource: false } as LayerPlanEntry;
const kernel = { heads: hI, dim: dI, round: true };

function ctxOf(): IndexerContext {
  return { config, graphs: null as never, observer: null, indexerKeyChunk: 65536, indexerBudgetValues: 1 << 22 };
}

/** Random packed index keys: MXFP4 codes, scales around 1 (no overflow). */
function randomKeys(rng: SeededRandom, rows: number): Uint8Array {
  const out = new Uint8Array(rows * R);
  for (let i = 0; i < rows; i++) {
    for (let j = 0; j < dI / 2; j++) out[i * R + j] = rng.nextU32() & 0xff;
    for (let b = 0; b < dI / 32; b++) out[i * R + dI / 2 + b] = 120 + (rng.nextU32() % 12);
  }
  return out;
}

/** MXFP4 query values (E2M1 times a power of two per 32), or, with `plain`, values that are not. */
function queries(rng: SeededRandom, rows: number, plain = false): { iq: Float32Array; iw: Float32Array } {
  const iq = new Float32Array(rows * hI * dI);
  for (let b = 0; b < iq.length / 32; b++) {
    const e = 2 ** ((rng.nextU32() % 7) - 3);
    for (let j = 0; j < 32; j++) iq[b * 32 + j] = (rng.nextU32() & 1 ? -1 : 1) * (E2M1[rng.nextU32() % 8] as number) * e;
  }
  if (plain) iq[3] = (iq[3] as number) + 0.01;
  const iw = Float32Array.from({ length: rows * hI }, () => Math.fround(((rng.nextU32() % 2000) - 1000) / 700));
  return { iq, iw };
}

function sourceCache(keys: Uint8Array): KvSourceCache {
  const src = new KvSourceCache(20, 2, config.headDim, dI);
  src.indexK.append(keys);
  return src;
}

function job(src: KvSourceCache, clen: Int32Array, q: { iq: Float32Array; iw: Float32Array }): IndexerJob {
  const nVis = Math.max(...clen);
  return { st: null as never, rows: clen.length, kk: Math.min(config.indexTopK, nVis), nVis, clen, src, iq: q.iq, iw: q.iw };
}

async function scorerWith(threads: ScanThreads | null): Promise<IndexScorer> {
  const session = await openGraphSession('index_scores', buildIndexScoresGraph({ config, weights: { get: () => new Float32Array(0) }, mode: 'bf16' }, false));
  return new IndexScorer(config, 'bf16', session, true, threads);
}

function sameResult(a: ScanResult, b: ScanResult, what: string): void {
  assert.ok(
    a.topk.some((v) => v >= 0),
    `${what}: something picked`,
  );
  assert.deepEqual(b.topk, a.topk, `${what}: top-k lists`);
  assert.deepEqual(b.candidates, a.candidates, `${what}: candidate blocks`);
}

test("scans over 1 and 3 scan threads: the main thread's lists bit for bit (decode row, causal rows, a shared prefix, the share at its bounds)", async () => {
  const rng = new SeededRandom(41);
  const N = 300_004;
  const src = sourceCache(randomKeys(rng, N));
  assert.ok(src.indexK.range(0, 8).buffer instanceof SharedArrayBuffer, 'sequences keep index keys in a SharedArrayBuffer');
  const decode = job(src, Int32Array.of(N), queries(rng, 1));
  const causal = job(
    src,
    Int32Array.from({ length: 40 }, (_, r) => Math.floor((N * (r + 1)) / 40)),
    queries(rng, 40),
  );
  // a document of 200,000 keys read in place by two forks with private tails of 1,000 and 3,004 keys
  const doc = sourceCache(randomKeys(rng, 200_000));
  doc.indexK.freeze();
  const forks = [1000, 3004].map((tail) => {
    const f = new KvSourceCache(20, 2, config.headDim, dI);
    f.indexK.shareFrom(doc.indexK);
    f.indexK.append(randomKeys(rng, tail));
    return job(
      f,
      Int32Array.from({ length: 3 }, (_, r) => 200_000 + tail - 2 + r),
      queries(rng, 3),
    );
  });

  const ctx = ctxOf();
  const alone = await scorerWith(null);
  const want = {
    decode: await scanSplit(ctx, alone, source, decode),
    causal: await scanSplit(ctx, alone, source, causal),
    causalLater: await scanSplit(ctx, alone, later, causal),
    shared: await scanSplitShared(ctx, alone, source, forks),
  };
  await alone.dispose();
  let decodeShared = 0;
  await withScripts(async (slowScript) => {
    for (const count of [1, 3]) {
      for (const slow of [false, true]) {
        const threads = new ScanThreads(count, { kernel, ...(slow ? { script: slowScript } : {}) });
        const scorer = await scorerWith(threads);
        await threads.ready();
        const slices = threadScanStats.threadSlices;
        const what = `${count} ${slow ? 'slow ' : ''}thread(s)`;
        sameResult(want.decode, await scanSplit(ctx, scorer, source, decode), `${what}, decode row`);
        const decodeSlices = threadScanStats.threadSlices - slices;
        sameResult(want.causal, await scanSplit(ctx, scorer, source, causal), `${what}, 40 causal rows`);
        sameResult(want.causalLater, await scanSplit(ctx, scorer, later, causal), `${what}, 40 causal rows, no blocks`);
        const shared = await scanSplitShared(ctx, scorer, source, forks);
        shared.forEach((r, i) => sameResult(want.shared[i] as ScanResult, r, `${what}, shared prefix, fork ${i}`));
        if (!slow) assert.ok(threadScanStats.threadSlices > slices, `${what}: the threads took slices`);
        decodeShared += decodeSlices;
        assert.ok(threads.stats.tasks >= 4 * count, `${what}: ${JSON.stringify(threads.stats)}`);
        assert.equal(threads.stats.failed, 0, what);
        assert.equal(threads.stats.declined, 0, what);
        await scorer.dispose();
        assert.equal(threads.usable, false, 'dispose retires the threads');
      }
    }
  });
  assert.ok(decodeShared > 0, "the decode row's scan was shared at least once");
});

/** Worker scripts for the tests: the real scan worker with each task held back 30 ms; one that takes two slices and throws. */
async function withScripts(fn: (slow: URL, failing: URL) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'scan-threads-'));
  try {
    const slow = join(dir, 'slow-worker.mjs');
    const real = new URL('./scan-worker.js', import.meta.url).href;
    // the real worker, its message listener wrapped in a 30 ms pause (messages wait in the port until a listener is on)
    writeFileSync(
      slow,
      `import { parentPort } from 'node:worker_threads';\nconst pause = new Int32Array(new SharedArrayBuffer(4));\nconst on = parentPort.on.bind(parentPort);\nparentPort.on = (event, fn) => on(event, event === 'message' ? (m) => { Atomics.wait(pause, 0, 0, 30); fn(m); } : fn);\nawait import(${JSON.stringify(real)});\n`,
    );
    const failing = join(dir, 'failing-worker.mjs');
    writeFileSync(
      failing,
      "import { parentPort } from 'node:worker_threads';\nparentPort.postMessage({ ready: true });\nparentPort.on('message', (m) => { Atomics.add(m.task.counter, 0, 1); Atomics.add(m.task.counter, 0, 1); throw new Error('boom'); });\n",
    );
    await fn(pathToFileURL(slow), pathToFileURL(failing));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('a part the threads decline (queries that are not MXFP4) or lose to a failing thread is scored on the main thread: the same lists', async () => {
  const rng = new SeededRandom(7);
  const N = 300_000; // ≥ THREAD_MIN_SCORES for one row
  const src = sourceCache(randomKeys(rng, N));
  const ctx = ctxOf();
  const fp32ish = job(src, Int32Array.of(N), queries(rng, 1, true));
  const mx = job(src, Int32Array.of(N - 3, N), queries(rng, 2));
  const wide = job(
    src,
    Int32Array.from({ length: 40 }, (_, r) => N - 39 + r),
    queries(rng, 40),
  );
  const alone = await scorerWith(null);
  const want = [await scanSplit(ctx, alone, source, fp32ish), await scanSplit(ctx, alone, source, mx), await scanSplit(ctx, alone, source, wide)];
  await alone.dispose();

  // declined: the thread's kernel refuses the queries and takes no slice (the main thread scores them all, on its Gemm path)
  const threads = new ScanThreads(1, { kernel });
  const scorer = await scorerWith(threads);
  const slices = threadScanStats.threadSlices;
  sameResult(want[0] as ScanResult, await scanSplit(ctx, scorer, source, fp32ish), 'declined');
  assert.ok(threads.stats.declined > 0 && threadScanStats.threadSlices === slices, `the thread declined and took nothing: ${JSON.stringify(threads.stats)}`);
  sameResult(want[1] as ScanResult, await scanSplit(ctx, scorer, source, mx), 'MXFP4 after it');
  assert.ok(threads.stats.tasks > 0, 'the MXFP4 scan was shared with the thread');
  await scorer.dispose();

  // threads that take two slices each and die: those slices are scored on the main thread; later scans run there alone
  await withScripts(async (_slow, failingScript) => {
    const failing = new ScanThreads(2, { script: failingScript });
    const s2 = await scorerWith(failing);
    await failing.ready(); // online before the scan: they take their slices while the main thread scores its first
    const back = threadScanStats.takenBack;
    sameResult(want[2] as ScanResult, await scanSplit(ctx, s2, source, wide), 'failing threads');
    assert.ok(threadScanStats.takenBack >= back + 2, `the slices the failed threads took were scored again (${threadScanStats.takenBack - back})`);
    assert.ok(failing.failed !== null && /boom|exited/.test(failing.failed.message), String(failing.failed));
    assert.equal(failing.usable, false);
    assert.ok(failing.stats.failed >= 1, JSON.stringify(failing.stats));
    sameResult(want[1] as ScanResult, await scanSplit(ctx, s2, source, mx), 'after the failure');
    await s2.dispose();
  });
});

test("resolveScanThreads and the main thread's share", () => {
  assert.equal(resolveScanThreads('auto', 2), 1);
  assert.equal(resolveScanThreads('auto', 1), 0);
  assert.equal(resolveScanThreads('auto', 16), MAX_AUTO_SCAN_THREADS);
  assert.equal(resolveScanThreads(0, 16), 0);
  assert.equal(resolveScanThreads(5, 2), 5);
  for (const bad of [-1, 1.5, 65, Number.NaN]) assert.throws(() => resolveScanThreads(bad), /scan threads must be 'auto' or an integer from 0 to 64/);
  // keysIn: views of a range of positions across pieces
  const R4 = 4;
  const pieces = [
    { k0: 16, keys: Uint8Array.from({ length: 8 * R4 }, (_, i) => i) },
    { k0: 24, keys: Uint8Array.from({ length: 4 * R4 }, (_, i) => 100 + i) },
  ];
  const got = keysIn(pieces, R4, 20, 26);
  assert.deepEqual(
    got.map((p) => [p.k0, p.keys.length / R4, p.keys[0]]),
    [
      [20, 4, 16],
      [24, 2, 100],
    ],
  );
  assert.deepEqual(keysIn(pieces, R4, 0, 16), []);
  assert.throws(() => new ScanThreads(-1), /ScanThreads: -1 threads/);
});
