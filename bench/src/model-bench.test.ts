/**
 * Smoke test of the model suite: runs it in-process on tiny-a at one small context (a few seconds) and
 * checks that every figure is finite and positive, that the figures agree with each other, and that the
 * printed table has the expected columns. Also the option parsing and context capping.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { BenchIo } from './suite.js';
import { UsageError } from './suite.js';
import {
  DEFAULT_MODEL_BENCH_OPTIONS,
  modelTableColumns,
  parseModelBenchOptions,
  renderModelBench,
  resolveContexts,
  runModelBench,
  type PhaseResult,
} from './model-bench.js';

const SMOKE_TIMEOUT_MS = 60_000;

function assertPhase(p: PhaseResult | null, label: string): void {
  assert.ok(p !== null, `${label} ran`);
  for (const [k, v] of Object.entries(p)) {
    if (typeof v === 'number') assert.ok(Number.isFinite(v) && v > 0, `${label}.${k} = ${v} is finite and positive`);
  }
  assert.ok(Math.abs(p.tokensPerS - (p.tokens * 1000) / p.ms) < 1e-9 * p.tokensPerS, `${label} tok/s = tokens / time`);
  assert.ok(Math.abs(p.gflops - p.flops / (p.ms * 1e6)) < 1e-9 * p.gflops, `${label} GFLOP/s = FLOPs / time`);
}

describe('model bench (tiny-a smoke run)', () => {
  it('measures exact prefill, encode, CED and decode at 32 tokens and prints the table', { timeout: SMOKE_TIMEOUT_MS }, async () => {
    const lines: string[] = [];
    const io: BenchIo = { out: (t) => lines.push(t), log: (l) => lines.push(l) };
    const t0 = performance.now();
    const result = await runModelBench(
      {
        ...DEFAULT_MODEL_BENCH_OPTIONS,
        models: ['tiny'],
        contexts: [32],
        decodeSteps: 3,
        ceilingShapes: [
          { m: 1, k: 256, n: 256 },
          { m: 32, k: 256, n: 256 },
        ],
        ceilingBudgetMsPerShape: 30,
        repeatUntilMs: 500,
        maxRepeats: 2,
      },
      io,
    );
    const elapsedMs = performance.now() - t0;
    assert.ok(elapsedMs < 10_000, `smoke run took ${elapsedMs.toFixed(0)} ms (limit 10 s)`);

    assert.equal(result.ceiling.shapes.length, 2);
    for (const s of result.ceiling.shapes) assert.ok(Number.isFinite(s.gflops) && s.gflops > 0, `ceiling M=${s.m}: ${s.gflops}`);
    assert.equal(result.ceiling.best.gflops, Math.max(...result.ceiling.shapes.map((s) => s.gflops)));

    assert.equal(result.models.length, 1);
    const m = result.models[0]!;
    assert.equal(m.name, 'deepseek-v41-tiny-a');
    assert.equal(m.numLayers, 6);
    assert.equal(m.decoderStart, 3);
    assert.ok(m.loadMs > 0 && m.parameterCount > 0 && m.threads >= 1);
    assert.equal(m.rows.length, 1);
    const r = m.rows[0]!;
    assert.equal(r.context, 32);
    assert.equal(r.capped, false);
    assert.ok(r.runs >= 1 && r.runs <= 2, `runs ${r.runs}`);
    assertPhase(r.exact, 'exact');
    assertPhase(r.encode, 'encode');
    assertPhase(r.replay, 'replay');
    assertPhase(r.ced, 'ced');
    assertPhase(r.decode, 'decode');
    assert.equal(r.decode.stepMs.length, 3);
    assert.ok(r.decode.p50Ms > 0 && Number.isFinite(r.decode.p50Ms));
    // the encoder is layers 0..2 of 6 (+ one compressor): less work than the exact prefill
    assert.ok(r.encode!.flops < r.exact.flops, 'encode FLOPs < exact FLOPs');
    assert.ok(Math.abs(r.encodeSpeedup! - r.encode!.tokensPerS / r.exact.tokensPerS) < 1e-12);
    assert.ok(Math.abs(r.exact.ceilingFraction - r.exact.gflops / result.ceiling.best.gflops) < 1e-12);
    assert.ok(r.peakRssBytes > 0);

    const text = renderModelBench(result);
    const header = text.split('\n').find((l) => l.startsWith('| context'));
    assert.ok(header !== undefined, `a model table in:\n${text}`);
    const cells = header
      .split('|')
      .slice(1, -1)
      .map((c) => c.trim());
    assert.deepEqual(
      cells,
      modelTableColumns(128).map((c) => c.header),
    );
    const row = text.split('\n').find((l) => l.startsWith('| 32 '));
    assert.ok(row !== undefined, `a row for context 32 in:\n${text}`);
    assert.equal(row.split('|').length, header.split('|').length);
    assert.match(text, /matmul ceiling/);
    assert.match(text, /onnxruntime-node \d+\.\d+/);
  });
});

describe('model bench options', () => {
  it('caps contexts at max_seq_len − decode steps and drops duplicates', () => {
    assert.deepEqual(resolveContexts([1024, 4096, 16384], 240), [{ requested: 1024, context: 240, capped: true }]);
    assert.deepEqual(resolveContexts([48, 128, 240], 240), [
      { requested: 48, context: 48, capped: false },
      { requested: 128, context: 128, capped: false },
      { requested: 240, context: 240, capped: false },
    ]);
  });

  it('parses the command line', () => {
    const o = parseModelBenchOptions({ models: '1024', contexts: '1K,4096', 'decode-steps': '8', threads: '2', spin: 'off', 'graph-opt': 'all' });
    assert.deepEqual(o.models, ['1024']);
    assert.deepEqual(o.contexts, [1024, 4096]);
    assert.equal(o.decodeSteps, 8);
    assert.equal(o.threads, 2);
    assert.equal(o.allowSpinning, false);
    assert.equal(o.graphOptimization, 'all');
    const quick = parseModelBenchOptions({ quick: true });
    assert.deepEqual(quick.models, ['tiny', '1024']);
    assert.deepEqual(quick.contexts, [1024]);
    assert.equal(parseModelBenchOptions({}).contexts, null);
    assert.equal(parseModelBenchOptions({}).threads, 'auto');
  });

  it('rejects bad values with a usage error', () => {
    assert.throws(() => parseModelBenchOptions({ models: 'tiny,huge' }), UsageError);
    assert.throws(() => parseModelBenchOptions({ contexts: '1024,0' }), UsageError);
    assert.throws(() => parseModelBenchOptions({ threads: 'two' }), UsageError);
    assert.throws(() => parseModelBenchOptions({ 'graph-opt': 'max' }), UsageError);
  });
});
