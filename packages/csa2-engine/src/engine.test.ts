/** StopMatcher (stop sequences over streamed text), Engine's stop handling and its warm-up. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { fixturesRoot } from '@csa2/core/testing';
import { Engine } from './engine.js';
import { StopMatcher } from './stop-matcher.js';

function feed(stops: string[], pieces: string[]): { out: string; stopped: boolean } {
  const m = new StopMatcher(stops);
  let out = '';
  for (const p of pieces) {
    const r = m.push(p);
    out += r.emit;
    if (r.stopped) return { out, stopped: true };
  }
  return { out: out + m.flush(), stopped: false };
}

test('a stop sequence split across pieces cuts the text before it', () => {
  assert.deepEqual(feed(['END'], ['abc E', 'N', 'D tail']), { out: 'abc ', stopped: true });
  assert.deepEqual(feed(['\n\n', 'xy'], ['one\n', '\ntwo']), { out: 'one', stopped: true });
});

test('text that only looks like the start of a stop sequence is released', () => {
  assert.deepEqual(feed(['END'], ['abc E', 'Nx', 'yz']), { out: 'abc ENxyz', stopped: false });
  const m = new StopMatcher(['END']);
  assert.equal(m.push('abc EN').emit, 'abc ');
  assert.equal(m.flush(), 'EN');
});

test('without stop sequences text passes through; empty stop strings are refused', () => {
  assert.deepEqual(feed([], ['a', 'b']), { out: 'ab', stopped: false });
  assert.throws(() => new StopMatcher(['']), /non-empty/);
});

test('warmUp: the engine reports how long its warm-up took, and a warmed-up engine generates exactly what a cold one does', async () => {
  const modelDir = join(fixturesRoot(), 'deepseek-v41-tiny-a');
  const cold = await Engine.open({ modelDir });
  const warm = await Engine.open({ modelDir, warmUp: true });
  try {
    assert.equal(cold.info().warmUpMs, null);
    const ms = warm.info().warmUpMs;
    assert.ok(ms !== null && ms > 0, `warm-up time ${ms}`);
    const req = {
      promptIds: [1, 40, 41, 42, 43, 7, 9],
      maxTokens: 6,
      sampling: { temperature: 0, topP: 1, seed: 0 },
      exact: true,
      ignoreEos: true,
      keepLogits: true,
    };
    const a = await cold.generate(req);
    const b = await warm.generate(req);
    assert.deepEqual(b.tokens, a.tokens);
    b.logits.forEach((row, i) => assert.deepEqual(Array.from(row), Array.from(a.logits[i]!), `logits row ${i}`));
  } finally {
    await cold.close();
    await warm.close();
  }
});

test('encoderRows sets the rows of one encode run; a bad value is refused before the model loads', async () => {
  const modelDir = join(fixturesRoot(), 'deepseek-v41-tiny-a');
  const engine = await Engine.open({ modelDir, encoderRows: 64 });
  try {
    assert.equal(engine.model.options.chunkTokens, 64);
  } finally {
    await engine.close();
  }
  for (const bad of [0, 2.5, 1 << 21])
    await assert.rejects(
      Engine.open({ modelDir, encoderRows: bad }),
      (e: Error & { code?: string }) => e.code === 'config-invalid' && /encoderRows/.test(e.message),
    );
});
