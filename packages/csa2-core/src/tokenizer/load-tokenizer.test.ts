import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadTokenizer, validateTokenIds } from './load-tokenizer.js';
import { ByteTokenizer } from './byte-tokenizer.js';
import { loadDeepSeekV3Tokenizer } from './deepseek-tokenizer.js';
import { HuggingFaceTokenizer } from './hf-tokenizer.js';
import { tinyBpeTokenizerJson } from './test-fixtures.js';
import { CheckpointError, InputError } from '../errors.js';

async function withTempDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'csa2-load-tok-'));
  try {
    await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

test('loadTokenizer: vocabSize 256 without a tokenizer.json is byte-level', async () => {
  const tok = await loadTokenizer({ vocabSize: 256 });
  assert.ok(tok instanceof ByteTokenizer);
  assert.equal(tok.kind, 'byte');
  await withTempDir(async (dir) => {
    assert.equal((await loadTokenizer({ modelDir: dir, vocabSize: 256 })).kind, 'byte');
  });
});

test('loadTokenizer: a vocabulary that holds DeepSeek-V3 gets the bundled tokenizer (one shared instance)', async () => {
  const shared = await loadDeepSeekV3Tokenizer();
  for (const vocabSize of [129280, 128815, 200000]) {
    const tok = await loadTokenizer({ vocabSize });
    assert.equal(tok, shared);
    assert.equal(tok.kind, 'deepseek-v3');
  }
  await withTempDir(async (dir) => {
    assert.equal(await loadTokenizer({ modelDir: dir, vocabSize: 129280 }), shared);
  });
});

test('loadTokenizer: a tokenizer.json in modelDir wins over the built-in tokenizers', async () => {
  await withTempDir(async (dir) => {
    await writeFile(join(dir, 'tokenizer.json'), JSON.stringify(tinyBpeTokenizerJson()));
    const exact = await loadTokenizer({ modelDir: dir, vocabSize: 264 });
    assert.ok(exact instanceof HuggingFaceTokenizer);
    assert.equal(exact.vocabSize, 264);
    assert.deepEqual(exact.encode('hello'), [258, 0x6f]);
    // A padded model vocabulary is fine, and so is one the built-in tokenizers would have matched.
    assert.equal((await loadTokenizer({ modelDir: dir, vocabSize: 320 })).kind, 'huggingface');
    assert.equal((await loadTokenizer({ modelDir: dir, vocabSize: 129280 })).kind, 'huggingface');
  });
});

test('loadTokenizer: a tokenizer.json larger than the model vocabulary is a CheckpointError naming both sizes', async () => {
  await withTempDir(async (dir) => {
    await writeFile(join(dir, 'tokenizer.json'), JSON.stringify(tinyBpeTokenizerJson()));
    await assert.rejects(
      loadTokenizer({ modelDir: dir, vocabSize: 256 }),
      (e: unknown) =>
        e instanceof CheckpointError && e.code === 'checkpoint-invalid' && /264 ids/.test(e.message) && /model vocabulary size is 256/.test(e.message),
    );
    await writeFile(join(dir, 'tokenizer.json'), '[]');
    await assert.rejects(loadTokenizer({ modelDir: dir, vocabSize: 256 }), CheckpointError);
  });
});

test('loadTokenizer: no tokenizer for other vocabulary sizes says how to provide one', async () => {
  for (const vocabSize of [1000, 32000, 128814, 257]) {
    await assert.rejects(
      loadTokenizer({ vocabSize }),
      (e: unknown) =>
        e instanceof CheckpointError &&
        e.message.includes(`vocabulary size ${vocabSize}`) &&
        /tokenizer\.json/.test(e.message) &&
        /model directory/.test(e.message),
    );
  }
  await withTempDir(async (dir) => {
    await assert.rejects(loadTokenizer({ modelDir: dir, vocabSize: 32000 }), (e: unknown) => e instanceof CheckpointError && e.message.includes(dir));
  });
  for (const vocabSize of [0, -5, 2.5, Number.NaN]) {
    await assert.rejects(loadTokenizer({ vocabSize }), (e: unknown) => e instanceof CheckpointError && /vocabSize must be a positive integer/.test(e.message));
  }
});

test('validateTokenIds (re-exported by load-tokenizer): errors name the first bad id and its index', () => {
  validateTokenIds([0, 128814, 129279], 129280);
  assert.throws(
    () => validateTokenIds([0, 5, 129280, -1], 129280),
    (e: unknown) => e instanceof InputError && /token id 129280 at index 2/.test(e.message) && /\[0, 129280\)/.test(e.message),
  );
});
