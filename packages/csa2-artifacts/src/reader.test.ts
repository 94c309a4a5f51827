/**
 * @module reader.test
 * reader: prefix loads, refusals (document, sequence, model, version, manifest fields), corrupt and foreign chunks, the chunk cache, bounded gets; on the in-memory fake and the filesystem store.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ArtifactCorruptError, ModelMismatchError, ObjectNotFoundError, UnsupportedVersionError } from './errors.js';
import { createArtifactLayout } from './layout.js';
import { ChunkCache } from './chunk-cache.js';
import { chunkObjectKey, manifestObjectKey } from './format/keys.js';
import { ManifestFieldError, encodeManifest, type DocumentManifest } from './format/manifest.js';
import { SequenceStateError, appendPackedRows, appendTokenIds } from './format/sequence-rows.js';
import type { ObjectStore } from './store/object-store.js';
import { ArtifactReader } from './reader.js';
import { ArtifactWriter } from './writer.js';
import {
  STORE_FACTORIES,
  TrackingStore,
  assertSequencePrefix,
  emptySequence,
  syntheticSequence,
  tokensOf,
  withStore,
  TEST_LAYOUT as LAYOUT,
  TEST_CHUNK_TOKENS as C,
  TEST_DOC_TOKENS as DOC_TOKENS,
  TEST_TENANT as TENANT,
} from './testing/artifact-test-support.js';

async function writeDoc(
  store: ObjectStore,
  documentId: string,
  seed: number,
  tokens = DOC_TOKENS,
): Promise<{ seq: ReturnType<typeof syntheticSequence>; manifest: DocumentManifest }> {
  const seq = syntheticSequence(LAYOUT, tokens, seed);
  const manifest = await new ArtifactWriter({ store, layout: LAYOUT, tenant: TENANT, documentId, chunkTokens: C }).finish(seq);
  return { seq, manifest };
}

function chunkKeyOf(manifest: DocumentManifest, i: number): string {
  return chunkObjectKey(TENANT, manifest.chunks[i]?.key ?? assert.fail(`no chunk ${i}`));
}

function corruptAt(e: unknown, key: string, offset?: number, reason?: RegExp): boolean {
  return (
    e instanceof ArtifactCorruptError &&
    e.key === key &&
    e.message.includes(key) &&
    (offset === undefined || e.offset === offset) &&
    (reason?.test(e.message) ?? true)
  );
}

for (const factory of STORE_FACTORIES) {
  test(`${factory.name}: loadInto any prefix (uptoToken) gives exactly those tokens and the rows they complete`, async () => {
    await withStore(factory.open, async (store) => {
      const { seq, manifest } = await writeDoc(store, 'doc-1', 1);
      const reader = new ArtifactReader({ store, layout: LAYOUT });
      for (const upto of [0, 1, 63, 64, 65, 129, 192, 200, DOC_TOKENS]) {
        const loaded = emptySequence(LAYOUT);
        const stats = await reader.loadInto(loaded, manifest, { uptoToken: upto });
        assert.equal(stats.tokensLoaded, upto);
        assert.equal(stats.chunksLoaded, Math.ceil(upto / C));
        assertSequencePrefix(loaded, seq, LAYOUT, upto);
      }
      assert.deepEqual(await reader.readTokens(manifest), tokensOf(seq));
      await assert.rejects(reader.loadInto(emptySequence(LAYOUT), manifest, { uptoToken: DOC_TOKENS + 1 }), SequenceStateError);
    });
  });

  test(`${factory.name}: an absent document, a non-empty or mismatched sequence and another model are refused`, async () => {
    await withStore(factory.open, async (store) => {
      const { manifest } = await writeDoc(store, 'doc-1', 2);
      const reader = new ArtifactReader({ store, layout: LAYOUT });
      await assert.rejects(
        reader.readManifest(TENANT, 'nope'),
        (e: unknown) =>
          e instanceof ObjectNotFoundError && /document nope of tenant acme not found/.test(e.message) && e.key === manifestObjectKey(TENANT, 'nope'),
      );
      await assert.rejects(reader.readManifest('other', 'doc-1'), ObjectNotFoundError);
      const busy = emptySequence(LAYOUT);
      appendTokenIds(busy, [5]);
      await assert.rejects(reader.loadInto(busy, manifest), (e: unknown) => e instanceof SequenceStateError && /non-empty/.test(e.message));
      const rowsOnly = emptySequence(LAYOUT);
      appendPackedRows(rowsOnly, LAYOUT, 3, new Uint8Array(LAYOUT.mainKvRowBytes), new Uint8Array(LAYOUT.indexKRowBytes));
      await assert.rejects(reader.loadInto(rowsOnly, manifest), SequenceStateError);
      const otherShape = emptySequence(
        createArtifactLayout({
          ...LAYOUT,
          kvSources: [
            { layer: 1, ratio: 2 },
            { layer: 3, ratio: 2 },
          ],
        }),
      );
      await assert.rejects(reader.loadInto(otherShape, manifest), (e: unknown) => e instanceof SequenceStateError && /3:2/.test(e.message));

      const modelB = new ArtifactReader({ store, layout: createArtifactLayout({ ...LAYOUT, modelId: 'model-b' }) });
      await assert.rejects(modelB.readManifest(TENANT, 'doc-1'), (e: unknown) => e instanceof ModelMismatchError && /model-a/.test(e.message));
      // A manifest claiming model-b over model-a chunks: the chunks themselves are refused.
      await assert.rejects(
        modelB.loadInto(emptySequence(LAYOUT), { ...manifest, modelId: 'model-b' }),
        (e: unknown) => e instanceof ModelMismatchError && e.key === chunkKeyOf(manifest, 0),
      );
      const otherLayout = new ArtifactReader({ store, layout: createArtifactLayout({ ...LAYOUT, candidateBlockTokens: 8 }) });
      await assert.rejects(otherLayout.readManifest(TENANT, 'doc-1'), (e: unknown) => e instanceof ModelMismatchError && e.message.includes(LAYOUT.layoutId));
    });
  });

  test(`${factory.name}: a flipped byte in a chunk's header, payload or checksum, and a truncated chunk, are refused naming key and offset`, async () => {
    await withStore(factory.open, async (store) => {
      const { manifest } = await writeDoc(store, 'doc-1', 3);
      const reader = new ArtifactReader({ store, layout: LAYOUT });
      const key = chunkKeyOf(manifest, 2);
      const good = await store.get(key);
      const cases: Array<[string, Uint8Array, number, RegExp]> = [];
      for (const at of [3, 40, 700, good.length - 100, good.length - 1]) {
        const bad = good.slice();
        bad[at] = (bad[at] ?? 0) ^ 0x04;
        cases.push([`byte ${at}`, bad, at === 3 ? 3 : good.length - 32, at === 3 ? /magic/ : /checksum/]);
      }
      cases.push(['truncated', good.subarray(0, 1000), 1000, /ends at byte 1000/]);
      for (const [label, bad, offset, reason] of cases) {
        await store.put(key, bad);
        await assert.rejects(reader.loadInto(emptySequence(LAYOUT), manifest), (e: unknown) => corruptAt(e, key, offset, reason), label);
      }
      await store.put(key, good);
      await reader.loadInto(emptySequence(LAYOUT), manifest);
      await store.delete(key);
      await assert.rejects(reader.loadInto(emptySequence(LAYOUT), manifest), (e: unknown) => e instanceof ObjectNotFoundError && e.key === key);
    });
  });

  test(`${factory.name}: a valid chunk that is not the manifest's is refused (checksum, then the content key)`, async () => {
    await withStore(factory.open, async (store) => {
      const { manifest } = await writeDoc(store, 'doc-1', 4);
      const { manifest: other } = await writeDoc(store, 'doc-2', 5);
      const reader = new ArtifactReader({ store, layout: LAYOUT });
      const key = chunkKeyOf(manifest, 1);
      const foreign = await store.get(chunkKeyOf(other, 1)); // same token range, other tokens and rows
      await store.put(key, foreign);
      await assert.rejects(reader.loadInto(emptySequence(LAYOUT), manifest), (e: unknown) =>
        corruptAt(e, key, foreign.length - 32, /differs from the manifest/),
      );
      const forged: DocumentManifest = { ...manifest, chunks: manifest.chunks.map((c, i) => (i === 1 ? { ...c, sha256: other.chunks[1]?.sha256 ?? '' } : c)) };
      await assert.rejects(reader.loadInto(emptySequence(LAYOUT), forged), (e: unknown) => corruptAt(e, key, undefined, /do not hash to the chunk key/));
      const shifted = await store.get(chunkKeyOf(manifest, 0));
      await store.put(key, shifted); // chunk 0's object under chunk 1's key
      await assert.rejects(reader.loadInto(emptySequence(LAYOUT), manifest), (e: unknown) => corruptAt(e, key, 14, /tokens \[0, 64\)/));
    });
  });

  test(`${factory.name}: manifest problems: unknown version, bad field, other document, unusable chunk size`, async () => {
    await withStore(factory.open, async (store) => {
      const { manifest } = await writeDoc(store, 'doc-1', 6);
      const reader = new ArtifactReader({ store, layout: LAYOUT });
      const key = manifestObjectKey(TENANT, 'doc-1');
      await store.put(key, encodeManifest({ ...manifest, formatVersion: 2 }));
      await assert.rejects(reader.readManifest(TENANT, 'doc-1'), (e: unknown) => e instanceof UnsupportedVersionError && e.version === 2 && e.key === key);
      await store.put(key, encodeManifest({ ...manifest, documentId: 'doc-9' }));
      await assert.rejects(reader.readManifest(TENANT, 'doc-1'), (e: unknown) => e instanceof ManifestFieldError && e.field === 'documentId');
      const bad = JSON.parse(new TextDecoder().decode(encodeManifest(manifest))) as Record<string, unknown>;
      delete bad['tokenCount'];
      await store.put(key, new TextEncoder().encode(JSON.stringify(bad)));
      await assert.rejects(reader.readManifest(TENANT, 'doc-1'), (e: unknown) => e instanceof ManifestFieldError && e.field === 'tokenCount' && e.key === key);
      // chunkTokens 6 is consistent within the manifest but not a multiple of the candidate block size.
      const six: DocumentManifest = { ...manifest, tokenCount: 6, chunkTokens: 6, chunks: [{ ...(manifest.chunks[0] ?? assert.fail()), endToken: 6 }] };
      await store.put(key, encodeManifest(six));
      await assert.rejects(reader.readManifest(TENANT, 'doc-1'), (e: unknown) => e instanceof ManifestFieldError && e.field === 'chunkTokens');
    });
  });

  test(`${factory.name}: through a chunk cache the second load fetches nothing`, async () => {
    await withStore(factory.open, async (inner) => {
      const { seq, manifest } = await writeDoc(inner, 'doc-1', 7);
      const store = new TrackingStore(inner);
      const cache = new ChunkCache({ maxBytes: 1 << 20 });
      const reader = new ArtifactReader({ store, layout: LAYOUT, cache });
      const first = await reader.loadInto(emptySequence(LAYOUT), manifest);
      assert.deepEqual([first.cacheHits, first.chunksLoaded], [0, 4]);
      assert.equal(
        first.bytesFetched,
        manifest.chunks.reduce((s, c) => s + c.sizeBytes, 0),
      );
      const again = emptySequence(LAYOUT);
      const second = await reader.loadInto(again, manifest);
      assert.deepEqual([second.cacheHits, second.bytesFetched], [4, 0]);
      assertSequencePrefix(again, seq, LAYOUT);
      assert.deepEqual([cache.stats.hits, cache.stats.misses, cache.stats.entries], [4, 4, 4]);
      // A cached object is still checked against the manifest it is loaded for.
      const forged = { ...manifest, chunks: manifest.chunks.map((c, i) => (i === 3 ? { ...c, sha256: '0'.repeat(64) } : c)) };
      await assert.rejects(reader.loadInto(emptySequence(LAYOUT), forged), ArtifactCorruptError);
      // A small cache evicts; corrupt objects never enter it.
      const small = new ChunkCache({ maxBytes: (manifest.chunks[0]?.sizeBytes ?? 0) * 2 });
      const r2 = new ArtifactReader({ store, layout: LAYOUT, cache: small });
      await r2.loadInto(emptySequence(LAYOUT), manifest);
      assert.deepEqual([small.stats.entries, small.stats.evictions], [2, 2], 'room for two chunks: four loaded, two evicted');
      assert.ok(small.stats.bytes <= small.maxBytes);
      const key = chunkKeyOf(manifest, 0);
      const good = await inner.get(key);
      const bad = good.slice();
      bad[100] = (bad[100] ?? 0) ^ 1;
      await inner.put(key, bad);
      const fresh = new ChunkCache({ maxBytes: 1 << 20 });
      await assert.rejects(new ArtifactReader({ store, layout: LAYOUT, cache: fresh }).loadInto(emptySequence(LAYOUT), manifest), ArtifactCorruptError);
      assert.equal(fresh.has(key), false);
    });
  });

  test(`${factory.name}: at most maxInFlightGets chunk fetches at once, with size hints, rows appended in order`, async () => {
    await withStore(factory.open, async (inner) => {
      const { seq, manifest } = await writeDoc(inner, 'doc-1', 8, 9 * C + 3);
      const store = new TrackingStore(inner, 10);
      const loaded = emptySequence(LAYOUT);
      await new ArtifactReader({ store, layout: LAYOUT, maxInFlightGets: 3 }).loadInto(loaded, manifest);
      assert.equal(store.maxGetsInFlight, 3);
      assert.deepEqual(
        store.getHints,
        manifest.chunks.map((c) => c.sizeBytes),
        'each get carries the manifest size as a hint (S3: ranged parts)',
      );
      assert.ok(
        store.getIntoBuffers.size <= 4,
        `${store.getIntoBuffers.size} buffers for ${manifest.chunks.length} chunks: at most maxInFlightGets + 1, reused`,
      );
      assertSequencePrefix(loaded, seq, LAYOUT);
    });
  });
}

test('a corrupt chunk while later fetches are in flight rejects once, with no unhandled rejection', async () => {
  const opened = await STORE_FACTORIES[0]?.open();
  assert.ok(opened !== undefined);
  const { manifest } = await writeDoc(opened.store, 'doc-1', 9, 9 * C);
  for (const i of [1, 2, 3]) {
    const key = chunkKeyOf(manifest, i);
    const bytes = await opened.store.get(key);
    await opened.store.put(key, bytes.subarray(0, 10));
  }
  let unhandled = 0;
  const onUnhandled = (): void => {
    unhandled++;
  };
  process.on('unhandledRejection', onUnhandled);
  try {
    const reader = new ArtifactReader({ store: new TrackingStore(opened.store, 5), layout: LAYOUT, maxInFlightGets: 4 });
    await assert.rejects(reader.loadInto(emptySequence(LAYOUT), manifest), (e: unknown) => corruptAt(e, chunkKeyOf(manifest, 1), 10));
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(unhandled, 0);
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
  await opened.cleanup();
});
