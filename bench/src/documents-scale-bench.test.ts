/**
 * The documents-scale suite: its figures and goals computed from hand-made reports (each goal met and
 * missed), its option parsing, and a smoke run at two small sizes (a real ingest with its synthetic
 * twin, and a synthetic document) that checks every figure of the result and the printed tables.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import type { DecoderRunReport, StepTimes } from './documents-scale-decoder.js';
import {
  DEFAULT_SCALE_OPTIONS,
  evaluateGoals,
  parseScaleBenchOptions,
  renderScaleBench,
  runScaleBench,
  stepFigures,
  type ScaleDocument,
  type ScaleResult,
} from './documents-scale-bench.js';
import type { BenchIo } from './suite.js';

const COUNTS = { full: 4, reindex: 4, reuse: 30, swa: 2 } as const;
const MIB = 1024 * 1024;
const SMOKE_TIMEOUT_MS = 180_000;

function step(reindexMs: number, wallMs = 100): StepTimes {
  return { wallMs, byKindMs: { full: 40, reindex: reindexMs, reuse: 30, swa: 2 }, headMs: 1 };
}

function report(o: { warm?: number; peak?: number; fetched?: number; cached?: number; reindexMs?: number }): DecoderRunReport {
  return {
    documentTokens: 1,
    warmUpMs: 1,
    warmRssBytes: o.warm ?? 200 * MIB,
    peakRssBytes: o.peak ?? 300 * MIB,
    ttftFetchedMs: o.fetched ?? 1000,
    ttftWarmMs: o.cached ?? 900,
    sameFirstToken: true,
    cachedTokens: 1,
    loadMs: 50,
    loadedBytes: 10 * MIB,
    steps: [step(o.reindexMs ?? 8), step(o.reindexMs ?? 8, 120), step(o.reindexMs ?? 8, 110)],
    layerCounts: COUNTS,
  };
}

const doc = (tokens: number, artifactBytes: number, source: ScaleDocument['source'] = 'synthetic'): ScaleDocument => ({
  documentId: `${source}-${tokens}`,
  tokens,
  requestedTokens: tokens,
  source,
  makeMs: 1000,
  writeMs: 500,
  artifactBytes,
  globalBytesPerToken: 132.5,
});

function result(runs: { d4k: DecoderRunReport[]; d8k: DecoderRunReport[]; big: DecoderRunReport[] }, bigBytes = 100 * MIB): ScaleResult {
  const documents = [doc(4096, MIB, 'ingest'), doc(8192, 2 * MIB, 'ingest'), doc(1 << 20, bigBytes)];
  return {
    machine: { cpuModel: 'cpu', cores: 2, totalMemoryBytes: 1, nodeVersion: 'v20', onnxruntimeVersion: '1', platform: 'linux', loadAverage1m: 0 },
    options: { ...DEFAULT_SCALE_OPTIONS, repeats: runs.big.length },
    documents,
    runs: { 'ingest-4096': runs.d4k, 'ingest-8192': runs.d8k, [`synthetic-${1 << 20}`]: runs.big },
  };
}

describe('documents-scale figures', () => {
  it('a step: the median wall time, the mean per kind, per layer, and what the timer did not see', () => {
    const f = stepFigures(report({ reindexMs: 8 }));
    assert.equal(f.stepMs, 110);
    assert.deepEqual(f.kindMs, { full: 40, reindex: 8, reuse: 30, swa: 2 });
    assert.deepEqual(f.perLayerMs, { full: 10, reindex: 2, reuse: 1, swa: 1 });
    assert.equal(f.headMs, 1);
    assert.ok(Math.abs(f.untimedMs - (110 - 81)) < 1e-9, `untimed ${f.untimedMs}`);
  });

  it('goals met: RSS within model + 1.2 × artifact, TTFT within 8K + artifact at 1 GB/s, Reindex flat', () => {
    const goals = evaluateGoals(
      result({
        d4k: [report({ reindexMs: 8 })],
        d8k: [report({ fetched: 1000 })],
        big: [report({ warm: 200 * MIB, peak: 300 * MIB, fetched: 1100, reindexMs: 8.7 })],
      }),
    );
    assert.deepEqual(
      goals.map((g) => g.met),
      [true, true, true],
      goals.map((g) => g.figure).join('\n'),
    );
    assert.match(goals[0]?.figure ?? '', /1 of 1 rounds/);
  });

  it('goals missed: each figure over its bound, in every round', () => {
    const goals = evaluateGoals(
      result({
        d4k: [report({ reindexMs: 8 }), report({ reindexMs: 8 })],
        d8k: [report({ fetched: 1000 }), report({ fetched: 1000 })],
        // 100 MiB artifact: RSS bound 200 + 120 MiB; TTFT bound 1000 + 104.9 ms; Reindex bound 8.8 ms
        big: [report({ peak: 321 * MIB, fetched: 1106, reindexMs: 8.9 }), report({ peak: 400 * MIB, fetched: 2000, reindexMs: 16 })],
      }),
    );
    assert.deepEqual(
      goals.map((g) => g.met),
      [false, false, false],
    );
    for (const g of goals) assert.match(g.figure, /0 of 2 rounds/);
  });

  it('a goal whose sizes did not run is "not measured"', () => {
    const r = result({ d4k: [], d8k: [], big: [report({})] });
    const goals = evaluateGoals({ ...r, runs: { [`synthetic-${1 << 20}`]: [report({})] } });
    assert.deepEqual(
      goals.map((g) => g.met),
      [true, null, null],
    );
    assert.match(renderScaleBench(r), /not measured/);
  });
});

describe('documents-scale options', () => {
  it('sizes with K and M, defaults, --quick, refusals', () => {
    const o = parseScaleBenchOptions({ 'scale-tokens': '8K,1M,5000', 'scale-real-max': '16k', 'scale-repeats': '2' });
    assert.deepEqual(o.sizes, [8192, 1 << 20, 5000]);
    assert.equal(o.realMaxTokens, 16384);
    assert.equal(o.repeats, 2);
    assert.equal(o.decodeSteps, DEFAULT_SCALE_OPTIONS.decodeSteps);
    assert.deepEqual(parseScaleBenchOptions({}).sizes, [4096, 8192, 32768, 131072, 524288, 1048576]);
    const q = parseScaleBenchOptions({ quick: true });
    assert.deepEqual([q.sizes, q.realMaxTokens, q.repeats, q.decodeSteps], [[4096, 8192, 65536], 4096, 1, 4]);
    assert.throws(() => parseScaleBenchOptions({ 'scale-tokens': '8K,x' }), /--scale-tokens/);
    assert.throws(() => parseScaleBenchOptions({ 'scale-real-max': '1K,2K' }), /one token count/);
    assert.throws(() => parseScaleBenchOptions({ 'scale-repeats': '0' }), /positive integer/);
    assert.equal(parseScaleBenchOptions({}).scanThreads, 'auto');
    assert.equal(parseScaleBenchOptions({ 'scale-scan-threads': '0' }).scanThreads, 0);
    assert.equal(parseScaleBenchOptions({ 'scale-scan-threads': '3' }).scanThreads, 3);
    for (const bad of ['-1', '65', 'x', '1.5'])
      assert.throws(() => parseScaleBenchOptions({ 'scale-scan-threads': bad }), /--scale-scan-threads takes 'auto' or an integer from 0 to 64/);
  });
});

describe('documents-scale bench (40-layer tiny smoke run)', () => {
  it('ingests 256 tokens, writes its synthetic twin and a 1,024-token synthetic artifact, runs a decoder process on each and prints the tables', {
    timeout: SMOKE_TIMEOUT_MS,
  }, async () => {
    const cacheRoot = await mkdtemp(join(tmpdir(), 'csa2-scale-smoke-'));
    const lines: string[] = [];
    const io: BenchIo = { out: (t) => lines.push(t), log: (l) => lines.push(l) };
    try {
      const r = await runScaleBench(
        { ...DEFAULT_SCALE_OPTIONS, sizes: [256, 1024], realMaxTokens: 256, repeats: 1, decodeSteps: 2, questionTokens: 8, cacheRoot },
        io,
      );
      assert.deepEqual(
        r.documents.map((d) => [d.tokens, d.source]),
        [
          [256, 'ingest'],
          [256, 'synthetic'],
          [1024, 'synthetic'],
        ],
      );
      const [real, twin] = r.documents;
      assert.ok(real !== undefined && twin !== undefined);
      assert.ok(
        Math.abs(real.artifactBytes - twin.artifactBytes) < 64,
        `an ingested document and its synthetic twin take the same chunk bytes (${real.artifactBytes} vs ${twin.artifactBytes}; the manifests differ by their ids)`,
      );
      for (const d of r.documents) {
        assert.equal(d.globalBytesPerToken, 132.5, 'v41-tiny-40l: 3 ratio-2 sources and 1 ratio-1 source of 53 B per entry');
        const runs = r.runs[d.documentId] ?? [];
        assert.equal(runs.length, 1);
        const run = runs[0] as DecoderRunReport;
        assert.equal(run.documentTokens, d.tokens);
        assert.equal(run.cachedTokens, d.tokens);
        assert.ok(run.sameFirstToken, 'the cached question answers as the fetched one');
        assert.equal(run.steps.length, 2);
        assert.deepEqual(run.layerCounts, COUNTS);
        assert.ok(run.peakRssBytes >= run.warmRssBytes && run.warmRssBytes > 0);
        assert.ok(run.ttftFetchedMs > 0 && run.ttftWarmMs > 0 && run.loadMs > 0);
        assert.ok(
          Math.abs(run.loadedBytes - d.artifactBytes) < 1024,
          `the load read the artifact's chunks (${run.loadedBytes} of ${d.artifactBytes} bytes with the manifest)`,
        );
        for (const s of run.steps) {
          for (const k of ['full', 'reindex', 'reuse', 'swa'] as const) assert.ok(s.byKindMs[k] > 0, `${d.documentId}: ${k} timed`);
          assert.ok(s.wallMs >= s.byKindMs.full + s.byKindMs.reindex + s.byKindMs.reuse + s.byKindMs.swa, 'the layers run within the step');
        }
      }
      const table = renderScaleBench(r);
      assert.match(table, /\| 256 \(synthetic\) +\|/);
      assert.match(table, /Full ×4 .*Reindex ×4 .*Reuse ×30 .*window-only ×2/);
      assert.match(table, /Reindex-layer step cost at 1K ≤ 1\.1 × its cost at 4K +\| not measured/);
    } finally {
      await rm(cacheRoot, { recursive: true, force: true });
    }
  });
});
