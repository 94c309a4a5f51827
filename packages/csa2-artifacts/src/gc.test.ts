/**
 * @module gc.test
 * gc against every backend, conformance style (the in-memory fake with a clock the test moves, the
 * filesystem store and S3 on s3rver with one real wait past the grace period; the grace period is
 * seconds long, so what must stay young has seconds of margin on a busy machine): unreferenced chunks go,
 * referenced and young ones stay, dry runs delete nothing; prompt artifacts are reclaimed once their
 * manifest is gone or expired, except chunks they share; the races (a chunk written just before gc,
 * a chunk an ingest touches between gc's listing and its deletion, an ingest longer than the grace
 * period) keep what an ingest relies on; an abandoned ingest's marker expires; an unreadable
 * manifest stops deletions in its tenant; a writer whose chunk vanished after its manifest restores it.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import type { Sequence } from '@csa2/core';
import { collectGarbage, type GcOptions, type GcReport } from './gc.js';
import { chunkObjectKey, chunksPrefix, ingestMarkersPrefix, manifestObjectKey } from './format/keys.js';
import type { DocumentManifest } from './format/manifest.js';
import { encodeTail, tailKey, type StoredTail } from './format/tail-codec.js';
import type { ConditionalDeleteResult, ObjectStore, PutOptions } from './store/object-store.js';
import { FsObjectStore } from './store/fs-store.js';
import { S3ObjectStore } from './store/s3-store.js';
import { startS3Server } from './testing/s3-server.js';
import { ArtifactReader } from './reader.js';
import { ArtifactWriter, existingChunkPrefix } from './writer.js';
import {
  MemoryObjectStore,
  TrackingStore,
  assertSequencePrefix,
  emptySequence,
  growTo,
  sequencePrefix,
  syntheticSequence,
  tokensOf,
  TEST_LAYOUT as LAYOUT,
  TEST_CHUNK_TOKENS as C,
} from './testing/artifact-test-support.js';

const TENANT = 'acme';

const s3 = await startS3Server({ buckets: ['csa2-gc'] });
after(() => s3.stop());

interface Backend {
  readonly name: string;
  readonly store: ObjectStore;
  /** The grace period the tests give gc, and a wait longer than it (S3: plus its one-second LastModified resolution). */
  readonly graceMs: number;
  readonly ageMs: number;
  /** The clock gc and the writers use (the store's own, or the real one). */
  clock(): number;
  /** Lets `ms` pass for the store's last-modified times. */
  pass(ms: number): Promise<void>;
  cleanup(): Promise<void>;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

const BACKENDS: ReadonlyArray<{ readonly name: string; open(): Promise<Backend> }> = [
  {
    name: 'memory',
    async open() {
      const store = new MemoryObjectStore();
      let virtualMs = Date.now();
      store.now = () => virtualMs;
      return {
        name: 'memory',
        store,
        graceMs: 1500,
        ageMs: 2600,
        clock: () => virtualMs,
        pass: async (ms) => {
          virtualMs += ms;
        },
        cleanup: async () => undefined,
      };
    },
  },
  {
    name: 'fs',
    async open() {
      const root = await mkdtemp(join(tmpdir(), 'csa2-gc-test-'));
      const store = new FsObjectStore(root, { durable: false });
      return { name: 'fs', store, graceMs: 3000, ageMs: 3500, clock: () => Date.now(), pass: sleep, cleanup: () => rm(root, { recursive: true, force: true }) };
    },
  },
  {
    name: 's3',
    async open() {
      const store = new S3ObjectStore({
        bucket: 'csa2-gc',
        prefix: `gc/${randomUUID()}`,
        endpoint: s3.endpoint,
        forcePathStyle: true,
        credentials: s3.credentials,
        touchMode: 'rewrite', // s3rver's in-place copy keeps LastModified
      });
      return {
        name: 's3',
        store,
        graceMs: 3000,
        ageMs: 4200,
        clock: () => Date.now(),
        pass: sleep,
        cleanup: async () => {
          await Promise.all((await store.list('')).map((o) => store.delete(o.key)));
          await store.close();
        },
      };
    },
  },
];

