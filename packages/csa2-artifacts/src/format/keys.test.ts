/**
 * @module format/keys.test
 * format/keys: object key shapes and id validation.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InvalidKeyError } from '../errors.js';
import { chunkObjectKey, documentPrefix, manifestObjectKey, tenantPrefix, validateDocumentId, validateTenant } from './keys.js';

const KEY = 'ab' + '0123456789abcdef'.repeat(3) + '01234567890123';

test('object keys: tenant-scoped chunks under a two-hex-char fan-out, manifests under the document', () => {
  assert.equal(KEY.length, 64);
  assert.equal(chunkObjectKey('acme', KEY), `tenants/acme/chunks/ab/${KEY}`);
  assert.equal(manifestObjectKey('acme', 'doc_1-A'), 'tenants/acme/documents/doc_1-A/manifest.json');
  assert.equal(documentPrefix('acme', 'd'), 'tenants/acme/documents/d/');
  assert.equal(tenantPrefix('t-1'), 'tenants/t-1/');
  assert.ok(manifestObjectKey('acme', 'x').startsWith(tenantPrefix('acme')));
  assert.ok(chunkObjectKey('acme', KEY).startsWith(tenantPrefix('acme')));
});

test('tenant and document ids outside [A-Za-z0-9_-]{1,64} are refused with InvalidKeyError', () => {
  assert.equal(validateTenant('a'.repeat(64)), 'a'.repeat(64));
  for (const bad of ['', 'a'.repeat(65), '..', 'a/b', 'a.b', 'a b', 'ténant', 'x\n']) {
    assert.throws(() => validateTenant(bad), (e: unknown) => e instanceof InvalidKeyError && /tenant/.test(e.message), JSON.stringify(bad));
    assert.throws(() => validateDocumentId(bad), (e: unknown) => e instanceof InvalidKeyError && /document/.test(e.message), JSON.stringify(bad));
    assert.throws(() => manifestObjectKey('acme', bad), InvalidKeyError);
    assert.throws(() => chunkObjectKey(bad, KEY), InvalidKeyError);
  }
  for (const bad of ['', KEY.toUpperCase(), KEY.slice(1), `${KEY}0`, '../' + KEY.slice(3)]) {
    assert.throws(() => chunkObjectKey('acme', bad), InvalidKeyError, JSON.stringify(bad));
  }
});
