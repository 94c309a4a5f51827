/**
 * @module format/chunk-key
 * Content addresses of chunks: key = hex SHA-256 over a length-prefixed encoding of (model id,
 * previous chunk key or none, the chunk's token ids). Chaining the previous key makes a key name the
 * whole token prefix up to the chunk's end, so equal prefixes give equal keys and an appended query
 * reuses every full chunk of the document it extends. Length prefixes keep field boundaries from
 * colliding (model "ab" + tokens [..] never hashes like model "a" + other bytes).
 *
 * A chunk's bytes are a function of its key: every encoder that writes under a model id writes the
 * same bytes for the same tokens, whatever the store held before (the engine's ingest continues after
 * a stored prefix in exactly a straight encode's state). An encoder whose numerics differ writes
 * under a name of its own (the layout's `encoder`, hashed into the key) or, when the decoder's numerics
 * differ too (fp32), under a model id of its own. The domain tag's version changes
 * whenever what a key names changes: "v1" keys named chunks whose bytes depended on the ingest history
 * (a continuation replayed only the last 128 tokens), so "v2" keys never find them.
 *
 * Hashed bytes (little-endian):
 *
 * | size       | field                                                 |
 * |------------|-------------------------------------------------------|
 * | 4 + 17     | u32 length + ASCII domain tag "csa2/chunk-key/v2" |
 * | 4 + M      | u32 length + model id (ASCII)                         |
 * | 4 + N      | u32 length + encoder name (ASCII, empty: the reference) |
 * | 1          | 0 = first chunk, 1 = a previous key follows           |
 * | (4 + 64)   | u32 length + previous key (ASCII hex), when present   |
 * | 4 + 4·T    | u32 token count T + T token ids (u32)                 |
 */
import { createHash } from 'node:crypto';
import { InputError } from '@csa2/core';
import { validateEncoderName, validateModelId } from '../layout.js';
import { validateChunkKey } from './keys.js';

const DOMAIN_TAG = 'csa2/chunk-key/v2';
const U32_LIMIT = 2 ** 32;

function u32(value: number): Uint8Array {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setUint32(0, value, true);
  return out;
}

function lengthPrefixedAscii(text: string): Uint8Array[] {
  const bytes = Buffer.from(text, 'ascii');
  return [u32(bytes.length), bytes];
}

/** Refuses a token id that is not an integer in [0, 2^32); `label` says where it came from. */
export function checkTokenId(id: number, index: number, label: string): void {
  if (!Number.isInteger(id) || id < 0 || id >= U32_LIMIT) {
    throw new InputError(`${label}: token id at index ${index} is ${id}; token ids must be integers in [0, 2^32)`);
  }
}

/** True on little-endian hosts, where a Uint32Array's bytes are the format's byte order. */
const HOST_IS_LITTLE_ENDIAN = new Uint8Array(Uint32Array.of(1).buffer)[0] === 1;

/**
 * Writes token ids as little-endian u32 at `bytesU8[offset…]`, refusing ids outside [0, 2^32)
 * (InputError naming `label` and the index). A Uint32Array on a little-endian host is one byte copy.
 */
export function writeTokenIdsLe(tokenIds: ArrayLike<number>, bytesU8: Uint8Array, offset: number, label = 'token ids'): void {
  const n = tokenIds.length;
  if (tokenIds instanceof Uint32Array && HOST_IS_LITTLE_ENDIAN) {
    bytesU8.set(new Uint8Array(tokenIds.buffer, tokenIds.byteOffset, 4 * n), offset);
    return;
  }
  const view = new DataView(bytesU8.buffer, bytesU8.byteOffset + offset, 4 * n);
  for (let i = 0; i < n; i++) {
    const id = tokenIds[i] ?? -1;
    checkTokenId(id, i, label);
    view.setUint32(4 * i, id, true);
  }
}

/** `count` little-endian u32 token ids at `bytesU8[offset…]`, as a new Uint32Array (one byte copy on little-endian hosts). */
export function readTokenIdsLe(bytesU8: Uint8Array, offset: number, count: number): Uint32Array {
  const out = new Uint32Array(count);
  if (HOST_IS_LITTLE_ENDIAN) {
    new Uint8Array(out.buffer).set(bytesU8.subarray(offset, offset + 4 * count));
    return out;
  }
  const view = new DataView(bytesU8.buffer, bytesU8.byteOffset + offset, 4 * count);
  for (let i = 0; i < count; i++) out[i] = view.getUint32(4 * i, true);
  return out;
}

/** Token ids as little-endian u32 bytes (refusing ids outside [0, 2^32)). */
export function tokenIdsToBytes(tokenIds: ArrayLike<number>, label = 'token ids'): Uint8Array {
  const out = new Uint8Array(tokenIds.length * 4);
  writeTokenIdsLe(tokenIds, out, 0, label);
  return out;
}

/**
 * Content key of a chunk (64 lowercase hex chars).
 *
 * @example
 * const k0 = chunkKey(modelId, null, tokens.slice(0, C));
 * const k1 = chunkKey(modelId, k0, tokens.slice(C, 2 * C));
 */
export function chunkKey(modelId: string, previousKey: string | null, tokenIds: ArrayLike<number>, encoder = ''): string {
  validateModelId(modelId);
  validateEncoderName(encoder);
  const hash = createHash('sha256');
  for (const part of lengthPrefixedAscii(DOMAIN_TAG)) hash.update(part);
  for (const part of lengthPrefixedAscii(modelId)) hash.update(part);
  for (const part of lengthPrefixedAscii(encoder)) hash.update(part);
  if (previousKey === null) hash.update(Uint8Array.of(0));
  else {
    validateChunkKey(previousKey);
    hash.update(Uint8Array.of(1));
    for (const part of lengthPrefixedAscii(previousKey)) hash.update(part);
  }
  hash.update(u32(tokenIds.length));
  hash.update(tokenIdsToBytes(tokenIds, 'chunkKey'));
  return hash.digest('hex');
}

/**
 * Keys of the full chunks of a token sequence: chunk i covers [i·C, (i+1)·C); a trailing partial
 * chunk is not included (`maxChunks` stops early).
 */
export function fullChunkKeys(modelId: string, tokenIds: ArrayLike<number>, chunkTokens: number, maxChunks = Infinity, encoder = ''): string[] {
  const keys: string[] = [];
  let previous: string | null = null;
  for (let start = 0; start + chunkTokens <= tokenIds.length && keys.length < maxChunks; start += chunkTokens) {
    previous = chunkKey(modelId, previous, sliceIds(tokenIds, start, start + chunkTokens), encoder);
    keys.push(previous);
  }
  return keys;
}

/** Ids [start, end) of an array-like (a view of a typed array, a copy of the range otherwise). */
function sliceIds(tokenIds: ArrayLike<number>, start: number, end: number): ArrayLike<number> {
  if (Array.isArray(tokenIds)) return (tokenIds as readonly number[]).slice(start, end);
  if (tokenIds instanceof Uint32Array || tokenIds instanceof Int32Array || tokenIds instanceof Float64Array) return tokenIds.subarray(start, end);
  return Array.from({ length: end - start }, (_, i) => tokenIds[start + i] ?? -1);
}
