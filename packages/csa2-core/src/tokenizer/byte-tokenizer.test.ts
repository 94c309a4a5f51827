import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ByteTokenizer, renderPlainChatTemplate } from './byte-tokenizer.js';
import { validateTokenIds } from './tokenizer.js';
import { InputError } from '../errors.js';

const tok = new ByteTokenizer();

function streamAll(ids: readonly number[]): { pieces: string[]; text: string } {
  const s = tok.createDecodeStream();
  const pieces = ids.map((id) => s.push(id));
  pieces.push(s.flush());
  return { pieces, text: pieces.join('') };
}

test('byte tokenizer: ids are the UTF-8 bytes, no special tokens', () => {
  assert.equal(tok.kind, 'byte');
  assert.equal(tok.vocabSize, 256);
  assert.equal(tok.bosId, null);
  assert.deepEqual(tok.eosIds, []);
  assert.deepEqual(tok.encode('Hi!'), [72, 105, 33]);
  assert.deepEqual(tok.encode('é'), [0xc3, 0xa9]);
  assert.deepEqual(tok.encode('中'), [0xe4, 0xb8, 0xad]);
  assert.deepEqual(tok.encode('😀'), [0xf0, 0x9f, 0x98, 0x80]);
  assert.deepEqual(tok.encode(''), []);
});

test('byte tokenizer: round trips ASCII, CJK, emoji and mixed text', () => {
  for (const s of ['Hello, world!\n\ttabs  and  spaces', '你好，世界！日本語のテキスト', '😀🎉👨‍👩‍👧 flags 🇯🇵', 'mixé ünïcödé ∑ ∞ \u0000 nul', '']) {
    const ids = tok.encode(s);
    assert.ok(ids.every((id) => Number.isInteger(id) && id >= 0 && id < 256));
    assert.equal(tok.decode(ids), s);
    assert.equal(streamAll(ids).text, s);
  }
});

test('byte tokenizer: invalid UTF-8 decodes to U+FFFD', () => {
  assert.equal(tok.decode([0xff]), '\uFFFD');
  assert.equal(tok.decode([0x41, 0xc3]), 'A\uFFFD'); // truncated 2-byte sequence
  assert.equal(tok.decode([0xe4, 0xb8, 0x41]), '\uFFFDA'); // truncated 3-byte sequence then ASCII
  assert.equal(tok.decode([0x80, 0x80]), '\uFFFD\uFFFD'); // lone continuation bytes
});

test('byte stream: a multi-byte character split across tokens is emitted once complete', () => {
  const s = tok.createDecodeStream();
  assert.equal(s.push(0x41), 'A');
  assert.equal(s.push(0xe4), '');
  assert.equal(s.push(0xb8), '');
  assert.equal(s.push(0xad), '中');
  assert.equal(s.push(0xf0), '');
  assert.equal(s.push(0x9f), '');
  assert.equal(s.push(0x98), '');
  assert.equal(s.push(0x80), '😀');
  assert.equal(s.flush(), '');
  // Every piece of a longer stream is whole text: no U+FFFD, and the concatenation is the input.
  const text = '价格: 42€, emoji 😀🎉 done';
  const { pieces, text: joined } = streamAll(tok.encode(text));
  assert.equal(joined, text);
  assert.ok(pieces.every((p) => !p.includes('\uFFFD')));
});

test('byte stream: invalid bytes become U+FFFD (mid-stream when known, else at flush)', () => {
  const s = tok.createDecodeStream();
  assert.equal(s.push(0xff), '\uFFFD');
  assert.equal(s.push(0xe4), '');
  assert.equal(s.push(0x41), '\uFFFDA'); // the pending lead byte can never complete
  assert.equal(s.push(0xe4), '');
  assert.equal(s.push(0xb8), '');
  assert.equal(s.flush(), '\uFFFD'); // truncated sequence at the end
  // flush resets: the stream is reusable
  assert.equal(s.push(0x42), 'B');
  assert.equal(s.flush(), '');
});

test('byte tokenizer: decode and push reject ids outside 0..255', () => {
  assert.throws(
    () => tok.decode([65, 256]),
    (e: unknown) => e instanceof InputError && /256/.test(e.message) && /index 1/.test(e.message),
  );
  assert.throws(() => tok.createDecodeStream().push(-1), InputError);
});

test('byte tokenizer: plain-text chat template', () => {
  const messages = [
    { role: 'system', content: 'Be terse.' },
    { role: 'user', content: 'Hi' },
    { role: 'assistant', content: 'Hello.' },
    { role: 'user', content: '再见' },
  ] as const;
  const text = 'System: Be terse.\nUser: Hi\nAssistant: Hello.\nUser: 再见\nAssistant:';
  assert.equal(renderPlainChatTemplate(messages), text);
  const ids = tok.applyChatTemplate(messages);
  assert.deepEqual(ids, tok.encode(text));
  assert.equal(tok.decode(ids), text);
  assert.equal(tok.decode(tok.applyChatTemplate([])), 'Assistant:');
});

test('validateTokenIds: names the first bad id and its index', () => {
  validateTokenIds([], 10);
  validateTokenIds([0, 9, 5], 10);
  const check = (ids: number[], re: RegExp): void => {
    assert.throws(
      () => validateTokenIds(ids, 10),
      (e: unknown) => e instanceof InputError && e.code === 'input-invalid' && re.test(e.message),
    );
  };
  check([1, 2, 10, 11], /token id 10 at index 2 .*\[0, 10\)/);
  check([-1], /token id -1 at index 0/);
  check([3, 1.5], /token id 1\.5 at index 1/);
  check([3, 4, Number.NaN], /token id NaN at index 2/);
  check([Infinity], /token id Infinity at index 0/);
});
