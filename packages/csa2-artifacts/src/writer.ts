/**
 * @module writer
 * Writes one document's cache artifact from a Sequence: chunk objects of C tokens as the encoder
 * completes them (`writeAvailable`, callable from a progress callback), then the trailing partial chunk
 * and the manifest, LAST (`finish`), so a reader that finds a manifest finds every chunk it names.
 *
 * Idempotent: chunks are content-addressed (format/chunk-key) and written with `ifAbsent`, so a chunk
 * that exists is not written again (counted as skipped) and re-running a job gives the same keys and
 * the same bytes. For a skipped chunk the manifest records the STORED object's size and checksum
 * (learnt with `head` + a 32-byte ranged read); if the stored object differs from ours (or
 * `verifyExisting: 'full'`), it is fetched and verified, kept when valid and replaced when not. A finished manifest equal to an existing one
 * (ignoring createdAt) is not rewritten.
 *
 * Pipeline: a chunk is encoded (header, a copy of its packed rows, SHA-256 in slices that yield to
 * the event loop) into one of `maxInFlightPuts` reused buffers while the puts of earlier chunks run;
 * encoding waits for nothing but a free buffer.
 *
 * Failure: the first failed put fails the writer; later calls reject with that error. Nothing already
 * written needs cleaning up (chunks are shared and immutable; the manifest was not written; garbage
 * collection reclaims the chunks once nothing references them).
 *
 * Garbage collection (gc) may run at any time; the writer's side of its protocol:
 * - an ingest marker (ingest-marker) is put before the writer's first store operation, renewed by
 *   later ones and deleted after the manifest: gc keeps every chunk modified since the marker's start
 *   (minus the grace period) while it lives;
 * - every existing chunk the writer relies on without writing it (adopted, or skipped because it is
 *   stored) is touched, so its last-modified time is that of the reliance;
 * - after the manifest is written, every chunk it names is checked and a missing one written again
 *   from the Sequence (stats.chunksRestored), which closes the one window gc leaves open on S3.
 *
 * A document's stored encoder tail (format/tail-codec), when `finish` is given one, is put as a
 * content-keyed object among the chunks before the manifest that names it, touched when it exists,
 * and checked after the manifest like the chunks.
 */
import type { Sequence } from '@csa2/core';
import type { ObjectStore } from './store/object-store.js';
import { ArtifactCorruptError, ObjectNotFoundError } from './errors.js';
import { DEFAULT_CHUNK_TOKENS, validateChunkTokens, type ArtifactLayout } from './layout.js';
import { Semaphore } from './format/bounded-concurrency.js';
import { CHUNK_CHECKSUM_BYTES, chunkObjectBytes, decodeChunk, encodeChunk, encodeChunkAsync, type EncodedChunk } from './format/chunk-codec.js';
import { BufferPool } from './buffer-pool.js';
import { IngestMarker } from './ingest-marker.js';
import { chunkKey, fullChunkKeys } from './format/chunk-key.js';
import { chunkObjectKey, manifestObjectKey, validateDocumentId, validateTenant } from './format/keys.js';
import { MANIFEST_FORMAT_VERSION, encodeManifest, parseManifest, type DocumentManifest, type ManifestChunk } from './format/manifest.js';
import { SequenceStateError, checkSequenceLayout, chunkContentOf, sequenceLength, sequenceTokenIds } from './format/sequence-rows.js';
import { tailKey } from './format/tail-codec.js';

/** What `finish` stores besides the chunks and the manifest. */
export interface FinishOptions {
  /** The document's encoder tail for CED replay `replayTokens` (format/tail-codec bytes). */
  readonly tail?: { readonly bytes: Uint8Array; readonly replayTokens: number };
}

/** Default number of puts in flight. */
export const DEFAULT_MAX_IN_FLIGHT_PUTS = 4;

