/** The assembly of choices from stream entries: echo (BOS left out, split characters), offsets, usage, contradictions. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ByteTokenizer } from '@csa2/core';
import { ChoiceAssembly, type AssemblyEntry } from './choice-assembly.js';
import { ApiError } from './errors.js';

const tokenizer = new ByteTokenizer();
const usage = (prompt: number, completion: number) => ({
  prompt_tokens: prompt,
  completion_tokens: completion,
  total_tokens: prompt + completion,
  prompt_tokens_details: { cached_tokens: 2 },
});
const final = (tokens: number, prompt = 4): AssemblyEntry => ({ kind: 'final', finishReason: 'stop', usage: usage(prompt, tokens), tokens });
const token = (index: number, id: number, text: string, logprob = -1): AssemblyEntry => ({ kind: 'token', index, id, text, logprob, top: [] });

test('echo leaves out the BOS the gateway added: the first echoed token keeps its logprob (given the BOS)', () => {
  // prompt ids: [BOS=1, 'h', 'i'] as the model saw them; the client sent 'hi'
  const a = new ChoiceAssembly({ n: 1, logprobs: true, echo: { skipTokens: 1 }, promptIds: [1, 104, 105], tokenizer });
  a.push(0, { kind: 'prompt', logprobs: [null, { id: 104, logprob: -2, top: [] }, { id: 105, logprob: -0.5, top: [] }] });
  const deltas = a.push(0, token(0, 33, '!'));
  assert.deepEqual(
    deltas.map((d) => [d.text, d.textOffset, d.tokens.map((t) => t.logprob)]),
    [
      ['hi', 0, [-2, -0.5]],
      ['!', 2, [-1]],
    ],
  );
  a.push(0, final(1, 3));
  assert.ok(a.done);
  assert.equal(a.choices()[0]?.text, 'hi!');
  assert.ok(a.choices()[0]?.tokens.every((t) => t.scored !== false));
});

test('a character split over prompt tokens: its text goes with the token that completes it; offsets in code points', () => {
  const euro = [...Buffer.from('€')]; // 3 bytes, 1 code point
  const a = new ChoiceAssembly({ n: 1, logprobs: true, echo: { skipTokens: 0 }, promptIds: [...euro, 97], tokenizer });
  a.push(0, {
    kind: 'prompt',
    logprobs: [null, { id: euro[1] as number, logprob: -1, top: [] }, { id: euro[2] as number, logprob: -1, top: [] }, { id: 97, logprob: -1, top: [] }],
  });
  const [echo, next] = a.push(0, token(0, 98, 'b'));
  assert.deepEqual(
    echo?.tokens.map((t) => t.text),
    ['', '', '€', 'a'],
  );
  assert.equal(echo?.tokens[0]?.scored, false, 'the first token has no context');
  assert.equal(next?.textOffset, 2, '€a is 2 code points');
});

test('choices interleave; usage counts the prompt once (choice 0) and sums the completion tokens; the final tail text is kept', () => {
  const a = new ChoiceAssembly({ n: 2, logprobs: false, echo: null, promptIds: [1, 2, 3, 4], tokenizer });
  a.push(1, token(0, 120, 'x'));
  a.push(0, token(0, 121, 'y'));
  a.push(1, { ...final(1), text: '!' } as AssemblyEntry);
  assert.equal(a.done, false);
  a.push(0, token(1, 122, 'z'));
  a.push(0, final(2));
  assert.deepEqual(
    a.choices().map((c) => c.text),
    ['yz', 'x!'],
  );
  assert.deepEqual(a.usage({ promptTokens: 99 }), { prompt_tokens: 4, completion_tokens: 3, total_tokens: 7, prompt_tokens_details: { cached_tokens: 2 } });
});

test('entries that contradict the request are stream_invalid', () => {
  const isInvalid = (err: unknown) => err instanceof ApiError && err.code === 'stream_invalid';
  const asked = new ChoiceAssembly({ n: 2, logprobs: true, echo: null, promptIds: [1], tokenizer });
  assert.throws(() => asked.push(0, { kind: 'token', index: 0, id: 1, text: 'a' }), isInvalid, 'no logprob');
  assert.throws(() => asked.push(1, { kind: 'prompt', logprobs: [null] }), isInvalid, 'a prompt entry outside choice 0');
  assert.throws(() => asked.push(2, final(0)), isInvalid, 'a choice past n');
  const ended = new ChoiceAssembly({ n: 1, logprobs: false, echo: null, promptIds: [1], tokenizer });
  ended.push(0, final(0));
  assert.throws(() => ended.push(0, token(0, 1, 'a')), isInvalid, 'after the end');
  const echo = new ChoiceAssembly({ n: 1, logprobs: true, echo: { skipTokens: 0 }, promptIds: [1, 2], tokenizer });
  assert.throws(() => echo.push(0, token(0, 1, 'a')), isInvalid, 'echo with logprobs, no prompt entry');
});
