/** Token lists through the object store: round trip, verification, tenant scoping, deletion. */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FsObjectStore } from './store/fs-store.js';
import { deleteTokenList, getTokenList, putTokenList } from './token-lists.js';

const dir = mkdtempSync(join(tmpdir(), 'csa2-token-lists-'));
const store = new FsObjectStore(dir, { durable: false });
after(() => rmSync(dir, { recursive: true, force: true }));

test("a token list round-trips through the store under the tenant's inputs, 4 bytes an id", async () => {
  const ids = Array.from({ length: 70_000 }, (_, i) => (i * 7919) % 129_280);
  const ref = await putTokenList(store, 'acme', 'doc.acme.manual', ids);
  assert.equal(ref.key, 'tenants/acme/inputs/doc.acme.manual.u32');
  assert.equal(ref.count, 70_000);
  assert.equal((await store.head(ref.key))?.sizeBytes, 280_000);
  assert.deepEqual(await getTokenList(store, 'acme', ref), ids);
  await deleteTokenList(store, ref);
  assert.equal(await store.head(ref.key), null);
});

test('a changed, truncated or foreign token list is refused', async () => {
  const ref = await putTokenList(store, 'acme', 'req.r1.prefill', [1, 2, 3, 4]);
  await assert.rejects(getTokenList(store, 'other', ref), (e: unknown) => (e as { code?: string }).code === 'store-config', 'another tenant cannot read it');
  await assert.rejects(getTokenList(store, 'acme', { ...ref, count: 5 }), (e: unknown) => (e as { code?: string }).code === 'artifact-corrupt');
  await store.put(ref.key, new Uint8Array([1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 9, 0, 0, 0]));
  await assert.rejects(getTokenList(store, 'acme', ref), (e: unknown) => (e as { code?: string }).code === 'artifact-corrupt');
  await store.delete(ref.key);
  await assert.rejects(getTokenList(store, 'acme', ref), (e: unknown) => (e as { code?: string }).code === 'not-found');
  await assert.rejects(putTokenList(store, 'acme', '../escape', [1]), (e: unknown) => (e as { code?: string }).code === 'store-config');
});