export interface ArtifactWriterOptions {
  readonly store: ObjectStore;
  readonly layout: ArtifactLayout;
  readonly tenant: string;
  readonly documentId: string;
  /** Tokens per chunk (C). @defaultValue 4096 */
  readonly chunkTokens?: number;
  /** Puts in flight at most. @defaultValue 4 */
  readonly maxInFlightPuts?: number;
  /** Clock for the manifest's createdAt and the ingest marker's start. @defaultValue () => new Date() */
  readonly now?: () => Date;
  /** The ingest marker's renewal interval (ingest-marker). @defaultValue 60000 */
  readonly markerRenewMs?: number;
  /**
   * How a chunk that already exists is checked before it is counted as skipped: 'trailer' compares
   * its size and 32-byte trailing checksum with ours (two small requests; a payload byte rotted in
   * place goes unnoticed here and is refused by readers); 'full' downloads and verifies it, so a
   * corrupt object is replaced. @defaultValue 'trailer'
   */
  readonly verifyExisting?: 'trailer' | 'full';
}

/** What a writer did so far. */
export interface ArtifactWriteStats {
  readonly chunksWritten: number;
  /** Chunks that already existed (not written again). */
  readonly chunksSkipped: number;
  /** Skipped chunks whose stored bytes differ from ours but verified as valid (kept as stored). */
  readonly chunksSkippedDiffering: number;
  /** Existing chunks that failed verification and were overwritten (counted in chunksWritten too). */
  readonly chunksRepaired: number;
  /**
   * Chunks found missing when checked after the manifest was written, and written again from the
   * Sequence (counted in chunksWritten too): a garbage collection that took them for unreferenced
   * (see gc). 0 in normal operation.
   */
  readonly chunksRestored: number;
  readonly chunkBytesWritten: number;
  readonly chunkBytesSkipped: number;
  readonly manifestBytesWritten: number;
  /** Bytes of the stored encoder tail written (0 when there is none, or it was stored already). */
  readonly tailBytesWritten: number;
  /** chunkBytesWritten + manifestBytesWritten + tailBytesWritten. */
  readonly bytesWritten: number;
  /** Tokens covered by the chunks done so far. */
  readonly tokensWritten: number;
}

/**
 * Writes one document. Not reusable: one writer per (tenant, document, job run).
 *
 * @example
 * const writer = new ArtifactWriter({ store, layout, tenant, documentId });
 * await model.encode(seq, ids, { replayTokens: 1, keepRows: 1, onProgress: (done) => void writer.writeAvailable(seq, done) });
 * const manifest = await writer.finish(seq);
 */
export class ArtifactWriter {
  readonly chunkTokens: number;
  private readonly store: ObjectStore;
  private readonly layout: ArtifactLayout;
  private readonly tenant: string;
  private readonly documentId: string;
  private readonly now: () => Date;
  private readonly verifyExisting: 'trailer' | 'full';
  private readonly puts: Semaphore;
  /** Chunk buffers, one per put in flight, reused from chunk to chunk. */
  private readonly buffers: BufferPool;
  /** "Ingest in progress", for garbage collection: put with the first store operation, deleted after the manifest. */
  private readonly marker: IngestMarker;
  private readonly chunks: ManifestChunk[] = [];
  private previousKey: string | null = null;
  private nextStartToken = 0;
  private tail: Promise<unknown> = Promise.resolve();
  private failure: unknown = null;
  private finished: DocumentManifest | null = null;
  private s = {
    chunksWritten: 0,
    chunksSkipped: 0,
    chunksSkippedDiffering: 0,
    chunksRepaired: 0,
    chunksRestored: 0,
    chunkBytesWritten: 0,
    chunkBytesSkipped: 0,
    manifestBytesWritten: 0,
    tailBytesWritten: 0,
  };

  constructor(options: ArtifactWriterOptions) {
    this.store = options.store;
    this.layout = options.layout;
    this.tenant = validateTenant(options.tenant);
    this.documentId = validateDocumentId(options.documentId);
    this.chunkTokens = validateChunkTokens(options.layout, options.chunkTokens ?? DEFAULT_CHUNK_TOKENS);
    this.puts = new Semaphore(options.maxInFlightPuts ?? DEFAULT_MAX_IN_FLIGHT_PUTS);
    this.buffers = new BufferPool({ maxFree: options.maxInFlightPuts ?? DEFAULT_MAX_IN_FLIGHT_PUTS });
    this.now = options.now ?? (() => new Date());
    this.verifyExisting = options.verifyExisting ?? 'trailer';
    const clock = this.now;
    this.marker = new IngestMarker(this.store, this.tenant, this.documentId, {
      now: () => clock().getTime(),
      ...(options.markerRenewMs !== undefined ? { renewMs: options.markerRenewMs } : {}),
    });
  }

