import assert from 'node:assert/strict';
import { test } from 'node:test';
import { keyFromAuthorization } from './status.js';

test('the status key comes as Bearer, or Basic with the key as password (or as user with no password)', () => {
  const basic = (s: string): string => `Basic ${Buffer.from(s).toString('base64')}`;
  assert.equal(keyFromAuthorization('Bearer sk-abc12345'), 'sk-abc12345');
  assert.equal(keyFromAuthorization(basic('operator:sk-abc12345')), 'sk-abc12345');
  assert.equal(keyFromAuthorization(basic('sk-abc12345:')), 'sk-abc12345');
  assert.equal(keyFromAuthorization(basic('user:pa:ss')), 'pa:ss');
  assert.equal(keyFromAuthorization(undefined), null);
  assert.equal(keyFromAuthorization('Token abc'), null);
  assert.equal(keyFromAuthorization(basic(':')), null);
});
