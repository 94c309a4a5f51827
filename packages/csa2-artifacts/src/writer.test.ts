/**
 * @module writer.test
 * writer: incremental writes, manifest last, idempotency, prefix reuse, bounded puts, repair of stored chunks, refusals, bytes per token; on the in-memory fake and the filesystem store.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { ConfigError } from '@csa2/core';
import { InvalidKeyError, StoreUnavailableError } from './errors.js';
import { bytesPerToken, createArtifactLayout } from './layout.js';
import { chunkHeaderBytes, chunkObjectBytes, chunkTrailerHex } from './format/chunk-codec.js';
import { fullChunkKeys } from './format/chunk-key.js';
import { chunkObjectKey, ingestMarkersPrefix, manifestObjectKey, tenantPrefix } from './format/keys.js';
import { keyAndSize } from './testing/store-conformance.js';
import { parseManifest } from './format/manifest.js';
import { SequenceStateError, sequenceEntryCount, sequenceLength, truncateEntries } from './format/sequence-rows.js';
import { ArtifactReader } from './reader.js';
import { ArtifactWriter, existingChunkPrefix } from './writer.js';
import {
  STORE_FACTORIES,
  TrackingStore,
  assertSequencePrefix,
  bytesUnder,
  emptySequence,
  growTo,
  sequencePrefix,
  syntheticSequence,
  tokensOf,
  withStore,
  TEST_LAYOUT as LAYOUT,
  TEST_CHUNK_TOKENS as C,
  TEST_DOC_TOKENS as DOC_TOKENS,
  TEST_TENANT as TENANT,
} from './testing/artifact-test-support.js';

const FIXED_NOW = (): Date => new Date('2025-03-01T12:00:00.000Z');

for (const factory of STORE_FACTORIES) {
  test(`${factory.name}: incremental writes, then partial chunk and manifest; the reader restores every token and row bit for bit`, async () => {
    await withStore(factory.open, async (store) => {
      const full = syntheticSequence(LAYOUT, DOC_TOKENS, 1);
      const seq = emptySequence(LAYOUT);
      const writer = new ArtifactWriter({ store, layout: LAYOUT, tenant: TENANT, documentId: 'doc-1', chunkTokens: C, now: FIXED_NOW });
      for (const upto of [10, 63, 64, 65, 100, 128, 200, DOC_TOKENS]) {
        growTo(seq, full, LAYOUT, upto);
        await writer.writeAvailable(seq, upto);
        const fullChunks = Math.floor(upto / C);
        assert.equal(writer.stats.tokensWritten, fullChunks * C, `after ${upto} tokens`);
        assert.equal((await store.list(`${tenantPrefix(TENANT)}chunks/`)).length, fullChunks, `chunk objects after ${upto} tokens`);
      }
      assert.equal(await store.head(manifestObjectKey(TENANT, 'doc-1')), null, 'no manifest before finish');
      const manifest = await writer.finish(seq);
      assert.equal(manifest.tokenCount, DOC_TOKENS);
      assert.deepEqual(
        manifest.chunks.map((c) => [c.startToken, c.endToken]),
        [
          [0, 64],
          [64, 128],
          [128, 192],
          [192, 229],
        ],
      );
      assert.deepEqual(
        manifest.chunks.slice(0, 3).map((c) => c.key),
        fullChunkKeys('model-a', tokensOf(full), C),
      );
      for (const c of manifest.chunks) {
        const bytes = await store.get(chunkObjectKey(TENANT, c.key));
        assert.equal(c.sizeBytes, bytes.length);
        assert.equal(c.sha256, chunkTrailerHex(bytes));
        assert.equal(
          c.sha256,
          createHash('sha256')
            .update(bytes.subarray(0, bytes.length - 32))
            .digest('hex'),
        );
      }
      assert.deepEqual(parseManifest('k', await store.get(manifestObjectKey(TENANT, 'doc-1'))), manifest);
      assert.equal(writer.stats.chunksWritten, 4);
      assert.equal(writer.stats.bytesWritten, await bytesUnder(store, tenantPrefix(TENANT)));

      const reader = new ArtifactReader({ store, layout: LAYOUT });
      const loaded = emptySequence(LAYOUT);
      const stats = await reader.loadInto(loaded, await reader.readManifest(TENANT, 'doc-1'));
      assert.deepEqual([stats.chunksLoaded, stats.tokensLoaded], [4, DOC_TOKENS]);
      assertSequencePrefix(loaded, full, LAYOUT);
      assert.equal(sequenceEntryCount(loaded, 1), 114, 'floor(229 / 2) ratio-2 entries');
    });
  });

  test(`${factory.name}: writing the same document again writes 0 bytes and keeps the manifest`, async () => {
    await withStore(factory.open, async (store) => {
      const seq = syntheticSequence(LAYOUT, DOC_TOKENS, 2);
      const first = new ArtifactWriter({ store, layout: LAYOUT, tenant: TENANT, documentId: 'doc-1', chunkTokens: C, now: FIXED_NOW });
      const m1 = await first.finish(seq);
      const before = (await store.list('')).map(keyAndSize);
      const again = new ArtifactWriter({
        store,
        layout: LAYOUT,
        tenant: TENANT,
        documentId: 'doc-1',
        chunkTokens: C,
        now: () => new Date('2026-01-01T00:00:00Z'),
      });
      const m2 = await again.finish(seq);
      assert.deepEqual(m2, m1, 'the existing manifest (with its createdAt) stands');
      assert.equal(again.stats.bytesWritten, 0);
      assert.deepEqual([again.stats.chunksWritten, again.stats.chunksSkipped, again.stats.chunksSkippedDiffering], [0, 4, 0]);
      assert.equal(again.stats.chunkBytesSkipped, first.stats.chunkBytesWritten);
      assert.deepEqual((await store.list('')).map(keyAndSize), before, 'the same objects (the ingest marker is gone again)');
    });
  });

  test(`${factory.name}: a document extending another's prefix skips the shared full chunks`, async () => {
    await withStore(factory.open, async (store) => {
      const docB = syntheticSequence(LAYOUT, 300, 3);
      const docA = sequencePrefix(docB, LAYOUT, DOC_TOKENS);
      const a = await new ArtifactWriter({ store, layout: LAYOUT, tenant: TENANT, documentId: 'doc-a', chunkTokens: C }).finish(docA);
      assert.equal(await existingChunkPrefix(store, LAYOUT, TENANT, tokensOf(docB), C), 3);
      assert.equal(await existingChunkPrefix(store, LAYOUT, 'other-tenant', tokensOf(docB), C), 0, 'chunks are shared within a tenant only');
      const writerB = new ArtifactWriter({ store, layout: LAYOUT, tenant: TENANT, documentId: 'doc-b', chunkTokens: C });
      const b = await writerB.finish(docB);
      assert.deepEqual([writerB.stats.chunksSkipped, writerB.stats.chunksWritten], [3, 2]);
      assert.deepEqual(b.chunks.slice(0, 3), a.chunks.slice(0, 3));
      assert.equal(await existingChunkPrefix(store, LAYOUT, TENANT, tokensOf(docB), C), 4);

      const reader = new ArtifactReader({ store, layout: LAYOUT });
      const loadedB = emptySequence(LAYOUT);
      await reader.loadInto(loadedB, await reader.readManifest(TENANT, 'doc-b'));
      assertSequencePrefix(loadedB, docB, LAYOUT);
      // The encoder's reuse path: load the existing prefix by content key, no manifest involved.
      const resumed = emptySequence(LAYOUT);
      const stats = await reader.loadChunkPrefix(resumed, { tenant: TENANT, tokenIds: tokensOf(docB), chunkTokens: C, chunkCount: 3 });
      assert.equal(stats.tokensLoaded, 3 * C);
      assertSequencePrefix(resumed, docB, LAYOUT, 3 * C);
      // ...then adopts those chunks instead of packing them again, and writes the rest
      const writerC = new ArtifactWriter({ store, layout: LAYOUT, tenant: TENANT, documentId: 'doc-c', chunkTokens: C });
      await writerC.adoptStoredChunks(resumed, 3);
      await assert.rejects(writerC.adoptStoredChunks(resumed, 1), /before any other write/);
      const c = await new ArtifactWriter({ store, layout: LAYOUT, tenant: TENANT, documentId: 'doc-c2', chunkTokens: C })
        .adoptStoredChunks(emptySequence(LAYOUT), 1)
        .then(
          () => 'adopted',
          (error: unknown) => String(error),
        );
      assert.match(c, /cannot adopt 1 chunks/);
      const writerD = new ArtifactWriter({ store, layout: LAYOUT, tenant: TENANT, documentId: 'doc-d', chunkTokens: C });
      await writerD.adoptStoredChunks(resumed, 3);
      growTo(resumed, docB, LAYOUT, sequenceLength(docB));
      const d = await writerD.finish(resumed);
      assert.deepEqual(d.chunks, b.chunks, 'the same manifest chunks as writing everything');
      assert.deepEqual([writerD.stats.chunksSkipped, writerD.stats.chunksWritten], [5, 0]);
      // a chunk that is not stored cannot be adopted
      const other = syntheticSequence(LAYOUT, 2 * C, 9);
      await assert.rejects(
        new ArtifactWriter({ store, layout: LAYOUT, tenant: TENANT, documentId: 'doc-e', chunkTokens: C }).adoptStoredChunks(other, 1),
        /not found/,
      );
    });
  });

  test(`${factory.name}: at most maxInFlightPuts chunk puts at once, and the manifest goes last`, async () => {
    await withStore(factory.open, async (inner) => {
      const store = new TrackingStore(inner, 15);
      const seq = syntheticSequence(LAYOUT, 10 * C + 5, 4);
      const writer = new ArtifactWriter({ store, layout: LAYOUT, tenant: TENANT, documentId: 'doc-1', chunkTokens: C, maxInFlightPuts: 3 });
      await writer.finish(seq);
      assert.equal(store.maxPutsInFlight, 3);
      assert.ok(store.chunkPutBuffers.size <= 3, `${store.chunkPutBuffers.size} buffers for 11 chunks: one per put in flight, reused`);
      const last = store.putLog.at(-1);
      assert.equal(last?.key, manifestObjectKey(TENANT, 'doc-1'));
      assert.equal(last?.putsInFlight, 0, 'every chunk put had finished before the manifest put started');
      assert.equal(store.putLog.length, 13, 'the ingest marker, 11 chunks, the manifest');
      assert.match(store.putLog[0]?.key ?? '', /^tenants\/acme\/ingests\/doc-1\.\d+\.[0-9a-f]{16}$/, 'the marker goes first');
      assert.deepEqual(await store.list(ingestMarkersPrefix(TENANT)), [], 'and is deleted after the manifest');
    });
  });

  test(`${factory.name}: a corrupt stored chunk is replaced; a valid one with other bytes is kept and recorded as stored`, async () => {
    await withStore(factory.open, async (store) => {
      const seq = syntheticSequence(LAYOUT, DOC_TOKENS, 5);
      const m1 = await new ArtifactWriter({ store, layout: LAYOUT, tenant: TENANT, documentId: 'doc-1', chunkTokens: C }).finish(seq);
      const key1 = chunkObjectKey(TENANT, m1.chunks[1]?.key ?? '');
      const good = await store.get(key1);
      // A flipped checksum byte: the trailer no longer matches, the object is fetched, found corrupt, replaced.
      const badTrailer = good.slice();
      badTrailer[good.length - 5] = (badTrailer[good.length - 5] ?? 0) ^ 0x10;
      await store.put(key1, badTrailer);
      const repair = new ArtifactWriter({ store, layout: LAYOUT, tenant: TENANT, documentId: 'doc-1', chunkTokens: C });
      await repair.finish(seq);
      assert.deepEqual([repair.stats.chunksRepaired, repair.stats.chunksWritten, repair.stats.chunksSkipped], [1, 1, 3]);
      assert.deepEqual(await store.get(key1), good);
      // A flipped payload byte under an intact trailer: only 'full' verification finds it.
      const badPayload = good.slice();
      badPayload[200] = (badPayload[200] ?? 0) ^ 0x10;
      await store.put(key1, badPayload);
      const trusting = new ArtifactWriter({ store, layout: LAYOUT, tenant: TENANT, documentId: 'doc-1', chunkTokens: C });
      await trusting.finish(seq);
      assert.deepEqual([trusting.stats.chunksRepaired, trusting.stats.chunksSkipped], [0, 4]);
      const thorough = new ArtifactWriter({ store, layout: LAYOUT, tenant: TENANT, documentId: 'doc-1', chunkTokens: C, verifyExisting: 'full' });
      await thorough.finish(seq);
      assert.deepEqual([thorough.stats.chunksRepaired, thorough.stats.chunksSkipped], [1, 3]);
      assert.deepEqual(await store.get(key1), good);

      // Another valid encoding of chunk 2: an all-±0 main-KV block under another scale byte (same values).
      const key2 = chunkObjectKey(TENANT, m1.chunks[2]?.key ?? '');
      const other = await store.get(key2);
      const rowsAt = chunkHeaderBytes(LAYOUT) + 4 * C;
      let patched = false;
      for (let row = 0; row < 32 && !patched; row++) {
        for (let block = 0; block < 2 && !patched; block++) {
          const payload = other.subarray(rowsAt + row * 18 + block * 8, rowsAt + row * 18 + block * 8 + 8);
          if (payload.every((b) => (b & 0x77) === 0)) {
            const at = rowsAt + row * 18 + 16 + block;
            other[at] = other[at] === 0x38 ? 0x40 : 0x38; // scale 1.0 or 2.0: zeros stay zeros
            patched = true;
          }
        }
      }
      assert.ok(patched, 'the synthetic rows hold all-zero blocks');
      other.set(
        createHash('sha256')
          .update(other.subarray(0, other.length - 32))
          .digest(),
        other.length - 32,
      );
      await store.put(key2, other);
      const w = new ArtifactWriter({ store, layout: LAYOUT, tenant: TENANT, documentId: 'doc-2', chunkTokens: C });
      const m2 = await w.finish(seq);
      assert.deepEqual([w.stats.chunksSkippedDiffering, w.stats.chunksSkipped, w.stats.chunksWritten], [1, 4, 0]);
      assert.equal(m2.chunks[2]?.sha256, chunkTrailerHex(other));
      assert.notEqual(m2.chunks[2]?.sha256, m1.chunks[2]?.sha256);
      const loaded = emptySequence(LAYOUT);
      const reader = new ArtifactReader({ store, layout: LAYOUT });
      await reader.loadInto(loaded, await reader.readManifest(TENANT, 'doc-2'));
      assertSequencePrefix(loaded, seq, LAYOUT, sequenceLength(seq), 'values');
    });
  });

  test(`${factory.name}: a re-ingested document with other tokens replaces the manifest`, async () => {
    await withStore(factory.open, async (store) => {
      await new ArtifactWriter({ store, layout: LAYOUT, tenant: TENANT, documentId: 'doc-1', chunkTokens: C }).finish(syntheticSequence(LAYOUT, 100, 6));
      const next = syntheticSequence(LAYOUT, 150, 7);
      const w = new ArtifactWriter({ store, layout: LAYOUT, tenant: TENANT, documentId: 'doc-1', chunkTokens: C });
      await w.finish(next);
      assert.ok(w.stats.manifestBytesWritten > 0);
      const reader = new ArtifactReader({ store, layout: LAYOUT });
      assert.equal((await reader.readManifest(TENANT, 'doc-1')).tokenCount, 150);
    });
  });
}

test('refusals: bad tenant or document id, chunk size, sequence layout, missing rows, use after finish', async () => {
  const store = new TrackingStore((await STORE_FACTORIES[0]?.open())?.store ?? assert.fail('no store'));
  const opts = { store, layout: LAYOUT, tenant: TENANT, documentId: 'doc-1', chunkTokens: C };
  assert.throws(() => new ArtifactWriter({ ...opts, tenant: 'a/b' }), InvalidKeyError);
  assert.throws(() => new ArtifactWriter({ ...opts, documentId: '' }), InvalidKeyError);
  assert.throws(
    () => new ArtifactWriter({ ...opts, chunkTokens: 18 }),
    (e: unknown) => e instanceof ConfigError && /18 is not a multiple of 4 tokens/.test(e.message),
  );
  assert.throws(
    () => new ArtifactWriter({ ...opts, chunkTokens: 9 }),
    (e: unknown) => e instanceof ConfigError && /9 is not a multiple of ratio 2/.test(e.message),
  );
  assert.equal(new ArtifactWriter({ store, layout: LAYOUT, tenant: TENANT, documentId: 'd' }).chunkTokens, 4096);

  const otherLayout = createArtifactLayout({ ...LAYOUT, kvSources: [{ layer: 1, ratio: 2 }] });
  await assert.rejects(new ArtifactWriter(opts).writeAvailable(syntheticSequence(otherLayout, 64, 1)), SequenceStateError);

  const seq = syntheticSequence(LAYOUT, 128, 1);
  truncateEntries(seq, 3, 100); // rows of tokens [100, 128) are missing
  const writer = new ArtifactWriter(opts);
  await writer.writeAvailable(seq, 64);
  await assert.rejects(
    writer.writeAvailable(seq, 128),
    (e: unknown) => e instanceof SequenceStateError && /layer 3/.test(e.message) && /needs 128/.test(e.message),
  );
  await assert.rejects(writer.finish(seq), SequenceStateError, 'a failed writer stays failed');

  // A put that fails (store down) fails the writer; no manifest is written and nothing goes unhandled.
  const flaky = new TrackingStore(store.inner);
  let puts = 0;
  const failingStore = Object.assign(Object.create(flaky) as TrackingStore, {
    put: async (key: string, body: Uint8Array, o?: { ifAbsent?: boolean }) => {
      if (++puts === 2) throw new StoreUnavailableError('store down');
      return flaky.put(key, body, o);
    },
  });
  const failing = new ArtifactWriter({ ...opts, store: failingStore, documentId: 'doc-f', maxInFlightPuts: 1 });
  await assert.rejects(failing.writeAvailable(syntheticSequence(LAYOUT, 5 * C, 3)), StoreUnavailableError);
  await assert.rejects(failing.finish(syntheticSequence(LAYOUT, 5 * C, 3)), StoreUnavailableError);
  assert.equal(puts, 2, 'no put started after the failure (one in flight at a time)');
  assert.equal(await store.head(manifestObjectKey(TENANT, 'doc-f')), null);

  const done = new ArtifactWriter(opts);
  await done.finish(syntheticSequence(LAYOUT, 70, 2));
  await assert.rejects(done.writeAvailable(syntheticSequence(LAYOUT, 70, 2)), /has finished/);
});

test('bytes on the object store per token, released dims (288 B + 68 B rows, ratios 2/2/2/1), C = 4096: within 1% of bytesPerToken', async (t) => {
  const layout = createArtifactLayout({
    modelId: 'f'.repeat(64),
    headDim: 512,
    indexHeadDim: 128,
    kvSources: [
      { layer: 2, ratio: 2 },
      { layer: 8, ratio: 2 },
      { layer: 14, ratio: 2 },
      { layer: 20, ratio: 1 },
    ],
    candidateBlockTokens: 8,
  });
  assert.equal(bytesPerToken(layout), 890);
  const tokens = 2 * 4096 + 1234;
  const seq = syntheticSequence(layout, tokens, 8);
  const opened = await STORE_FACTORIES[0]?.open();
  assert.ok(opened !== undefined);
  const writer = new ArtifactWriter({ store: opened.store, layout, tenant: TENANT, documentId: 'big', chunkTokens: 4096 });
  const started = performance.now();
  const manifest = await writer.finish(seq);
  const writeMs = performance.now() - started;
  const chunkBytes = manifest.chunks.reduce((s, c) => s + c.sizeBytes, 0);
  assert.equal(chunkBytes, chunkObjectBytes(layout, 0, 4096) * 2 + chunkObjectBytes(layout, 8192, tokens));
  const payloadBytes = (3 * Math.floor(tokens / 2) + tokens) * 356;
  const manifestBytes = writer.stats.manifestBytesWritten;
  const perToken = (chunkBytes + manifestBytes) / tokens;
  const overheadPerToken = perToken - payloadBytes / tokens;
  t.diagnostic(
    `tokens ${tokens}: chunks ${chunkBytes} B + manifest ${manifestBytes} B = ${perToken.toFixed(3)} B/token ` +
      `(bytesPerToken ${bytesPerToken(layout)}; overhead ${overheadPerToken.toFixed(3)} B/token = 4 B token id + ` +
      `${((chunkBytes - payloadBytes - 4 * tokens) / tokens).toFixed(3)} B headers/checksums + ${(manifestBytes / tokens).toFixed(3)} B manifest; ` +
      `+${((perToken / 890 - 1) * 100).toFixed(2)}%); write ${writeMs.toFixed(0)} ms`,
  );
  assert.ok(Math.abs(perToken / bytesPerToken(layout) - 1) < 0.01, `${perToken} B/token`);
  assert.ok(overheadPerToken > 4 && overheadPerToken < 4.2);
  const reader = new ArtifactReader({ store: opened.store, layout });
  const loaded = emptySequence(layout);
  await reader.loadInto(loaded, manifest);
  assertSequencePrefix(loaded, seq, layout);
  await opened.cleanup();
});
