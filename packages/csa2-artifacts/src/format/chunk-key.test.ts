/**
 * @module format/chunk-key.test
 * format/chunk-key: the hashed encoding, prefix sharing, model separation, boundary safety.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { ConfigError, InputError } from '@csa2/core';
import { InvalidKeyError } from '../errors.js';
import { chunkKey, fullChunkKeys } from './chunk-key.js';

const tokens = Array.from({ length: 100 }, (_, i) => (i * 7919) % 50000);

test('a chunk key is 64 lowercase hex chars and depends only on its inputs', () => {
  const k = chunkKey('model-a', null, tokens.slice(0, 16));
  assert.match(k, /^[0-9a-f]{64}$/);
  assert.equal(chunkKey('model-a', null, tokens.slice(0, 16)), k);
  assert.equal(chunkKey('model-a', null, Uint32Array.from(tokens.slice(0, 16))), k, 'arrays and typed arrays hash alike');
});

test('the hashed bytes are the documented length-prefixed encoding', () => {
  const u32 = (n: number): Buffer => {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(n);
    return b;
  };
  const ids = [1, 2, 2 ** 32 - 1];
  const prev = 'a'.repeat(64);
  const expected = createHash('sha256')
    .update(
      Buffer.concat([
        u32(17),
        Buffer.from('csa2/chunk-key/v2'),
        u32(1),
        Buffer.from('m'),
        u32(0),
        Buffer.of(1),
        u32(64),
        Buffer.from(prev),
        u32(3),
        ...ids.map(u32),
      ]),
    )
    .digest('hex');
  assert.equal(chunkKey('m', prev, ids), expected);
});

test('equal prefixes give equal keys; the first differing chunk and every later one get new keys', () => {
  const a = fullChunkKeys('model-a', tokens.slice(0, 80), 16);
  const b = fullChunkKeys('model-a', tokens.slice(0, 50).concat(tokens.slice(50).map((t) => t + 1)), 16);
  assert.equal(a.length, 5);
  assert.deepEqual(b.slice(0, 3), a.slice(0, 3), 'chunks [0, 48) hold equal tokens');
  for (let i = 3; i < 5; i++) assert.notEqual(b[i], a[i]);
  assert.deepEqual(fullChunkKeys('model-a', tokens, 16).slice(0, 5), a, 'a longer document reuses every full chunk of the prefix');
  assert.equal(fullChunkKeys('model-a', tokens, 16, 2).length, 2);
  // A change inside chunk 0 changes the key of every chunk after it (the chain).
  const changed = tokens.slice(0, 80);
  changed[3] = 4;
  const c = fullChunkKeys('model-a', changed, 16);
  for (let i = 0; i < 5; i++) assert.notEqual(c[i], a[i]);
});

test('another model gives other keys for every chunk', () => {
  const a = fullChunkKeys('model-a', tokens, 16);
  const b = fullChunkKeys('model-b', tokens, 16);
  for (let i = 0; i < a.length; i++) assert.notEqual(a[i], b[i]);
});

test('field boundaries cannot collide: the split of tokens and the previous key are part of the key', () => {
  const k12 = chunkKey('m', null, [1, 2]);
  const split = chunkKey('m', chunkKey('m', null, [1]), [2]);
  assert.notEqual(split, k12);
  assert.notEqual(chunkKey('m', null, []), chunkKey('m', null, [0]));
  assert.notEqual(chunkKey('ab', null, [1]), chunkKey('a', null, [1]));
  assert.notEqual(chunkKey('m', k12, [3]), chunkKey('m', null, [3]));
});

test('bad inputs are refused', () => {
  assert.throws(() => chunkKey('m', null, [2 ** 32]), InputError);
  assert.throws(() => chunkKey('m', null, [-1]), InputError);
  assert.throws(() => chunkKey('', null, [1]), ConfigError);
  assert.throws(() => chunkKey('m', 'not-a-key', [1]), InvalidKeyError);
});
