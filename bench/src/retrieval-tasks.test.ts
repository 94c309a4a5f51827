import assert from 'node:assert/strict';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { answerCorrect, instanceSeed, loadRetrievalCorpus, RETRIEVAL_TASKS, retrievalInstance, seededRandom } from './retrieval-tasks.js';

const corpus = loadRetrievalCorpus(join(fileURLToPath(new URL('../../', import.meta.url)), 'training/data/corpus'));

test('the held-out parts are the last 5% of each source, and keys come from a real word list', () => {
  assert.equal(corpus.heldOut.length, 3);
  for (const t of corpus.heldOut) assert.ok(t.length > 50_000, `held-out text of ${t.length} characters`);
  assert.ok(corpus.words.length > 1000);
  assert.ok(corpus.words.every((w) => /^[a-z]{4,9}$/.test(w)));
});

test('an instance is a function of its seed; other seeds give other instances', () => {
  for (const task of RETRIEVAL_TASKS) {
    const a = retrievalInstance(corpus, task, 4000, 0.3, instanceSeed(1, task, 4096, 0.3, 0));
    const b = retrievalInstance(corpus, task, 4000, 0.3, instanceSeed(1, task, 4096, 0.3, 0));
    const c = retrievalInstance(corpus, task, 4000, 0.3, instanceSeed(1, task, 4096, 0.3, 1));
    assert.deepEqual(a, b, task);
    assert.notEqual(a.document, c.document, task);
  }
});

test('every value-carrying needle is in the document at its offset, carries its values, and the values appear nowhere before it', () => {
  for (const task of RETRIEVAL_TASKS) {
    for (const depth of [0, 0.25, 0.5, 0.9, 1]) {
      const inst = retrievalInstance(corpus, task, 20_000, depth, instanceSeed(2, task, depth));
      assert.equal(inst.needles.length, task === 'vt' ? 5 : task === 'niah_multivalue' ? 4 : 1, task);
      for (const n of inst.needles) assert.equal(inst.document.slice(n.offset, n.offset + n.text.length), n.text, `${task} at ${depth}`);
      const first = Math.min(...inst.needles.map((n) => n.offset));
      for (const v of inst.expected) {
        assert.ok(
          inst.needles.some((n) => n.text.includes(v)),
          `${task}: ${v} is carried by a needle`,
        );
        assert.ok(!inst.document.slice(0, first).includes(v), `${task}: ${v} appears before the needles`);
      }
      assert.ok(inst.question.startsWith('\n') && inst.answer.startsWith(' '), task);
      assert.ok(answerCorrect(inst, inst.answer), `${task}: its own answer counts`);
    }
  }
});

test('the first needle sits at the drawn depth of the haystack', () => {
  for (const depth of [0.1, 0.5, 0.9]) {
    const inst = retrievalInstance(corpus, 'passkey', 40_000, depth, 11);
    const at = (inst.needles[0]?.offset ?? 0) / inst.document.length;
    assert.ok(Math.abs(at - depth) < 0.05, `depth ${depth}: the needle is at ${at.toFixed(3)} of the document`);
  }
  assert.throws(() => retrievalInstance(corpus, 'passkey', 1000, 1.5, 1), /depth must be within \[0, 1\]/);
});

test('multi-key: the asked needle is one of four different keys; answers need every expected value', () => {
  const inst = retrievalInstance(corpus, 'niah_multikey', 8000, 0.2, 5);
  assert.equal((inst.document.match(/One of the special magic numbers for /g) ?? []).length, 4);
  const key = /for (\S+) mentioned/.exec(inst.question)?.[1] ?? '';
  assert.ok(inst.needles[0]?.text.includes(key));
  const mv = retrievalInstance(corpus, 'niah_multivalue', 8000, 0.2, 5);
  assert.equal(answerCorrect(mv, mv.expected.slice(0, 3).join(', ')), false);
  assert.equal(answerCorrect(mv, ` ${mv.expected.join(' and ')}`), true);
});

test('seededRandom is uniform enough and reproducible', () => {
  const r = seededRandom(3);
  const xs = Array.from({ length: 10_000 }, r);
  assert.ok(xs.every((x) => x >= 0 && x < 1));
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  assert.ok(Math.abs(mean - 0.5) < 0.02, `mean ${mean}`);
  assert.deepEqual(Array.from({ length: 5 }, seededRandom(3)), xs.slice(0, 5));
});
