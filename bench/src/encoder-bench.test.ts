/**
 * The encoder bench's command line and table (the CPU run itself is the suite's smoke test below; the
 * CUDA run needs a GPU).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseEncoderBenchOptions, renderEncoderTable, runEncoderBench } from './encoder-bench.js';
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
});

test('a quick CPU run of the served model prints a row with tokens/s and the share of the matmul rate', async () => {
  const logs: string[] = [];
  const opts = { ...parseEncoderBenchOptions({ quick: true, 'encoder-threads': '1' }), lengths: [256] };
  const { rows, ceilings } = await runEncoderBench(opts, { out: () => undefined, log: (l) => logs.push(l) });
  assert.equal(rows.length, 1);
  const r = rows[0] as (typeof rows)[number];
  assert.equal(r.provider, 'cpu');
  assert.equal(r.tokens, 256);
  assert.ok(r.tokensPerSecond > 0 && r.flops > 0 && r.ofCeiling > 0 && r.ofCeiling < 1, JSON.stringify(r));
  const table = renderEncoderTable(rows, ceilings);
  assert.match(table, /\| v41-mini-128k \(served\) \| cpu/);
  assert.match(table, /Matmul rates measured in this run: cpu: /);
});