async function withBackend(open: () => Promise<Backend>, body: (b: Backend) => Promise<void>): Promise<void> {
  const b = await open();
  try {
    await body(b);
  } finally {
    await b.cleanup();
  }
}

function gc(b: Backend, options: Partial<GcOptions> = {}): Promise<GcReport> {
  return collectGarbage({ store: b.store, graceMs: b.graceMs, now: () => b.clock(), ...options });
}

function writer(b: Backend, documentId: string, store: ObjectStore = b.store, tenant = TENANT): ArtifactWriter {
  return new ArtifactWriter({ store, layout: LAYOUT, tenant, documentId, chunkTokens: C, now: () => new Date(b.clock()) });
}

async function chunkKeys(store: ObjectStore, tenant = TENANT): Promise<string[]> {
  return (await store.list(chunksPrefix(tenant))).map((o) => o.key);
}

function objectKeys(m: DocumentManifest): string[] {
  return m.chunks.map((c) => chunkObjectKey(m.tenant, c.key));
}

async function assertLoads(store: ObjectStore, documentId: string, expected: Sequence): Promise<void> {
  const reader = new ArtifactReader({ store, layout: LAYOUT });
  const loaded = emptySequence(LAYOUT);
  await reader.loadInto(loaded, await reader.readManifest(TENANT, documentId));
  assertSequencePrefix(loaded, expected, LAYOUT);
}

/** A store that runs `hook` once, before gc's first conditional delete (after all its listings); every delete waits for it. */
class BeforeFirstDelete extends TrackingStore {
  private ran: Promise<void> | null = null;
  constructor(
    inner: ObjectStore,
    private readonly hook: () => Promise<void>,
  ) {
    super(inner);
  }
  override async deleteIfUnmodifiedSince(key: string, sinceMs: number): Promise<ConditionalDeleteResult> {
    this.ran ??= this.hook();
    await this.ran;
    return super.deleteIfUnmodifiedSince(key, sinceMs);
  }
}

