/**
 * @module format/keys.test
 * format/keys: object key shapes and id validation.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InvalidKeyError } from '../errors.js';
import {
  chunkObjectKey,
  chunksPrefix,
  documentPrefix,
  documentsPrefix,
  ingestMarkerKey,
  ingestMarkersPrefix,
  manifestObjectKey,
  parseChunkObjectKey,
  parseIngestMarkerKey,
  parseManifestObjectKey,
  tenantOfKey,
  tenantPrefix,
  validateDocumentId,
  validateTenant,
} from './keys.js';

const KEY = `ab${'0123456789abcdef'.repeat(3)}01234567890123`;

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
    assert.throws(
      () => validateTenant(bad),
      (e: unknown) => e instanceof InvalidKeyError && /tenant/.test(e.message),
      JSON.stringify(bad),
    );
    assert.throws(
      () => validateDocumentId(bad),
      (e: unknown) => e instanceof InvalidKeyError && /document/.test(e.message),
      JSON.stringify(bad),
    );
    assert.throws(() => manifestObjectKey('acme', bad), InvalidKeyError);
    assert.throws(() => chunkObjectKey(bad, KEY), InvalidKeyError);
  }
  for (const bad of ['', KEY.toUpperCase(), KEY.slice(1), `${KEY}0`, `../${KEY.slice(3)}`]) {
    assert.throws(() => chunkObjectKey('acme', bad), InvalidKeyError, JSON.stringify(bad));
  }
});

test('prefixes, ingest marker keys and the parsers that read keys back', () => {
  assert.equal(chunksPrefix('acme'), 'tenants/acme/chunks/');
  assert.equal(documentsPrefix('acme'), 'tenants/acme/documents/');
  assert.equal(ingestMarkersPrefix('acme'), 'tenants/acme/ingests/');
  const marker = ingestMarkerKey('acme', 'doc-1', 1_700_000_000_123, '0123456789abcdef');
  assert.equal(marker, 'tenants/acme/ingests/doc-1.1700000000123.0123456789abcdef');
  assert.deepEqual(parseIngestMarkerKey(marker), { tenant: 'acme', documentId: 'doc-1', startedAtMs: 1_700_000_000_123 });
  assert.throws(() => ingestMarkerKey('acme', 'doc-1', -1, '0123456789abcdef'), InvalidKeyError);
  assert.throws(() => ingestMarkerKey('acme', 'doc-1', 1, 'XYZ'), InvalidKeyError);
  assert.throws(() => ingestMarkerKey('acme', 'a.b', 1, '0123456789abcdef'), InvalidKeyError);
  assert.deepEqual(parseChunkObjectKey(chunkObjectKey('acme', KEY)), { tenant: 'acme', chunkKey: KEY });
  assert.deepEqual(parseManifestObjectKey(manifestObjectKey('acme', 'd_1')), { tenant: 'acme', documentId: 'd_1' });
  assert.equal(tenantOfKey(manifestObjectKey('t-2', 'x')), 't-2');
  for (const other of [
    `tenants/acme/chunks/cd/${KEY}`,
    `tenants/acme/chunks/ab/${KEY}.tmp`,
    'tenants/acme/documents/d/other.json',
    'tenants/acme/ingests/doc.12',
    'files/acme/x',
    `tenants/a.b/chunks/ab/${KEY}`,
  ]) {
    assert.equal(parseChunkObjectKey(other), null, other);
    assert.equal(parseManifestObjectKey(other), null, other);
    assert.equal(parseIngestMarkerKey(other), null, other);
  }
  assert.equal(tenantOfKey('files/acme/x'), null);
});