  get stats(): ArtifactWriteStats {
    return { ...this.s, bytesWritten: this.s.chunkBytesWritten + this.s.manifestBytesWritten + this.s.tailBytesWritten, tokensWritten: this.nextStartToken };
  }

  /**
   * Writes every full chunk whose tokens all lie below `uptoToken` (tokens whose global-KV rows are
   * complete; default: the whole Sequence) and that this writer has not written yet. Calls are
   * serialized; the promise resolves when those chunks are stored.
   */
  writeAvailable(seq: Sequence, uptoToken: number = sequenceLength(seq)): Promise<void> {
    return this.enqueue(async () => {
      this.checkOpen();
      await this.marker.keepAlive();
      await this.writeChunksUpTo(seq, Math.min(uptoToken, sequenceLength(seq)), false);
    });
  }

  /**
   * Takes the first `chunkCount` full chunks of `seq` as already stored (an encoder that loaded them
   * with ArtifactReader.loadChunkPrefix, which verified them): records their keys, sizes and
   * checksums for the manifest from the store (head + the 32-byte trailer) without packing them
   * again. Must come before any other write. Throws ObjectNotFoundError when one is missing.
   */
  adoptStoredChunks(seq: Sequence, chunkCount: number): Promise<void> {
    return this.enqueue(async () => {
      this.checkOpen();
      if (this.nextStartToken !== 0) throw new SequenceStateError('adoptStoredChunks must come before any other write');
      await this.marker.keepAlive();
      const C = this.chunkTokens;
      if (!Number.isSafeInteger(chunkCount) || chunkCount < 0 || chunkCount * C > sequenceLength(seq)) {
        throw new SequenceStateError(`cannot adopt ${chunkCount} chunks of ${C} tokens from a sequence of ${sequenceLength(seq)} tokens`);
      }
      const keys: string[] = []; // chunk by chunk: no copy of the whole prefix's ids
      for (let i = 0; i < chunkCount; i++)
        keys.push(chunkKey(this.layout.modelId, keys.at(-1) ?? null, sequenceTokenIds(seq, i * C, (i + 1) * C), this.layout.encoder));
      const entries = await Promise.all(
        keys.map((key) =>
          this.puts.run(async () => {
            const objectKey = chunkObjectKey(this.tenant, key);
            const info = await this.store.touch(objectKey); // relied on from now: fresh for gc's grace period
            if (info === null) throw new ObjectNotFoundError(objectKey, 'stored chunk');
            if (info.sizeBytes < CHUNK_CHECKSUM_BYTES)
              throw new ArtifactCorruptError(objectKey, info.sizeBytes, `stored chunk is ${info.sizeBytes} bytes, shorter than its checksum`);
            const trailer = await this.store.getRange(objectKey, { offset: info.sizeBytes - CHUNK_CHECKSUM_BYTES, length: CHUNK_CHECKSUM_BYTES });
            return { sizeBytes: info.sizeBytes, sha256: Buffer.from(trailer).toString('hex') };
          }),
        ),
      );
      entries.forEach((e, i) => {
        this.chunks.push({ key: keys[i] as string, startToken: i * C, endToken: (i + 1) * C, ...e });
        this.s.chunksSkipped++;
        this.s.chunkBytesSkipped += e.sizeBytes;
      });
      this.previousKey = keys.at(-1) ?? null;
      this.nextStartToken = chunkCount * C;
    });
  }

