/** The engine workers' shared settings helpers. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EnvConfigError } from './env-config.js';
import { envThreads } from './worker-config.js';

test("envThreads: unset, blank or 'auto' is 'auto'; otherwise an integer in [1, 1024]", () => {
  assert.equal(envThreads({}, 'T'), 'auto');
  assert.equal(envThreads({ T: ' ' }, 'T'), 'auto');
  assert.equal(envThreads({ T: 'auto' }, 'T'), 'auto');
  assert.equal(envThreads({ T: '8' }, 'T'), 8);
  for (const bad of ['0', '1025', 'four', '2.5'])
    assert.throws(
      () => envThreads({ T: bad }, 'T'),
      (e) => e instanceof EnvConfigError && e.variable === 'T',
    );
});
