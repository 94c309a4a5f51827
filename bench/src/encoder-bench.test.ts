/**
 * The encoder bench's command line and table (the CPU run itself is the suite's smoke test below; the
 * CUDA run needs a GPU).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseEncoderBenchOptions, renderEncoderProfiles, renderEncoderTable, runEncoderBench } from './encoder-bench.js';
import { checkCudaProviderInstalled } from '@csa2/core';
import { UsageError } from './suite.js';

test('defaults: both models, 8K/32K/128K, the CPU only; lists and limits parsed, bad values refused by name', () => {
  const d = parseEncoderBenchOptions({});
  assert.deepEqual(d.models, ['1024', 'served']);
  assert.deepEqual(d.providers, ['cpu']);
  assert.deepEqual(d.lengths, [8192, 32768, 131072]);
  assert.equal(d.cpuMaxTokens, Infinity);
  const o = parseEncoderBenchOptions({
    provider: 'cpu,cuda',
    'encoder-lengths': '8K,1M',
    'encoder-cpu-max': '8K',
    'encoder-threads': '16',
    'encoder-models': 'served',
  });
  assert.deepEqual(o.providers, ['cpu', 'cuda']);
  assert.deepEqual(o.lengths, [8192, 1048576]);
  assert.equal(o.cpuMaxTokens, 8192);
  assert.equal(o.cpuThreads, 16);
  assert.throws(
    () => parseEncoderBenchOptions({ provider: 'tpu' }),
    (e: Error) => e instanceof UsageError && /--provider/.test(e.message),
  );
  assert.throws(
    () => parseEncoderBenchOptions({ 'encoder-models': '2048' }),
    (e: Error) => e instanceof UsageError && /--encoder-models/.test(e.message),
  );
  assert.throws(() => parseEncoderBenchOptions({ 'encoder-threads': '0' }), UsageError);
  assert.equal(d.paths, 'auto');
  assert.deepEqual(parseEncoderBenchOptions({ 'encoder-paths': 'graph,layers' }).paths, ['graph', 'layers']);
  assert.throws(
    () => parseEncoderBenchOptions({ 'encoder-paths': 'fused' }),
    (e: Error) => e instanceof UsageError && /--encoder-paths/.test(e.message),
  );
  assert.equal(d.encoderRows, 'auto');
  assert.deepEqual(parseEncoderBenchOptions({ 'encoder-rows': '4K,8192' }).encoderRows, [4096, 8192]);
  assert.throws(
    () => parseEncoderBenchOptions({ 'encoder-rows': '8' }),
    (e: Error) => e instanceof UsageError && /--encoder-rows/.test(e.message),
  );
});

test('a quick CPU run of the served model through both encoder paths: a row each with tokens/s, the share of the matmul rate and the graph traffic', async () => {
  const logs: string[] = [];
  const opts = { ...parseEncoderBenchOptions({ quick: true, 'encoder-threads': '1', 'encoder-paths': 'layers,graph' }), lengths: [1024] };
  const { rows, ceilings } = await runEncoderBench(opts, { out: () => undefined, log: (l) => logs.push(l) });
  assert.deepEqual(
    rows.map((r) => [r.provider, r.path, r.tokens]),
    [
      ['cpu', 'layers', 1024],
      ['cpu', 'graph', 1024],
    ],
  );
  for (const r of rows) assert.ok(r.tokensPerSecond > 0 && r.flops > 0 && r.ofCeiling > 0 && r.ofCeiling < 1, JSON.stringify(r));
  // the graph encoder moves packed rows, window rows and the kept stream, not per-layer activations
  const [layers, graph] = rows as [(typeof rows)[number], (typeof rows)[number]];
  assert.ok(graph.ioBytesPerToken < layers.ioBytesPerToken / 4, `graph I/O ${graph.ioBytesPerToken} B/token, layers ${layers.ioBytesPerToken}`);
  assert.ok(graph.graphRuns < layers.graphRuns, `graph runs ${graph.graphRuns}, layers ${layers.graphRuns}`);
  const table = renderEncoderTable(rows, ceilings);
  assert.match(table, /\| v41-mini-128k \(served\) \| cpu +\| graph/);
  assert.match(table, /Matmul rates measured in this run: cpu: /);
});

test('--encoder-profile: each engine run reports its onnxruntime operator times, the runs beside the summed node time', async () => {
  assert.equal(parseEncoderBenchOptions({}).profile, false);
  const opts = { ...parseEncoderBenchOptions({ quick: true, 'encoder-threads': '1', 'encoder-paths': 'graph', 'encoder-profile': true }), lengths: [512] };
  assert.equal(opts.profile, true);
  const { rows, profiles } = await runEncoderBench(opts, { out: () => undefined, log: () => undefined });
  assert.equal(rows.length, 1);
  assert.equal(profiles.length, 1);
  const s = (profiles[0] as (typeof profiles)[number]).summary;
  assert.ok(s.runs > (rows[0] as (typeof rows)[number]).graphRuns, `${s.runs} profiled runs (warm-up included)`);
  assert.ok(s.nodeMs > 0 && s.nodeMs <= s.runMs, `node time ${s.nodeMs} ms within the runs' ${s.runMs} ms`);
  assert.ok(s.ops.some((o) => o.op === 'MatMul' && o.provider === 'CPUExecutionProvider' && o.executions > 0));
  const text = renderEncoderProfiles(profiles);
  assert.match(text, /v41-mini-128k \(served\) cpu graph 256 rows: \d+ runs/);
  assert.match(text, /\| MatMul +\| CPUExecutionProvider/);
  assert.match(text, /sessions with the most run time: [a-z_]+\S* \d+ runs/);
});

test('a provider that cannot open is a reported failure, and the other providers still run', async (t) => {
  let cudaInstalled = true;
  try {
    checkCudaProviderInstalled();
  } catch {
    cudaInstalled = false;
  }
  t.diagnostic(`CUDA provider installed here: ${cudaInstalled}`);
  const logs: string[] = [];
  const opts = { ...parseEncoderBenchOptions({ quick: true, provider: 'cpu,cuda', 'encoder-threads': '1' }), lengths: [256] };
  const { rows, failures } = await runEncoderBench(opts, { out: () => undefined, log: (l) => logs.push(l) });
  if (cudaInstalled) {
    // a GPU machine: both providers ingest
    assert.deepEqual(rows.map((r) => [r.provider, r.tokens]).sort(), [
      ['cpu', 256],
      ['cuda', 256],
    ]);
    assert.deepEqual(failures, []);
    return;
  }
  // without the provider (CI): the CUDA runs fail at the matmul rate, named, and the CPU's row is there
  assert.deepEqual(
    rows.map((r) => [r.provider, r.tokens]),
    [['cpu', 256]],
  );
  assert.equal(failures.length, 1);
  assert.match((failures[0] as (typeof failures)[number]).error, /CUDA execution provider is not installed/);
  assert.ok(logs.some((l) => /cuda: FAILED: .*CUDA/.test(l)));
});
