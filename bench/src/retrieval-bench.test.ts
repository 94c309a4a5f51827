import assert from 'node:assert/strict';
import { test } from 'node:test';
import { chanceOfAny, parseRetrievalBenchOptions } from './retrieval-bench.js';
import { UsageError } from './suite.js';

test('retrieval options: defaults, K suffixes, and every bad value named', () => {
  const d = parseRetrievalBenchOptions({});
  assert.deepEqual(d.lengths, [1024, 4096, 16384, 32768]);
  assert.deepEqual(d.replays, [128, 512, 2560]);
  assert.deepEqual(d.modes, ['exact', 'ced', 'pipeline']);
  assert.equal(d.tasks.length, 5);
  assert.match(d.modelDir, /models\/v41-mini-128k$/);
  const q = parseRetrievalBenchOptions({ quick: true, 'retrieval-lengths': '2K,128K', 'retrieval-kl-tokens': '0' });
  assert.deepEqual(q.lengths, [2048, 131072]);
  assert.equal(q.klTokens, 0);
  assert.deepEqual(q.depths, [0.5]);
  assert.deepEqual(
    [d.klPassages, q.klPassages, parseRetrievalBenchOptions({ 'retrieval-kl-passages': '3' }).klPassages],
    [8, 1, 3],
    'the KL passages: 8 by default, 1 quick',
  );
  for (const [name, value, message] of [
    ['retrieval-tasks', 'passkey,haystack', /unknown task "haystack"/],
    ['retrieval-modes', 'exact,fast', /unknown mode "fast"/],
    ['retrieval-depths', '0.5,1.2', /"1.2" is not within \[0, 1\]/],
    ['retrieval-lengths', '4K,lots', /not a token count: "lots"/],
    ['retrieval-kl-passages', '9', /integer in \[1, 8\], got 9/],
  ] as const) {
    assert.throws(
      () => parseRetrievalBenchOptions({ [name]: value }),
      (e: unknown) => e instanceof UsageError && message.test(e.message),
      `${name}=${value}`,
    );
  }
});

test('chanceOfAny: at least one of m given entries among k drawn from n without replacement', () => {
  assert.ok(Math.abs(chanceOfAny(10, 3, 1) - 0.3) < 1e-12);
  assert.ok(Math.abs(chanceOfAny(10, 3, 2) - (1 - (7 / 10) * (6 / 9))) < 1e-12);
  assert.equal(chanceOfAny(5, 3, 3), 1, 'k + m > n: some given entry is always drawn');
  assert.equal(chanceOfAny(100, 10, 0), 0);
  assert.equal(chanceOfAny(100, 0, 5), 0);
});
