/**
 * @module token-lists
 * Big token lists (a document's or a long prompt's ids) travel from the gateway to the encoder through
 * the object store, not inside Redis job payloads (a 1M-token document is ~7 MB of JSON that Redis
 * would keep for hours). The gateway stores the list and puts a TokenListRef in the payload; the
 * worker reads it back (size and SHA-256 verified) and deletes it once the job is done for good.
 *
 * Object: `inputObjectKey(tenant, name)` (`tenants/<tenant>/inputs/<name>.u32`), the ids as uint32
 * little-endian, nothing else. The ref carries the count and the SHA-256 of those bytes.
 */
import { createHash } from 'node:crypto';
import { ArtifactCorruptError, InvalidKeyError } from './errors.js';
import { inputObjectKey, tenantPrefix } from './format/keys.js';
import type { ObjectStore } from './store/object-store.js';

/** Where a token list is stored, and what it must hash to. */
export interface TokenListRef {
  /** Object key (inputObjectKey). */
  readonly key: string;
  /** Number of token ids. */
  readonly count: number;
  /** Hex SHA-256 of the stored bytes. */
  readonly sha256: string;
}

function encode(ids: readonly number[]): Uint8Array {
  const bytes = new Uint8Array(ids.length * 4);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i] as number;
    if (!Number.isInteger(id) || id < 0 || id > 0xffffffff) throw new RangeError(`token id ${String(id)} at index ${i} is not a uint32`);
    view.setUint32(i * 4, id, true);
  }
  return bytes;
}

const sha256Hex = (bytes: Uint8Array): string => createHash('sha256').update(bytes).digest('hex');

/**
 * Stores `ids` as the input `name` of `tenant` (overwriting one of that name) and returns its ref.
 *
 * @example
 * const ref = await putTokenList(store, 'acme', 'doc.acme.manual', ids); // then { tokensRef: ref } in the payload
 */
export async function putTokenList(store: ObjectStore, tenant: string, name: string, ids: readonly number[]): Promise<TokenListRef> {
  const key = inputObjectKey(tenant, name);
  const bytes = encode(ids);
  await store.put(key, bytes);
  return { key, count: ids.length, sha256: sha256Hex(bytes) };
}

/**
 * Reads a token list back for `tenant` (a ref outside the tenant's prefix is refused), verifying its
 * size and SHA-256. Throws ObjectNotFoundError when it is gone, ArtifactCorruptError when it differs.
 */
export async function getTokenList(store: ObjectStore, tenant: string, ref: TokenListRef): Promise<number[]> {
  if (!ref.key.startsWith(`${tenantPrefix(tenant)}inputs/`)) throw new InvalidKeyError(ref.key, `not an input of tenant ${tenant}`);
  const bytes = await store.get(ref.key);
  if (bytes.length !== ref.count * 4)
    throw new ArtifactCorruptError(
      ref.key,
      Math.min(bytes.length, ref.count * 4),
      `token list is ${bytes.length} bytes, its ref says ${ref.count} ids (${ref.count * 4} bytes)`,
    );
  const digest = sha256Hex(bytes);
  if (digest !== ref.sha256) throw new ArtifactCorruptError(ref.key, 0, `token list hashes to ${digest}, its ref says ${ref.sha256}`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const ids = new Array<number>(ref.count);
  for (let i = 0; i < ref.count; i++) ids[i] = view.getUint32(i * 4, true);
  return ids;
}

/** Removes a stored token list (absent: nothing to do). */
export async function deleteTokenList(store: ObjectStore, ref: Pick<TokenListRef, 'key'>): Promise<void> {
  await store.delete(ref.key);
}