  /**
   * Writes the remaining full chunks, the trailing partial chunk (if the length is not a multiple of
   * C), the stored encoder tail if given, and then the manifest. Returns the manifest; the writer is
   * closed afterwards.
   */
  finish(seq: Sequence, options: FinishOptions = {}): Promise<DocumentManifest> {
    return this.enqueue(async () => {
      this.checkOpen();
      await this.marker.keepAlive();
      await this.writeChunksUpTo(seq, sequenceLength(seq), true);
      const t = options.tail;
      if (t !== undefined && !(Number.isSafeInteger(t.replayTokens) && t.replayTokens >= 1 && t.replayTokens <= sequenceLength(seq) && t.bytes.length > 0)) {
        throw new RangeError(`a stored tail needs 1 ≤ replayTokens ≤ ${sequenceLength(seq)} and bytes, got ${t.replayTokens} and ${t.bytes.length} bytes`);
      }
      const tail = t === undefined ? undefined : { key: tailKey(t.bytes), sizeBytes: t.bytes.length, replayTokens: t.replayTokens };
      if (t !== undefined && tail !== undefined) await this.putTail(tail.key, t.bytes);
      const manifest: DocumentManifest = {
        formatVersion: MANIFEST_FORMAT_VERSION,
        modelId: this.layout.modelId,
        ...(this.layout.encoder !== '' ? { encoder: this.layout.encoder } : {}),
        layoutId: this.layout.layoutId,
        tenant: this.tenant,
        documentId: this.documentId,
        tokenCount: sequenceLength(seq),
        chunkTokens: this.chunkTokens,
        chunks: this.chunks.slice(),
        createdAt: this.now().toISOString(),
        ...(tail !== undefined ? { tail } : {}),
      };
      const stored = await this.restoreMissingChunks(seq, await this.putManifest(manifest));
      if (t !== undefined && tail !== undefined && (await this.store.head(chunkObjectKey(this.tenant, tail.key))) === null) {
        await this.putTail(tail.key, t.bytes); // removed by a racing gc (see restoreMissingChunks)
      }
      this.finished = stored;
      await this.marker.end();
      return stored;
    });
  }

  /**
   * After the manifest: every chunk it names must exist. A garbage collection racing this ingest can
   * only have removed a chunk whose touch it missed (S3's check-then-delete is not atomic, or the
   * marker expired during a stall; see gc); such a chunk is written again from the Sequence. If its
   * new bytes differ from what the manifest records (it recorded an equivalent stored encoding), the
   * manifest is written again with ours.
   */
  private async restoreMissingChunks(seq: Sequence, manifest: DocumentManifest): Promise<DocumentManifest> {
    const replaced = new Map<number, ManifestChunk>();
    await Promise.all(
      manifest.chunks.map((c, i) =>
        this.puts.run(async () => {
          const objectKey = chunkObjectKey(this.tenant, c.key);
          if ((await this.store.head(objectKey)) !== null) return;
          const encoded = encodeChunk(this.layout, chunkContentOf(seq, this.layout, c.startToken, c.endToken));
          await this.store.put(objectKey, encoded.bytesU8, { ifAbsent: true });
          this.s.chunksRestored++;
          this.s.chunksWritten++;
          this.s.chunkBytesWritten += encoded.bytesU8.length;
          if (encoded.checksumHex !== c.sha256 || encoded.bytesU8.length !== c.sizeBytes)
            replaced.set(i, { ...c, sizeBytes: encoded.bytesU8.length, sha256: encoded.checksumHex });
        }),
      ),
    );
    if (replaced.size === 0) return manifest;
    const updated: DocumentManifest = { ...manifest, chunks: manifest.chunks.map((c, i) => replaced.get(i) ?? c) };
    const bytes = encodeManifest(updated);
    await this.store.put(manifestObjectKey(this.tenant, this.documentId), bytes);
    this.s.manifestBytesWritten += bytes.length;
    return updated;
  }

  private enqueue<T>(task: () => Promise<T>): Promise<T> {
    const run = this.tail.then(task);
    this.tail = run.catch(async (error: unknown) => {
      this.failure ??= error;
      await this.marker.end(); // nothing more will be written; the chunks written so far are gc's once their grace period ends
    });
    return run;
  }

  private checkOpen(): void {
    if (this.failure !== null) throw this.failure;
    if (this.finished !== null) throw new SequenceStateError(`the artifact writer of ${this.tenant}/${this.documentId} has finished`);
  }

