/** The csa2 CLI as a user runs it: bad input gives one clear line and a non-zero exit, never a stack. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fixturesRoot } from '@csa2/core';

const BIN = fileURLToPath(new URL('../../bin/csa2.js', import.meta.url));
const TINY = join(fixturesRoot(), 'deepseek-v41-tiny-a');
const csa2 = (...args: string[]) => spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8' });

function assertUserError(r: ReturnType<typeof csa2>, pattern: RegExp): void {
  assert.notEqual(r.status, 0, `expected a non-zero exit, stdout: ${r.stdout}`);
  assert.match(r.stderr, pattern);
  assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace for a user error');
}

test('generate refuses bad input with a clear message', () => {
  assertUserError(csa2('generate', '--model', TINY, '--prompt-ids', '1,999', '--max-tokens', '2'), /token id 999 at index 1 is outside the vocabulary \[0, 256\)/);
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
  writeFileSync(join(missing, 'config.json'), JSON.stringify({ vocab_size: 256, dim: 64, n_layers: 1, compress_ratios: [0], kv_source_layers: [], index_source_layers: [], dtype: 'bf16', expert_dtype: null }));
  assertUserError(csa2('generate', '--model', missing, '--prompt-ids', '1', '--max-tokens', '1'), /model\.safetensors/);
});

test('inspect prints the layer plan and 890 bytes per token for the released config', () => {
  const r = csa2('inspect', '--config', join(fixturesRoot(), 'deepseek-v41-flash/config.json'));
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /global-cache bytes per token: 890\n/);
  assert.match(r.stdout, /\s20\s+full\s+1\s+20\s+20\s+source/);
  assert.match(r.stdout, /not runnable here: engram_layer_ids/);
});
