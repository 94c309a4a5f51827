/** StopMatcher (stop sequences over streamed text) and Engine's stop handling. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { StopMatcher } from './engine.js';

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
