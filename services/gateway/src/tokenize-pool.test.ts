/** OffThreadTokenizer: long texts go to the thread and come back identical to inline tokenization. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { loadTokenizer } from '@csa2/core';
import { fixturesRoot } from '@csa2/core/testing';
import { OffThreadTokenizer } from './tokenize-pool.js';

const MODEL_DIR = join(fixturesRoot(), 'deepseek-v41-tiny-a');

test('long texts are tokenized in the thread with the same result as inline; short ones inline', async () => {
  const tokenizer = await loadTokenizer({ modelDir: MODEL_DIR, vocabSize: 256 });
  const pool = new OffThreadTokenizer(tokenizer, { modelDir: MODEL_DIR, vocabSize: 256 }, 1024);
  try {
    const long = 'héllo wörld, a long document. '.repeat(200); // > 1 KiB: the thread
    assert.deepEqual(await pool.encode(long), tokenizer.encode(long));
    assert.deepEqual(await pool.encode('short'), tokenizer.encode('short'));
    const messages = [{ role: 'user' as const, content: long }];
    assert.deepEqual(await pool.applyChatTemplate(messages), tokenizer.applyChatTemplate(messages));
    // requests in flight together each get their own answer
    const texts = ['a'.repeat(2000), 'b'.repeat(3000), 'c'.repeat(4000)];
    const out = await Promise.all(texts.map((t) => pool.encode(t)));
    out.forEach((ids, i) => assert.deepEqual(ids, tokenizer.encode(texts[i] as string)));
  } finally {
    await pool.close();
  }
});