  private async writeChunksUpTo(seq: Sequence, uptoToken: number, includePartial: boolean): Promise<void> {
    checkSequenceLayout(seq, this.layout);
    const pending: Promise<void>[] = [];
    const C = this.chunkTokens;
    let putFailed = false;
    while (!putFailed && this.nextStartToken < uptoToken && (this.nextStartToken + C <= uptoToken || includePartial)) {
      const start = this.nextStartToken;
      const end = Math.min(start + C, uptoToken);
      await this.puts.acquire();
      if (putFailed) {
        this.puts.release();
        break;
      }
      let encoded: EncodedChunk;
      let key: string;
      let tokenIds: ArrayLike<number>;
      // A reused buffer (no page faults, no garbage): the put is its only holder until it settles.
      const buffer = this.buffers.acquire(chunkObjectBytes(this.layout, start, end));
      try {
        const content = chunkContentOf(seq, this.layout, start, end);
        // header + copy, then SHA-256 in slices that let the earlier puts' I/O go on (chunk-codec)
        const encoding = encodeChunkAsync(this.layout, content, { into: buffer });
        key = chunkKey(this.layout.modelId, this.previousKey, content.tokenIds, this.layout.encoder);
        tokenIds = content.tokenIds;
        encoded = await encoding;
      } catch (error) {
        this.buffers.release(buffer);
        this.puts.release();
        await Promise.allSettled(pending); // let puts already started settle (none is left unhandled)
        throw error;
      }
      const index = this.chunks.length;
      this.chunks.push({ key, startToken: start, endToken: end, sizeBytes: encoded.bytesU8.length, sha256: encoded.checksumHex });
      this.previousKey = key;
      this.nextStartToken = end;
      pending.push(
        this.putChunk(key, encoded.bytesU8, encoded.checksumHex, tokenIds)
          .then(
            (entry) => {
              this.chunks[index] = { key, startToken: start, endToken: end, ...entry };
            },
            (error: unknown) => {
              putFailed = true; // stop starting puts: the writer fails with this error
              throw error;
            },
          )
          .finally(() => {
            this.buffers.release(buffer);
            this.puts.release();
          }),
      );
    }
    const results = await Promise.allSettled(pending);
    for (const r of results) if (r.status === 'rejected') throw r.reason;
  }

  /** Stores one chunk (ifAbsent); returns the size and checksum of the object now stored under its key. */
  private async putChunk(key: string, bytesU8: Uint8Array, checksumHex: string, tokenIds: ArrayLike<number>): Promise<{ sizeBytes: number; sha256: string }> {
    const objectKey = chunkObjectKey(this.tenant, key);
    if (await this.store.put(objectKey, bytesU8, { ifAbsent: true })) {
      this.s.chunksWritten++;
      this.s.chunkBytesWritten += bytesU8.length;
      return { sizeBytes: bytesU8.length, sha256: checksumHex };
    }
    const info = await this.store.touch(objectKey); // relied on from now: fresh for gc's grace period
    const sizeBytes = info?.sizeBytes ?? 0;
    if (info !== null && sizeBytes === bytesU8.length && this.verifyExisting === 'trailer') {
      const trailer = await this.store.getRange(objectKey, { offset: sizeBytes - CHUNK_CHECKSUM_BYTES, length: CHUNK_CHECKSUM_BYTES });
      if (Buffer.from(trailer).toString('hex') === checksumHex) {
        this.s.chunksSkipped++;
        this.s.chunkBytesSkipped += sizeBytes;
        return { sizeBytes, sha256: checksumHex };
      }
    }
    // Stored bytes differ from ours (or the object vanished): keep a valid one, replace a broken one.
    if (info !== null && (await this.storedChunkIsValid(objectKey, tokenIds))) {
      this.s.chunksSkipped++;
      this.s.chunksSkippedDiffering++;
      this.s.chunkBytesSkipped += sizeBytes;
      const stored = await this.store.getRange(objectKey, { offset: sizeBytes - CHUNK_CHECKSUM_BYTES, length: CHUNK_CHECKSUM_BYTES });
      return { sizeBytes, sha256: Buffer.from(stored).toString('hex') };
    }
    await this.store.put(objectKey, bytesU8);
    this.s.chunksWritten++;
    this.s.chunksRepaired++;
    this.s.chunkBytesWritten += bytesU8.length;
    return { sizeBytes: bytesU8.length, sha256: checksumHex };
  }

