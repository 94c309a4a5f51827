/**
 * The bench command line: suites are the words before the first option, and an option's value that
 * happens to be a suite's name stays the option's value.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { main } from './main.js';

function io(): { out: string[]; log: string[]; io: { out: (s: string) => void; log: (s: string) => void } } {
  const out: string[] = [];
  const log: string[] = [];
  return { out, log, io: { out: (s) => void out.push(s), log: (s) => void log.push(s) } };
}

test('an option value named like a suite is the option’s value; unknown suites are refused by name', async () => {
  const a = io();
  assert.equal(await main(['recovery', '--recovery-scenarios', 'encoder', '--help'], a.io), 0, a.log.join('\n'));
  assert.match(a.out.join(''), /suites:/);
  const b = io();
  assert.equal(await main(['nosuch', '--help'], b.io), 2);
  assert.match(b.log.join(''), /unknown suite "nosuch"/);
  const c = io();
  assert.equal(await main(['recovery', '--recovery-scenarios', 'encoder', '--no-such-option'], c.io), 2);
  assert.match(c.log.join(''), /no-such-option/);
});
