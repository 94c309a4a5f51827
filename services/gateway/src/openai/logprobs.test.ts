import assert from 'node:assert/strict';
import { test } from 'node:test';
import { chatLogprobs, completionLogprobs, type TokenLogprobs } from './logprobs.js';

const b = (s: string): Uint8Array => new TextEncoder().encode(s);
const tok = (id: number, s: string, logprob: number, top: [number, string, number][], text = s): TokenLogprobs => ({
  id,
  bytes: b(s),
  logprob,
  text,
  top: top.map(([tid, ts, lp]) => ({ id: tid, bytes: b(ts), logprob: lp })),
});

test('completions: parallel arrays, top N plus the sampled token, text offsets after a given start', () => {
  const tokens = [
    tok(1, 'Hello', -0.1, [
      [1, 'Hello', -0.1],
      [2, 'Hi', -2.5],
      [3, 'Hey', -3],
    ]),
    tok(4, ' world', -1.2, [
      [5, ' there', -0.9],
      [4, ' world', -1.2],
      [6, '!', -4],
    ]),
    tok(7, '!', -5, [
      [8, '.', -0.2],
      [9, ',', -1],
    ]),
  ];
  const out = completionLogprobs(tokens, { topN: 2, textOffset: 10 });
  assert.deepEqual(out.tokens, ['Hello', ' world', '!']);
  assert.deepEqual(out.token_logprobs, [-0.1, -1.2, -5]);
  assert.deepEqual(out.top_logprobs, [
    { Hello: -0.1, Hi: -2.5 },
    { ' there': -0.9, ' world': -1.2 },
    { '.': -0.2, ',': -1, '!': -5 },
  ]);
  assert.deepEqual(out.text_offset, [10, 15, 21]);
  assert.deepEqual(
    completionLogprobs(tokens, { topN: 0 }).top_logprobs,
    [{ Hello: -0.1 }, { ' world': -1.2 }, { '!': -5 }],
    'logprobs: 0 → the sampled token only',
  );
});

test('completions: an echoed prompt starts with a null logprob; -Infinity becomes -9999', () => {
  const first: TokenLogprobs = { ...tok(1, 'The', 0, []), scored: false };
  const out = completionLogprobs([first, tok(2, ' end', -Infinity, [[3, ' start', -0.01]])], { topN: 1 });
  assert.deepEqual(out.token_logprobs, [null, -9999]);
  assert.deepEqual(out.top_logprobs, [null, { ' start': -0.01, ' end': -9999 }]);
  assert.deepEqual(out.text_offset, [0, 3]);
});

test('a character split over two tokens: U+FFFD in the token strings, offsets follow the released text, chat keeps the bytes', () => {
  const euro = b('€'); // e2 82 ac
  const t1: TokenLogprobs = { id: 10, bytes: euro.slice(0, 2), logprob: -0.5, text: '', top: [] };
  const t2: TokenLogprobs = { id: 11, bytes: euro.slice(2), logprob: -0.25, text: '€', top: [] };
  const t3 = tok(12, 'x', -1, []);
  const out = completionLogprobs([t1, t2, t3], { topN: 0 });
  assert.deepEqual(out.tokens, ['\uFFFD', '\uFFFD', 'x']);
  assert.deepEqual(out.text_offset, [0, 0, 1], 'the euro sign is released with the second token');
  const chat = chatLogprobs([t1, t2], { topN: 0 });
  assert.deepEqual(
    chat.content.map((c) => c.bytes),
    [[0xe2, 0x82], [0xac]],
  );
});

test('chat: content entries with bytes and the top N alternatives, most likely first', () => {
  const out = chatLogprobs(
    [
      tok(1, 'Yes', -0.3, [
        [2, 'No', -1.6],
        [1, 'Yes', -0.3],
        [3, 'Maybe', -2],
      ]),
    ],
    { topN: 2 },
  );
  assert.deepEqual(out, {
    content: [
      {
        token: 'Yes',
        logprob: -0.3,
        bytes: [...b('Yes')],
        top_logprobs: [
          { token: 'Yes', logprob: -0.3, bytes: [...b('Yes')] },
          { token: 'No', logprob: -1.6, bytes: [...b('No')] },
        ],
      },
    ],
    refusal: null,
  });
});

test('completions: text offsets count code points, as OpenAI and vLLM do (an emoji is one, not two UTF-16 units)', () => {
  const out = completionLogprobs([tok(1, '😀', -1, []), tok(2, 'a', -1, [])], { topN: 0, textOffset: 3 });
  assert.deepEqual(out.text_offset, [3, 4]);
});