  private async storedChunkIsValid(objectKey: string, tokenIds: ArrayLike<number>): Promise<boolean> {
    try {
      const chunk = decodeChunk(this.layout, objectKey, await this.store.get(objectKey));
      return chunk.tokenIds.length === tokenIds.length && chunk.tokenIds.every((id, i) => id === tokenIds[i]);
    } catch (error) {
      if (error instanceof Error && 'code' in error && (error.code === 'artifact-corrupt' || error.code === 'not-found')) return false;
      throw error; // a model/layout mismatch or an unreachable store is not ours to overwrite
    }
  }

  /**
   * Stores the encoder tail under its content key: written when absent, else touched (relied on now) and
   * replaced unless it is ours — same size ('trailer'), the same bytes ('full': a rotted one is rewritten).
   */
  private async putTail(key: string, bytesU8: Uint8Array): Promise<void> {
    const objectKey = chunkObjectKey(this.tenant, key);
    if (!(await this.store.put(objectKey, bytesU8, { ifAbsent: true }))) {
      const info = await this.store.touch(objectKey);
      if (info !== null && info.sizeBytes === bytesU8.length) {
        if (this.verifyExisting === 'trailer') return;
        const stored = await this.store.get(objectKey).catch((e: unknown) => (e instanceof ObjectNotFoundError ? null : Promise.reject(e)));
        if (stored !== null && Buffer.from(stored).equals(bytesU8)) return;
      }
      await this.store.put(objectKey, bytesU8);
    }
    this.s.tailBytesWritten += bytesU8.length;
  }

  /** Writes the manifest unless an equivalent one exists; returns the manifest now stored. */
  private async putManifest(manifest: DocumentManifest): Promise<DocumentManifest> {
    const key = manifestObjectKey(this.tenant, this.documentId);
    const bytes = encodeManifest(manifest);
    if (await this.store.put(key, bytes, { ifAbsent: true })) {
      this.s.manifestBytesWritten += bytes.length;
      return manifest;
    }
    let existing: DocumentManifest | null = null;
    try {
      existing = parseManifest(key, await this.store.get(key));
    } catch (error) {
      if (!(error instanceof Error && 'code' in error && ['artifact-corrupt', 'unsupported-version', 'not-found'].includes(String(error.code)))) throw error;
    }
    if (existing !== null && sameArtifact(existing, manifest)) return existing;
    await this.store.put(key, bytes);
    this.s.manifestBytesWritten += bytes.length;
    return manifest;
  }
}

/** Equal manifests but for createdAt. */
function sameArtifact(a: DocumentManifest, b: DocumentManifest): boolean {
  return Buffer.from(encodeManifest({ ...a, createdAt: '' })).equals(encodeManifest({ ...b, createdAt: '' }));
}

/**
 * How many leading full chunks of `tokenIds` already exist in the tenant's store (checked with
 * `touch`, at most 4 at a time: each found chunk's last-modified time becomes now, so garbage
 * collection keeps it for its grace period while the caller relies on it). An encoder loads those
 * (ArtifactReader.loadChunkPrefix) and encodes only what follows.
 *
 * @example
 * const reused = await existingChunkPrefix(store, layout, tenant, ids, 4096); // 2: tokens [0, 8192) exist
 */
export async function existingChunkPrefix(
  store: ObjectStore,
  layout: ArtifactLayout,
  tenant: string,
  tokenIds: ArrayLike<number>,
  chunkTokens: number,
): Promise<number> {
  validateChunkTokens(layout, chunkTokens);
  const keys = fullChunkKeys(layout.modelId, tokenIds, chunkTokens, Infinity, layout.encoder);
  const gate = new Semaphore(DEFAULT_MAX_IN_FLIGHT_PUTS);
  let missingFrom = keys.length;
  await Promise.all(
    keys.map((key, i) =>
      gate.run(async () => {
        if (i >= missingFrom) return; // a hole before us already ends the prefix
        // touched, not only looked at: the ingest that asks is about to rely on them (gc's grace period)
        const info = await store.touch(chunkObjectKey(tenant, key));
        if (info === null) missingFrom = Math.min(missingFrom, i);
      }),
    ),
  );
  return missingFrom;
}
