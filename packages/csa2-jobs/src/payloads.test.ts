/** Every payload field is bounded; token lists over MAX_INLINE_TOKEN_IDS go by reference. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decodeCostTokens } from './fair-priority.js';
import {
  JobPayloadError,
  MAX_CHOICES,
  MAX_INLINE_TOKEN_IDS,
  MAX_STOP_SEQUENCE_CHARS,
  parseDecodeJob,
  parsePrefillJob,
  promptPrefixTokens,
  type DecodeJob,
} from './payloads.js';

const decode: DecodeJob = {
  v: 1,
  requestId: 'r1',
  tenant: 'acme',
  model: 'tiny',
  promptIds: [1, 2, 3],
  documentId: null,
  sampling: { temperature: 0, topP: 1, seed: 1 },
  maxTokens: 8,
  stop: ['\n'],
  ignoreEos: false,
  replayTokens: null,
  acceptedAtMs: 1,
};
const ref = { key: 'tenants/acme/inputs/req.r1.prefill.u32', count: 9000, sha256: 'a'.repeat(64) };

function refused(parse: () => unknown, field: RegExp): void {
  assert.throws(parse, (err: unknown) => err instanceof JobPayloadError && err.issues.some((i) => field.test(i)), String(field));
}

test('decode payloads: stop sequences, prompt ids, model name and counts are bounded', () => {
  assert.deepEqual(parseDecodeJob(decode), decode);
  refused(() => parseDecodeJob({ ...decode, stop: ['x'.repeat(MAX_STOP_SEQUENCE_CHARS + 1)] }), /^stop\.0: /);
  refused(() => parseDecodeJob({ ...decode, stop: ['a', 'b', 'c', 'd', 'e'] }), /^stop: /);
  refused(() => parseDecodeJob({ ...decode, promptIds: new Array(MAX_INLINE_TOKEN_IDS + 1).fill(1) }), /^promptIds: .*object store/);
  refused(() => parseDecodeJob({ ...decode, model: 'm'.repeat(257) }), /^model: /);
  refused(() => parseDecodeJob({ ...decode, maxTokens: 2 ** 30 }), /^maxTokens: /);
  refused(() => parseDecodeJob({ ...decode, promptIds: [2 ** 33] }), /^promptIds\.0: /);
});

test('decode payloads: n, logprobs and promptLogprobs are optional and bounded; maxTokens 0 is the prompt only', () => {
  const choices = { ...decode, n: 3, logprobs: 5, promptLogprobs: 0, maxTokens: 0 };
  assert.deepEqual(parseDecodeJob(choices), choices);
  refused(() => parseDecodeJob({ ...decode, n: 0 }), /^n: /);
  refused(() => parseDecodeJob({ ...decode, n: MAX_CHOICES + 1 }), /^n: /);
  refused(() => parseDecodeJob({ ...decode, n: 1.5 }), /^n: /);
  refused(() => parseDecodeJob({ ...decode, logprobs: 21 }), /^logprobs: /);
  refused(() => parseDecodeJob({ ...decode, logprobs: -1 }), /^logprobs: /);
  refused(() => parseDecodeJob({ ...decode, promptLogprobs: 21 }), /^promptLogprobs: /);
  refused(() => parseDecodeJob({ ...decode, maxTokens: -1 }), /^maxTokens: /);
  // the last choice samples with seed + n - 1: it must be a seed too
  refused(() => parseDecodeJob({ ...decode, n: 2, sampling: { ...decode.sampling, seed: Number.MAX_SAFE_INTEGER } }), /^sampling\.seed: .*last choice/);
  assert.equal(parseDecodeJob({ ...decode, sampling: { ...decode.sampling, seed: Number.MAX_SAFE_INTEGER } }).n, undefined);
  // a long prompt's prefill job carries its decode job's fields unchanged
  const prompt = parsePrefillJob({ v: 1, kind: 'prompt', tenant: 'acme', requestId: 'r1', model: 'tiny', tokenIds: [1, 2], decode: choices, acceptedAtMs: 1 });
  assert.ok(prompt.kind === 'prompt');
  assert.deepEqual(prompt.decode, choices);
  // every choice may generate maxTokens: the fair-share cost counts them all
  assert.equal(decodeCostTokens({ ...decode, maxTokens: 8, n: 3 }), 3 + 24);
  assert.equal(decodeCostTokens(decode), 3 + 8);
});

test('prefill payloads: a long prompt or document is a tokensRef, inline lists and texts are bounded', () => {
  const prompt = { v: 1, kind: 'prompt', tenant: 'acme', requestId: 'r1', model: 'tiny', decode, acceptedAtMs: 1 };
  const byRef = parsePrefillJob({ ...prompt, tokensRef: ref, prefixDocumentId: 'manual' });
  assert.ok(byRef.kind === 'prompt');
  assert.equal(promptPrefixTokens(byRef), 9000);
  assert.equal(byRef.prefixDocumentId, 'manual');
  refused(() => parsePrefillJob({ ...prompt }), /exactly one of tokenIds and tokensRef/);
  refused(() => parsePrefillJob({ ...prompt, tokenIds: [1], tokensRef: ref }), /exactly one of tokenIds and tokensRef/);
  refused(() => parsePrefillJob({ ...prompt, tokenIds: new Array(MAX_INLINE_TOKEN_IDS + 1).fill(1) }), /^tokenIds: /);
  refused(() => parsePrefillJob({ ...prompt, tokensRef: { ...ref, sha256: 'nope' } }), /^tokensRef\.sha256: /);

  const doc = { v: 1, kind: 'document', tenant: 'acme', documentId: 'manual', model: 'tiny', acceptedAtMs: 1 };
  assert.deepEqual(parsePrefillJob({ ...doc, input: { tokensRef: ref } }), { ...doc, input: { tokensRef: ref } });
  refused(() => parsePrefillJob({ ...doc, input: { tokenIds: new Array(MAX_INLINE_TOKEN_IDS + 1).fill(1) } }), /^input/);
  refused(() => parsePrefillJob({ ...doc, input: { text: 'x'.repeat(70_000) } }), /^input/);
});