for (const backend of BACKENDS) {
  describe(`gc on ${backend.name}`, () => {
    it("what goes (unreferenced past the grace period, prompt artifacts) and what stays (referenced, young, touched mid-collection, an unreadable manifest's tenant); a dry run deletes nothing", async () => {
      await withBackend(backend.open, async (b) => {
        // --- written before the grace period ---
        const docB = syntheticSequence(LAYOUT, 3 * C + 10, 1);
        const docA = sequencePrefix(docB, LAYOUT, 2 * C + 5); // shares chunks 0 and 1 with B
        const a = await writer(b, 'doc-a').finish(docA);
        const bm = await writer(b, 'doc-b').finish(docB);
        // Long prompts ingested as prompt artifacts; the gateway deletes their manifests when the
        // requests end. prompt-req-2 is exactly the documents' chunk 0: shared, so it stays.
        const p1 = await writer(b, 'prompt-req-1').finish(syntheticSequence(LAYOUT, 2 * C, 3));
        const p2 = await writer(b, 'prompt-req-2').finish(sequencePrefix(docB, LAYOUT, C));
        for (const id of ['prompt-req-1', 'prompt-req-2']) await b.store.delete(manifestObjectKey(TENANT, id));
        // A prompt artifact whose manifest nobody deleted (a crashed gateway): expires by promptTtlMs.
        const stale = await writer(b, 'prompt-stale').finish(syntheticSequence(LAYOUT, C + 9, 32));
        // A deleted document: all its chunks are garbage.
        const gone = await writer(b, 'doc-gone').finish(syntheticSequence(LAYOUT, C + 3, 4));
        await b.store.delete(manifestObjectKey(TENANT, 'doc-gone'));
        // A deleted document whose text is posted again while gc runs (the race below).
        const again = syntheticSequence(LAYOUT, 2 * C + 7, 11);
        const first = await writer(b, 'doc-again').finish(again);
        await b.store.delete(manifestObjectKey(TENANT, 'doc-again'));
        // Tenant "broken" has a manifest gc cannot read: nothing may go there.
        const brokenDoc = await writer(b, 'x', b.store, 'broken').finish(syntheticSequence(LAYOUT, C, 34));
        await b.store.delete(manifestObjectKey('broken', 'x'));
        await b.store.put(manifestObjectKey('broken', 'y'), new TextEncoder().encode('{"formatVersion": 9}'));

        await b.pass(b.ageMs);

        // --- within the grace period: written just before gc starts ---
        const young = await writer(b, 'doc-young').finish(syntheticSequence(LAYOUT, C, 5));
        await b.store.delete(manifestObjectKey(TENANT, 'doc-young'));
        const fresh = await writer(b, 'prompt-fresh').finish(syntheticSequence(LAYOUT, C + 2, 33));

        const keep = new Set([...objectKeys(a), ...objectKeys(bm), ...objectKeys(p2), ...objectKeys(young), ...objectKeys(fresh)]);
        const allChunks = await chunkKeys(b.store);
        const garbage = new Set([...objectKeys(p1), ...objectKeys(stale), ...objectKeys(gone)].filter((k) => !keep.has(k)));
        const before = await b.store.list(chunksPrefix(TENANT));
        const garbageBytes = before.filter((o) => garbage.has(o.key)).reduce((n, o) => n + o.sizeBytes, 0);
        const staleManifest = await b.store.head(manifestObjectKey(TENANT, 'prompt-stale'));
        assert.ok(staleManifest !== null);
        const settings = { promptTtlMs: b.graceMs };

        const dry = await gc(b, { ...settings, dryRun: true });
        assert.equal(dry.dryRun, true);
        const dryTenant = dry.tenants.find((t) => t.tenant === TENANT);
        // would go: the garbage and all of doc-again (nothing touched it yet), and the stale manifest
        assert.equal(dryTenant?.chunksDeleted, garbage.size + objectKeys(first).length);
        assert.equal(dryTenant?.promptManifestsDeleted, 1);
        assert.deepEqual(await chunkKeys(b.store), allChunks, 'a dry run deletes nothing');

        // The real run, with the text of doc-again posted while it runs: the ingest looks its prefix
        // up (touching the two full chunks) after gc listed everything and before it deletes.
        let reused = -1;
        const racing = new BeforeFirstDelete(b.store, async () => {
          reused = await existingChunkPrefix(b.store, LAYOUT, TENANT, tokensOf(again), C);
        });
        const report = await collectGarbage({ store: racing, graceMs: b.graceMs, now: () => b.clock(), ...settings });
        assert.equal(reused, 2, 'the ingest found both full chunks of doc-again');
        const t = report.tenants.find((r) => r.tenant === TENANT);
        assert.ok(t !== undefined);
        assert.equal(t.skipped, null);
        assert.equal(t.keptTouched, 2, "doc-again's full chunks were touched before the deletion: kept");
        const againPartial = 1;
        assert.equal(t.chunksDeleted, garbage.size + againPartial);
        assert.deepEqual([t.markersDeleted, t.promptManifestsDeleted], [0, 1]);
        assert.equal(t.unreferencedKept, objectKeys(young).length, 'the young chunks');
        assert.equal(t.manifests, 4, 'doc-a, doc-b, prompt-stale, prompt-fresh');
        assert.equal(await b.store.head(manifestObjectKey(TENANT, 'prompt-stale')), null);
        assert.notEqual(await b.store.head(manifestObjectKey(TENANT, 'prompt-fresh')), null);
        const left = new Set(await chunkKeys(b.store));
        for (const k of garbage) assert.ok(!left.has(k), `${k} is gone`);
        for (const k of keep) assert.ok(left.has(k), `${k} is kept`);
        const broken = report.tenants.find((r) => r.tenant === 'broken');
        assert.ok(broken !== undefined && broken.skipped !== null && /broken\/documents\/y/.test(broken.skipped), broken?.skipped ?? 'not skipped');
        assert.equal(broken.chunksDeleted, 0);
        assert.deepEqual(await chunkKeys(b.store, 'broken'), objectKeys(brokenDoc));
        const reclaimed = report.tenants.reduce((n, r) => n + r.objectsReclaimed, 0);
        assert.equal(report.objectsReclaimed, reclaimed);
        assert.equal(report.objectsReclaimed, garbage.size + againPartial + 1);
        assert.ok(report.bytesReclaimed >= garbageBytes + staleManifest.sizeBytes);

        // What stayed is whole: the documents load, the racing ingest adopts its prefix, the long one finishes.
        await assertLoads(b.store, 'doc-a', docA);
        await assertLoads(b.store, 'doc-b', docB);
        const reader = new ArtifactReader({ store: b.store, layout: LAYOUT });
        const adopted = emptySequence(LAYOUT);
        await reader.loadChunkPrefix(adopted, { tenant: TENANT, tokenIds: tokensOf(again), chunkTokens: C, chunkCount: reused });
        const w = writer(b, 'doc-again');
        await w.adoptStoredChunks(adopted, reused);
        growTo(adopted, again, LAYOUT, 2 * C + 7);
        assert.deepEqual((await w.finish(adopted)).chunks, first.chunks);
        assert.deepEqual([w.stats.chunksSkipped, w.stats.chunksWritten], [2, 1]);
        await assertLoads(b.store, 'doc-again', again);

        // Only the named tenants, when given; promptTtlMs null keeps prompt manifests.
        const only = await gc(b, { tenants: ['broken'] });
        assert.deepEqual(
          only.tenants.map((r) => r.tenant),
          ['broken'],
        );
        const second = await gc(b, { promptTtlMs: null });
        assert.equal(second.tenants.find((r) => r.tenant === TENANT)?.chunksDeleted, 0, 'a second run finds nothing more');
        assert.notEqual(await b.store.head(manifestObjectKey(TENANT, 'prompt-fresh')), null);
      });
    });

    it("an ingest longer than the grace period keeps its chunks (and its tenant's newer ones) through its live marker; an abandoned ingest's marker expires, its chunks go after", async () => {
      await withBackend(backend.open, async (b) => {
        // An ingest that runs longer than the grace period (its marker renews at every write) …
        const longDoc = syntheticSequence(LAYOUT, 3 * C, 21);
        const longSeq = emptySequence(LAYOUT);
        const long = new ArtifactWriter({
          store: b.store,
          layout: LAYOUT,
          tenant: TENANT,
          documentId: 'long',
          chunkTokens: C,
          now: () => new Date(b.clock()),
          markerRenewMs: 0,
        });
        growTo(longSeq, longDoc, LAYOUT, C);
        await long.writeAvailable(longSeq);
        // … and one abandoned after its first chunk (a crash, a cancel): nothing renews its marker.
        const crashed = emptySequence(LAYOUT);
        growTo(crashed, syntheticSequence(LAYOUT, C, 22), LAYOUT, C);
        await writer(b, 'crashed').writeAvailable(crashed);
        const markers = await b.store.list(ingestMarkersPrefix(TENANT));
        assert.equal(markers.length, 2);
        const crashedMarker = markers.find((o) => o.key.includes('/crashed.')) ?? assert.fail('no marker');
        await b.pass(b.ageMs); // every chunk so far is older than the grace period
        growTo(longSeq, longDoc, LAYOUT, 2 * C);
        await long.writeAvailable(longSeq); // chunk 1, and a renewed marker

        const during = await gc(b, { markerTtlMs: b.graceMs });
        const t = during.tenants[0];
        assert.ok(t !== undefined);
        assert.equal(t.liveMarkers, 1, "the long ingest's");
        assert.equal(t.markersDeleted, 1, "the abandoned ingest's expired");
        assert.equal(await b.store.head(crashedMarker.key), null);
        assert.deepEqual([t.chunksDeleted, t.unreferencedKept], [0, 3], "the live marker keeps every chunk modified since its start, the abandoned one's too");

        growTo(longSeq, longDoc, LAYOUT, 3 * C);
        const m = await long.finish(longSeq);
        assert.equal(long.stats.chunksRestored, 0, 'nothing of the long ingest was lost');
        assert.deepEqual(await b.store.list(ingestMarkersPrefix(TENANT)), [], 'finish deleted the marker');
        await assertLoads(b.store, 'long', longDoc);

        const after = await gc(b, { markerTtlMs: b.graceMs });
        assert.deepEqual([after.tenants[0]?.chunksDeleted, after.tenants[0]?.liveMarkers], [1, 0], "with no live marker, the abandoned ingest's chunk goes");
        assert.deepEqual(new Set(await chunkKeys(b.store)), new Set(objectKeys(m)));
      });
    });

    it('a writer whose chunk vanished after its manifest (a gc delete that came late) writes it again', async () => {
      await withBackend(backend.open, async (b) => {
        const doc = syntheticSequence(LAYOUT, 2 * C + 3, 41);
        const victim = { key: '' };
        // Delete chunk 1 right after the manifest put, as a gc whose DELETE landed late would.
        const store = new (class extends TrackingStore {
          override async put(key: string, body: Uint8Array, options?: PutOptions): Promise<boolean> {
            const written = await super.put(key, body, options);
            if (key === manifestObjectKey(TENANT, 'doc') && victim.key !== '') await this.inner.delete(victim.key);
            return written;
          }
        })(b.store);
        const seq = emptySequence(LAYOUT);
        const w = writer(b, 'doc', store);
        growTo(seq, doc, LAYOUT, 2 * C + 3);
        await w.writeAvailable(seq);
        victim.key = (await chunkKeys(b.store))[1] ?? assert.fail('no chunk');
        await w.finish(seq);
        assert.equal(w.stats.chunksRestored, 1);
        assert.notEqual(await b.store.head(victim.key), null);
        await assertLoads(b.store, 'doc', doc);
      });
    });

    it('a stored encoder tail: written before its manifest, read back and verified on this store, kept while a manifest names it, reclaimed after', async () => {
      await withBackend(backend.open, async (b) => {
        const doc = syntheticSequence(LAYOUT, 2 * C + 5, 51);
        const P = 2 * C + 5;
        const [W, HD, R] = [4, 8, 6];
        const positions = new Int32Array(W);
        for (let p = P - W; p < P; p++) positions[p % W] = p;
        const tail: StoredTail = {
          modelId: LAYOUT.modelId,
          layoutId: LAYOUT.layoutId,
          tokenCount: P,
          replayTokens: R,
          window: W,
          headDim: HD,
          hcMult: 2,
          dim: 4,
          indexKSlot: null,
          windows: [{ layer: 0, positions, rows: Float32Array.from({ length: W * HD }, (_, i) => i / 8) }],
          pending: [],
          streamStart: P - R,
          streamRows: R,
          X: Float32Array.from({ length: R * 8 }, (_, i) => i * 0.25),
          pre: new Float32Array(R * 2).fill(1.5),
          sources: null,
        };
        const bytes = encodeTail(tail);
        const m = await writer(b, 'doc').finish(doc, { tail: { bytes, replayTokens: R } });
        assert.deepEqual(m.tail, { key: tailKey(bytes), sizeBytes: bytes.length, replayTokens: R });
        const reader = new ArtifactReader({ store: b.store, layout: LAYOUT });
        const shape = { window: W, headDim: HD, hcMult: 2, dim: 4, numLayers: 2, ratios: new Map([[0, 1]]) };
        assert.deepEqual(await reader.readTail(await reader.readManifest(TENANT, 'doc'), shape, null), tail);
        const tailObject = chunkObjectKey(TENANT, tailKey(bytes));
        await b.pass(b.ageMs);
        await gc(b);
        assert.notEqual(await b.store.head(tailObject), null, 'named by a manifest: kept past the grace period');
        // the same document again without a tail: the old tail is named by nothing
        await writer(b, 'doc').finish(doc);
        await b.pass(b.ageMs);
        const report = await gc(b);
        assert.equal(await b.store.head(tailObject), null, 'named by no manifest: reclaimed');
        assert.ok((report.tenants[0]?.chunksDeleted ?? 0) >= 1);
        await assertLoads(b.store, 'doc', doc);
        await assert.rejects(reader.readTail(await reader.readManifest(TENANT, 'doc'), shape, null), /stored encoder tail of document doc/);
      });
    });
  });
}

it('gc refuses bad settings', async () => {
  const store = new MemoryObjectStore();
  for (const bad of [{ graceMs: -1 }, { graceMs: 1.5 }, { markerTtlMs: Number.NaN }, { promptTtlMs: -5 }, { concurrency: 0 }]) {
    await assert.rejects(collectGarbage({ store, ...bad }), RangeError, JSON.stringify(bad));
  }
  await assert.rejects(collectGarbage({ store, tenants: ['a/b'] }), /tenant/);
  assert.deepEqual((await collectGarbage({ store })).tenants, [], 'an empty store has no tenants');
});
