/** The csa2 CLI as a user runs it: bad input gives one clear line and a non-zero exit, never a stack. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fixturesRoot } from '@csa2/core/testing';

const BIN = fileURLToPath(new URL('../../bin/csa2.js', import.meta.url));
const TINY = join(fixturesRoot(), 'deepseek-v41-tiny-a');
const csa2 = (...args: string[]) => spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8' });

function assertUserError(r: ReturnType<typeof csa2>, pattern: RegExp): void {
  assert.notEqual(r.status, 0, `expected a non-zero exit, stdout: ${r.stdout}`);
  assert.match(r.stderr, pattern);
  assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace for a user error');
}

test('generate refuses bad input with a clear message', () => {
  assertUserError(
    csa2('generate', '--model', TINY, '--prompt-ids', '1,999', '--max-tokens', '2'),
    /token id 999 at index 1 is outside the vocabulary \[0, 256\)/,
  );
  assertUserError(csa2('generate', '--model', TINY, '--prompt', '', '--max-tokens', '2'), /prompt is empty/);
  assertUserError(csa2('generate', '--model', TINY, '--prompt-ids', Array(300).fill('5').join(','), '--max-tokens', '2'), /exceed max_seq_len 256/);
  assertUserError(csa2('generate', '--model', TINY, '--prompt-ids', '1,2', '--max-tokens', '0'), /max tokens must be a positive integer/);
  assertUserError(csa2('generate', '--model', TINY, '--prompt-ids', '1,x', '--max-tokens', '2'), /item 1 \("x"\) is not an integer id/);
  assertUserError(csa2('generate', '--model', TINY, '--prompt', 'a', '--prompt-ids', '1', '--max-tokens', '2'), /exactly one of --prompt and --prompt-ids/);
  assertUserError(csa2('generate', '--model', '/nonexistent-model-dir', '--prompt', 'a', '--max-tokens', '2'), /config\.json/);
});

test('a malformed config or checkpoint is refused naming what is wrong', () => {
  const dir = mkdtempSync(join(tmpdir(), 'csa2-cli-'));
  const bad = join(dir, 'bad');
  mkdirSync(bad);
  writeFileSync(join(bad, 'config.json'), '{"dim": "x"}');
  assertUserError(csa2('inspect', '--model', bad), /dim/);
  const missing = join(dir, 'missing');
  mkdirSync(missing);
  writeFileSync(
    join(missing, 'config.json'),
    JSON.stringify({
      vocab_size: 256,
      dim: 64,
      n_layers: 1,
      compress_ratios: [0],
      kv_source_layers: [],
      index_source_layers: [],
      dtype: 'bf16',
      expert_dtype: null,
    }),
  );
  assertUserError(csa2('generate', '--model', missing, '--prompt-ids', '1', '--max-tokens', '1'), /model\.safetensors/);
});

test('inspect prints the layer plan and 890 bytes per token for the released config', () => {
  const r = csa2('inspect', '--config', join(fixturesRoot(), 'deepseek-v41-flash/config.json'));
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /global-cache bytes per token: 890\n/);
  assert.match(r.stdout, /\s20\s+full\s+1\s+20\s+20\s+source/);
  assert.match(r.stdout, /\nnot runnable here:\n {2}engram_layer_ids = \[1, 14\]: /);
  // the values quoted are the config's own, not the runnable ones
  assert.match(r.stdout, /\n {2}dtype = "fp8": fp8 weights are not supported; only bf16\/fp32 weights are runnable for now; use "bf16"\n/);
  assert.match(r.stdout, /\n {2}expert_dtype = "fp4": fp4 experts are not supported; .*; use null\n/);
});

test('every command has --help (exit 0, its options listed); csa2 --version and <command> --version print the version', async () => {
  const { version } = (await import('./main.js')) as { version: () => string };
  assert.match(version(), /^\d+\.\d+\.\d+/);
  for (const args of [['--version'], ['-V'], ['version'], ['inspect', '--version']]) {
    const r = csa2(...args);
    assert.equal(r.status, 0, args.join(' '));
    assert.equal(r.stdout, `csa2 ${version()}\n`);
  }
  const flags: Record<string, string[]> = {
    generate: [
      '--model DIR',
      '--max-tokens N',
      '--top-k',
      '--min-p',
      '--repetition-penalty',
      '--presence-penalty',
      '--frequency-penalty',
      '--logit-bias',
      '--seed S',
      '--exact',
      '--store URL',
    ],
    ingest: ['--model DIR', '--store URL', '--text-file F', '--doc-id ID', '--chunk-tokens C'],
    inspect: ['--model DIR', '--config FILE'],
    'init-model': ['--config FILE', '--seed S', '--out DIR', '--force', '--drop-unsupported'],
  };
  for (const [command, expected] of Object.entries(flags)) {
    for (const h of ['--help', '-h']) {
      const r = csa2(command, h);
      assert.equal(r.status, 0, `${command} ${h}: ${r.stderr}`);
      assert.match(r.stdout, new RegExp(`^csa2 ${command}: `));
      assert.match(r.stdout, new RegExp(`usage: csa2 ${command} `));
      for (const flag of expected) assert.ok(r.stdout.includes(flag), `${command} --help lists ${flag}`);
    }
    assert.equal(csa2('help', command).stdout, csa2(command, '--help').stdout);
  }
  const top = csa2('--help');
  assert.equal(top.status, 0);
  for (const command of Object.keys(flags)) assert.match(top.stdout, new RegExp(`^  ${command} `, 'm'));
  const unknown = csa2('generate', '--bogus');
  assert.equal(unknown.status, 2);
  assert.match(unknown.stderr, /Unknown option '--bogus'[\s\S]*usage: csa2 generate [\s\S]*csa2 generate --help/);
  assert.equal(csa2('nope').status, 2);
});

test('init-model refuses a config that cannot run, naming each field with its value and what would run', () => {
  const dir = mkdtempSync(join(tmpdir(), 'csa2-cli-init-'));
  const out = join(dir, 'released');
  const r = csa2('init-model', '--config', join(fixturesRoot(), 'deepseek-v41-flash/config.json'), '--seed', '1', '--out', out);
  assertUserError(r, /turns on what csa2-serve cannot run/);
  for (const line of [
    'engram_layer_ids = [1, 14]: Engram is not supported by csa2-serve; use []',
    'vision_n_layers = 32: the vision tower is not supported by csa2-serve; use 0',
    'dspark_block_size = 5: the DSpark/MTP head (with n_mtp_layers = 3) is not supported by csa2-serve; use 0',
    'dtype = "fp8": fp8 weights are not supported; only bf16/fp32 weights are runnable for now; use "bf16"',
    'expert_dtype = "fp4": fp4 experts are not supported; only bf16/fp32 weights are runnable for now; use null',
  ]) {
    assert.ok(r.stderr.includes(`\n  ${line}\n`), `names ${line}`);
  }
  assert.match(r.stderr, /--drop-unsupported/);
  assert.equal(existsSync(out), false, 'nothing written');
});

test('init-model estimates the size first and refuses more than 4 GB without --force (the released config: 1.1 TB)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'csa2-cli-init-'));
  const out = join(dir, 'released');
  const r = csa2('init-model', '--config', join(fixturesRoot(), 'deepseek-v41-flash/config.json'), '--seed', '1', '--out', out, '--drop-unsupported');
  assertUserError(r, /this checkpoint would be about 1\.1 TB \(551,566,165,104 parameters in 46958 tensors\); pass --force to write more than 4\.0 GB/);
  assert.equal(existsSync(out), false, 'nothing written');
  // with --force it still will not write more than the disk holds
  const forced = csa2(
    'init-model',
    '--config',
    join(fixturesRoot(), 'deepseek-v41-flash/config.json'),
    '--seed',
    '1',
    '--out',
    out,
    '--drop-unsupported',
    '--force',
  );
  assertUserError(forced, /this checkpoint would be about 1\.1 TB .*, but only [\d.]+ [kMGT]?B are free where/);
  assert.equal(existsSync(out), false);
});

test('init-model of a runnable config says what it writes, and the size estimate is close', () => {
  const dir = mkdtempSync(join(tmpdir(), 'csa2-cli-init-'));
  const out = join(dir, 'tiny');
  const r = csa2('init-model', '--config', join(fixturesRoot(), 'deepseek-v41-tiny-a/config.json'), '--seed', '3', '--out', out);
  assert.equal(r.status, 0, r.stderr);
  const m = /csa2: writing about ([\d.]+) kB \(([\d,]+) parameters in (\d+) tensors\) to /.exec(r.stderr);
  assert.ok(m !== null, r.stderr);
  const bytes = statSync(join(out, 'model.safetensors')).size;
  assert.ok(Math.abs(Number(m[1]) * 1000 - bytes) / bytes < 0.05, `estimate ${m[1]} kB vs ${bytes} bytes`);
  assert.match(r.stdout, new RegExp(`^wrote ${out}/model.safetensors \\(${m[2]} parameters, [\\d,]+ bytes\\)`));
});

test('progress: a bar on a terminal (redrawn, ends with a newline), nothing elsewhere; initModel reports bytes written', async () => {
  const { progressBar, formatBytes } = (await import('./main.js')) as typeof import('./main.js');
  const written: string[] = [];
  const tty = { isTTY: true, write: (s: string) => void written.push(s) };
  const bar = progressBar('csa2: writing weights', (done, total) => `${formatBytes(done)} / ${formatBytes(total)}`, tty);
  bar.update(0, 2_000_000);
  bar.update(2_000_000, 2_000_000);
  bar.end();
  assert.deepEqual(written, [
    '\rcsa2: writing weights [..............................] 0 B / 2.0 MB',
    '\rcsa2: writing weights [##############################] 2.0 MB / 2.0 MB',
    '\n',
  ]);
  const silent: string[] = [];
  const pipe = progressBar('x', () => 'y', { isTTY: false, write: (s: string) => void silent.push(s) });
  pipe.update(1, 2);
  pipe.end();
  assert.deepEqual(silent, []);
  assert.equal(formatBytes(1_103_132_330_208), '1.1 TB');
  assert.equal(formatBytes(999), '999 B');

  const { initModel } = await import('@csa2/core');
  const seen: number[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'csa2-cli-progress-'));
  const config = JSON.parse(readFileSync(join(fixturesRoot(), 'deepseek-v41-tiny-a/config.json'), 'utf8')) as unknown;
  let total = 0;
  const info = await initModel(config, { seed: 1, outDir: dir, onProgress: (p) => (seen.push(p.bytesDone), (total = p.bytesTotal)) });
  assert.ok(seen.length > 10);
  assert.ok(
    seen.every((v, i) => i === 0 || v >= (seen[i - 1] as number)),
    'monotone',
  );
  assert.equal(seen.at(-1), total);
  assert.ok(info.bytes > total && info.bytes - total < 64 * 1024, 'the data plus the header');
});

test('generate honours the sampling flags: --top-k 1 is greedy at any temperature; penalties and --logit-bias change the text', () => {
  const tokens = (...extra: string[]) => {
    const r = csa2('generate', '--model', TINY, '--prompt-ids', '1,40,41,42,43', '--max-tokens', '12', '--threads', '1', ...extra);
    assert.equal(r.status, 0, r.stderr);
    return (/csa2: tokens ([\d,]+)/.exec(r.stderr)?.[1] ?? '').split(',').map(Number);
  };
  const greedy = tokens();
  assert.deepEqual(tokens('--temperature', '1.5', '--seed', '9', '--top-k', '1'), greedy, 'top_k 1 = greedy');
  const banned = greedy[0] as number;
  const biased = tokens('--logit-bias', `${banned}:-100`);
  assert.notEqual(biased[0], banned, 'a -100 bias bans the greedy first token');
  assert.ok(!biased.includes(banned), 'at every step');
  assert.ok(new Set(greedy).size < greedy.length, `the greedy text repeats tokens: ${greedy.join(',')}`);
  for (const penalty of [
    ['--presence-penalty', '2', '--frequency-penalty', '2'],
    ['--repetition-penalty', '3'],
  ]) {
    const penalized = tokens(...penalty);
    assert.notDeepEqual(penalized, greedy, `${penalty.join(' ')} changes a repetitive greedy text`);
    const firstRepeat = greedy.findIndex((id, i) => greedy.indexOf(id) < i);
    assert.deepEqual(penalized.slice(0, firstRepeat), greedy.slice(0, firstRepeat), 'the same until the first repeat');
    assert.notEqual(penalized[firstRepeat], greedy[firstRepeat], 'the repeat is penalized away');
  }
  assertUserError(csa2('generate', '--model', TINY, '--prompt-ids', '1', '--max-tokens', '1', '--top-k=-3'), /top_k must be an integer >= 0/);
  assertUserError(
    csa2('generate', '--model', TINY, '--prompt-ids', '1', '--max-tokens', '1', '--logit-bias', '300:1'),
    /logit_bias: token id 300 is outside the vocabulary \[0, 256\)/,
  );
  assertUserError(
    csa2('generate', '--model', TINY, '--prompt-ids', '1', '--max-tokens', '1', '--logit-bias', '5=1'),
    /--logit-bias: item 0 \("5=1"\) is not ID:BIAS/,
  );
});
