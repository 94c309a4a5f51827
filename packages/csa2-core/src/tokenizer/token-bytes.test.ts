/** tokenBytes: the bytes of every token of a text concatenate to the text's UTF-8, for each tokenizer kind. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ByteTokenizer } from './byte-tokenizer.js';
import { loadDeepSeekV3Tokenizer } from './deepseek-tokenizer.js';
import { HuggingFaceTokenizer, loadHuggingFaceTokenizer } from './hf-tokenizer.js';
import { InputError } from '../errors.js';
import { byteFallbackByte, byteLevelTokenBytes } from './token-bytes.js';
import type { Tokenizer } from './tokenizer.js';
import { tinyBpeTokenizerJson, tinyMetaspaceTokenizerJson } from './test-fixtures.js';

const TEXT = 'Hello world, 12 héllo — “quotes” 你好 😀\n\tend';
const REPO = fileURLToPath(new URL('../../../../', import.meta.url));

function concatBytes(tok: Tokenizer, ids: readonly number[]): Buffer {
  return Buffer.concat(ids.map((id) => tok.tokenBytes(id)));
}

test('byte-level map: every byte round-trips through its printable character', () => {
  // the 188 printable Latin-1 bytes stand for themselves, the other 68 map to U+0100…U+0143 in byte order
  assert.deepEqual([...(byteLevelTokenBytes('Ġ') ?? [])], [0x20]);
  assert.deepEqual([...(byteLevelTokenBytes('Ċ') ?? [])], [0x0a]);
  assert.deepEqual([...(byteLevelTokenBytes('AĀ') ?? [])], [0x41, 0x00]);
  assert.deepEqual([...(byteLevelTokenBytes('ÃĤ') ?? [])], [0xc3, 0x82]);
  assert.equal(byteLevelTokenBytes('Ő'), null, 'outside the byte alphabet');
  assert.equal(byteFallbackByte('<0xE2>'), 0xe2);
  assert.equal(byteFallbackByte('<0xE2'), null);
});

test('byte tokenizer: a token is its byte; ids outside the vocabulary are refused', () => {
  const tok = new ByteTokenizer();
  assert.deepEqual(concatBytes(tok, tok.encode(TEXT)), Buffer.from(TEXT));
  assert.deepEqual([...tok.tokenBytes(0xe2)], [0xe2]);
  assert.throws(() => tok.tokenBytes(256), InputError);
});

test('DeepSeek-V3: byte-level entries and added tokens concatenate to the UTF-8 of the text', async () => {
  const tok = await loadDeepSeekV3Tokenizer();
  const text = `<｜begin▁of▁sentence｜>${TEXT}<｜User｜>hi`;
  const ids = tok.encode(text);
  assert.deepEqual(concatBytes(tok, ids), Buffer.from(text));
  assert.deepEqual(Buffer.from(tok.tokenBytes(tok.bosId)).toString('utf8'), '<｜begin▁of▁sentence｜>');
  // 😀 (f0 9f 98 80) is two tokens here: a character's bytes split between them
  const emoji = tok.encode('😀');
  assert.deepEqual(
    emoji.map((id) => [...tok.tokenBytes(id)]),
    [[0xf0, 0x9f, 0x98], [0x80]],
  );
  assert.throws(() => tok.tokenBytes(tok.vocabSize), InputError);
});

test('Hugging Face byte-level BPE (tiny, and the committed model): bytes of the tokens = UTF-8 of the text', async () => {
  const tiny = new HuggingFaceTokenizer({ tokenizerJson: tinyBpeTokenizerJson() });
  const text = '<s>hello world é<|user|>';
  assert.deepEqual(concatBytes(tiny, tiny.encode(text)), Buffer.from(text));
  assert.deepEqual(Buffer.from(tiny.tokenBytes(259)).toString(), ' w');
  const model = await loadHuggingFaceTokenizer(join(REPO, 'models/v41-mini-128k'));
  assert.deepEqual(concatBytes(model, model.encode(TEXT)), Buffer.from(TEXT));
  assert.deepEqual(concatBytes(model, [0]), Buffer.from('<|bos|>'));
});

test('Hugging Face Metaspace: ▁ is a space in the token bytes (the decoder drops the first one, the bytes keep it)', () => {
  const tok = new HuggingFaceTokenizer({ tokenizerJson: tinyMetaspaceTokenizerJson() });
  const ids = tok.encode('hello world');
  assert.deepEqual(concatBytes(tok, ids).toString(), ' hello world');
  assert.equal(tok.decode(ids), 'hello world');
  assert.deepEqual(Buffer.from(tok.tokenBytes(9)).toString(), '</s>');
});
