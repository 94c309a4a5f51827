/**
 * @module format/manifest.test
 * format/manifest: round trip and a named error for every missing, mistyped or inconsistent field.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ArtifactCorruptError, UnsupportedVersionError } from '../errors.js';
import { ManifestFieldError, encodeManifest, parseManifest, type DocumentManifest } from './manifest.js';

const KEY = 'tenants/acme/documents/doc-1/manifest.json';
const hex = (c: string): string => c.repeat(64);

const MANIFEST: DocumentManifest = {
  formatVersion: 1,
  modelId: 'model-a',
  layoutId: '0123456789abcdef',
  tenant: 'acme',
  documentId: 'doc-1',
  tokenCount: 37,
  chunkTokens: 16,
  chunks: [
    { key: hex('a'), startToken: 0, endToken: 16, sizeBytes: 1000, sha256: hex('1') },
    { key: hex('b'), startToken: 16, endToken: 32, sizeBytes: 1000, sha256: hex('2') },
    { key: hex('c'), startToken: 32, endToken: 37, sizeBytes: 300, sha256: hex('3') },
  ],
  createdAt: '2025-03-01T12:00:00.000Z',
};

type Json = Record<string, unknown> & { chunks: Array<Record<string, unknown>> };

function mutated(edit: (m: Json) => void): Uint8Array {
  const m = JSON.parse(new TextDecoder().decode(encodeManifest(MANIFEST))) as Json;
  edit(m);
  return new TextEncoder().encode(JSON.stringify(m));
}

function assertField(bytes: Uint8Array, field: string, reason?: RegExp): void {
  assert.throws(
    () => parseManifest(KEY, bytes),
    (e: unknown) =>
      e instanceof ManifestFieldError &&
      e instanceof ArtifactCorruptError &&
      e.field === field &&
      e.key === KEY &&
      e.message.includes(field) &&
      (reason?.test(e.message) ?? true),
    field,
  );
}

test('encode → parse round trip', () => {
  const bytes = encodeManifest(MANIFEST);
  assert.deepEqual(parseManifest(KEY, bytes), MANIFEST);
  assert.deepEqual(Object.keys(JSON.parse(new TextDecoder().decode(bytes)) as object), [
    'formatVersion',
    'modelId',
    'layoutId',
    'tenant',
    'documentId',
    'tokenCount',
    'chunkTokens',
    'chunks',
    'createdAt',
  ]);
  const empty: DocumentManifest = { ...MANIFEST, tokenCount: 0, chunks: [] };
  assert.deepEqual(parseManifest(KEY, encodeManifest(empty)), empty);
});

test('every missing or mistyped field is named', () => {
  const top = ['formatVersion', 'modelId', 'layoutId', 'tenant', 'documentId', 'tokenCount', 'chunkTokens', 'chunks', 'createdAt'];
  for (const field of top) {
    assertField(
      mutated((m) => delete m[field]),
      field,
      /missing/,
    );
    assertField(
      mutated((m) => (m[field] = field === 'chunks' ? {} : field.endsWith('Id') || field === 'tenant' || field === 'createdAt' ? 7 : 'x')),
      field,
    );
  }
  for (const field of ['key', 'startToken', 'endToken', 'sizeBytes', 'sha256']) {
    assertField(
      mutated((m) => delete m.chunks[1]?.[field]),
      `chunks[1].${field}`,
      /missing/,
    );
    assertField(
      mutated((m) => ((m.chunks[1] as Record<string, unknown>)[field] = field === 'key' || field === 'sha256' ? 12 : '16')),
      `chunks[1].${field}`,
    );
  }
  assertField(
    mutated((m) => (m.chunks[2] = 'x' as unknown as Record<string, unknown>)),
    'chunks[2]',
  );
});

test('impossible values are named', () => {
  assertField(
    mutated((m) => (m['modelId'] = 'has space')),
    'modelId',
  );
  assertField(
    mutated((m) => (m['tenant'] = '../x')),
    'tenant',
  );
  assertField(
    mutated((m) => (m['documentId'] = 'a'.repeat(65))),
    'documentId',
  );
  assertField(
    mutated((m) => (m['tokenCount'] = -1)),
    'tokenCount',
  );
  assertField(
    mutated((m) => (m['tokenCount'] = 1.5)),
    'tokenCount',
  );
  assertField(
    mutated((m) => (m['chunkTokens'] = 0)),
    'chunkTokens',
  );
  assertField(
    mutated((m) => (m['createdAt'] = 'yesterday')),
    'createdAt',
  );
  assertField(
    mutated((m) => (m['createdAt'] = '2025-13-45T99:00:00Z')),
    'createdAt',
  );
  assertField(
    mutated((m) => ((m.chunks[0] as Record<string, unknown>)['key'] = hex('A'))),
    'chunks[0].key',
  );
  assertField(
    mutated((m) => ((m.chunks[0] as Record<string, unknown>)['sha256'] = 'abc')),
    'chunks[0].sha256',
  );
  assertField(
    mutated((m) => ((m.chunks[0] as Record<string, unknown>)['sizeBytes'] = 0)),
    'chunks[0].sizeBytes',
  );
});

test('chunks must be contiguous from 0 to tokenCount, every one C tokens but the last', () => {
  assertField(
    mutated((m) => (m['tokenCount'] = 60)),
    'chunks',
    /4/,
  );
  assertField(
    mutated((m) => (m['tokenCount'] = 32)),
    'chunks',
    /2/,
  );
  assertField(
    mutated((m) => (m['tokenCount'] = 47)),
    'chunks[2].endToken',
    /must be 47/,
  );
  assertField(
    mutated((m) => (m['tokenCount'] = 38)),
    'chunks[2].endToken',
  );
  assertField(
    mutated((m) => (m['chunkTokens'] = 12)),
    'chunks',
    /3 entries/,
  );
  assertField(
    mutated((m) => (m['chunkTokens'] = 15)),
    'chunks[0].endToken',
    /must be 15/,
  );
  assertField(
    mutated((m) => ((m.chunks[1] as Record<string, unknown>)['startToken'] = 17)),
    'chunks[1].startToken',
    /contiguous/,
  );
  assertField(
    mutated((m) => ((m.chunks[0] as Record<string, unknown>)['endToken'] = 15)),
    'chunks[0].endToken',
  );
  assertField(
    mutated((m) => m.chunks.reverse()),
    'chunks[0].startToken',
  );
  assertField(
    mutated((m) => m.chunks.pop()),
    'chunks',
  );
});

test('another format version is UnsupportedVersionError; bad bytes are ArtifactCorruptError with an offset', () => {
  assert.throws(
    () =>
      parseManifest(
        KEY,
        mutated((m) => (m['formatVersion'] = 2)),
      ),
    (e: unknown) => e instanceof UnsupportedVersionError && e.version === 2 && e.key === KEY,
  );
  const text = new TextDecoder().decode(encodeManifest(MANIFEST));
  const truncated = new TextEncoder().encode(text.slice(0, 120));
  assert.throws(
    () => parseManifest(KEY, truncated),
    (e: unknown) => e instanceof ArtifactCorruptError && e.key === KEY && /JSON/.test(e.message) && e.offset > 0,
  );
  assert.throws(
    () => parseManifest(KEY, Uint8Array.of(0x7b, 0xff, 0x7d)),
    (e: unknown) => e instanceof ArtifactCorruptError && /UTF-8/.test(e.message),
  );
  assertField(new TextEncoder().encode('[1, 2]'), '(root)');
});

test('unknown extra fields are ignored', () => {
  assert.deepEqual(
    parseManifest(
      KEY,
      mutated((m) => (m['comment'] = 'added later')),
    ),
    MANIFEST,
  );
});

test('the optional stored encoder tail: round trip, and every bad field named', () => {
  const withTail: DocumentManifest = { ...MANIFEST, tail: { key: hex('d'), sizeBytes: 4096, replayTokens: 16 } };
  const bytes = encodeManifest(withTail);
  assert.deepEqual(parseManifest(KEY, bytes), withTail);
  assert.equal(Object.keys(JSON.parse(new TextDecoder().decode(bytes)) as object).at(-1), 'tail');
  const edit = (f: (t: Record<string, unknown>) => void): Uint8Array => {
    const m = JSON.parse(new TextDecoder().decode(bytes)) as Record<string, unknown>;
    f(m['tail'] as Record<string, unknown>);
    return new TextEncoder().encode(JSON.stringify(m));
  };
  assertField(
    edit((t) => delete t['key']),
    'tail.key',
    /missing/,
  );
  assertField(
    edit((t) => (t['key'] = 'ABC')),
    'tail.key',
  );
  assertField(
    edit((t) => (t['sizeBytes'] = 0)),
    'tail.sizeBytes',
  );
  assertField(
    edit((t) => (t['replayTokens'] = 0)),
    'tail.replayTokens',
  );
  assertField(
    edit((t) => (t['replayTokens'] = 38)),
    'tail.replayTokens',
    /at most tokenCount 37/,
  );
  const notObject = JSON.parse(new TextDecoder().decode(bytes)) as Record<string, unknown>;
  notObject['tail'] = [1];
  assertField(new TextEncoder().encode(JSON.stringify(notObject)), 'tail', /object/);
});
