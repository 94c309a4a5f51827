/**
 * @module reader
 * Reads a document's cache artifact back into a fresh Sequence: manifest first, then its chunks with
 * bounded parallelism (optionally through a ChunkCache), appended strictly in order.
 *
 * Overlap: up to `maxInFlightGets` chunks are fetched at once; each is verified as soon as its bytes
 * arrive, and chunk k is appended while chunks k+1… are still in flight. The manifest's size of each
 * chunk goes to the store as a hint, so the S3 store fetches a large chunk as parallel ranged GETs.
 * Rows stay packed bytes until format/sequence-rows hands them to the Sequence (which copies them).
 * Without a ChunkCache, chunk bytes are read into a few reused buffers (buffer-pool: a fresh multi-MB
 * buffer per chunk costs page faults and garbage collections); with one, the cache keeps the bytes it
 * is given, and a cached chunk is not hashed again (it was verified before it was cached).
 *
 * Every chunk is verified before any of it is used: the codec's own checks (magic, version, structure,
 * checksum, model and layout id), then against the manifest: token range, size, checksum, and that its
 * token ids hash to its content key given the previous chunk's key. A failure throws (ArtifactCorruptError
 * naming the object key and byte offset, ModelMismatchError, UnsupportedVersionError); the Sequence is
 * then partly filled and must be discarded.
 */
import type { Sequence } from '@csa2/core';
import { ArtifactCorruptError, ArtifactMissingError, ModelMismatchError, ObjectNotFoundError } from './errors.js';
import type { ObjectStore } from './store/object-store.js';
import type { ChunkCache } from './chunk-cache.js';
import { validateChunkTokens, type ArtifactLayout } from './layout.js';
import { chunkHeaderBytes, chunkObjectBytes, decodeChunk, decodeChunkAsync, type DecodedChunk } from './format/chunk-codec.js';
import { BufferPool } from './buffer-pool.js';
import { chunkKey, fullChunkKeys } from './format/chunk-key.js';
import { chunkObjectKey, manifestObjectKey, validateDocumentId, validateTenant } from './format/keys.js';
import { ManifestFieldError, parseManifest, type DocumentManifest } from './format/manifest.js';
import { TAIL_CHECKSUM_BYTES, decodeTail, tailChecksumValid, tailKey, type StoredTail, type TailShape } from './format/tail-codec.js';
import { SequenceStateError, appendChunk, checkSequenceLayout, isSequenceEmpty, sequenceLength } from './format/sequence-rows.js';

/** Default number of chunk fetches in flight. */
export const DEFAULT_MAX_IN_FLIGHT_GETS = 4;

export interface ArtifactReaderOptions {
  readonly store: ObjectStore;
  /** The reader's model: artifacts of another model or layout are refused. */
  readonly layout: ArtifactLayout;
  /** Local cache of verified chunk objects. @defaultValue none */
  readonly cache?: ChunkCache;
  /** Chunk fetches in flight at most. @defaultValue 4 */
  readonly maxInFlightGets?: number;
}

export interface LoadOptions {
  /** Load tokens [0, uptoToken) and the entries they complete. @defaultValue manifest.tokenCount */
  readonly uptoToken?: number;
}

/** Leading full chunks of a token sequence, addressed by content (see loadChunkPrefix). */
export interface ChunkPrefix {
  readonly tenant: string;
  readonly tokenIds: ArrayLike<number>;
  readonly chunkTokens: number;
  /** Leading full chunks to load (e.g. what existingChunkPrefix found). */
  readonly chunkCount: number;
}

export interface LoadStats {
  readonly tokensLoaded: number;
  readonly chunksLoaded: number;
  /** Bytes fetched from the store (cache hits excluded). */
  readonly bytesFetched: number;
  readonly cacheHits: number;
}

/** A chunk to fetch and what it must match. */
interface ChunkRef {
  readonly key: string;
  /** The encoder whose key space the key is in (the manifest's, or the layout's for a chunk prefix). */
  readonly encoder: string;
  readonly previousKey: string | null;
  readonly startToken: number;
  readonly endToken: number;
  readonly sizeBytes?: number;
  readonly sha256?: string;
}

/** The size the chunk object of `ref` has: the manifest's, else the one the layout gives its token range. */
function expectedSize(layout: ArtifactLayout, ref: ChunkRef): number {
  return ref.sizeBytes ?? chunkObjectBytes(layout, ref.startToken, ref.endToken);
}

/** A fetched, verified chunk; `pooled` is the reader's buffer holding its bytes (given back after the visit). */
interface FetchedChunk {
  readonly chunk: DecodedChunk;
  readonly pooled?: Uint8Array;
}

/** Stands in for a visited chunk's promise, so the chunk's bytes are not kept alive by the list. */
const DONE: Promise<FetchedChunk> = new Promise(() => undefined);

interface MutableStats {
  tokensLoaded: number;
  chunksLoaded: number;
  bytesFetched: number;
  cacheHits: number;
}

/**
 * @example
 * const reader = new ArtifactReader({ store, layout, cache: new ChunkCache({ maxBytes: 1 << 30 }) });
 * const manifest = await reader.readManifest(tenant, documentId);
 * const seq = model.createSequence();
 * await reader.loadInto(seq, manifest);
 */
export class ArtifactReader {
  private readonly store: ObjectStore;
  private readonly layout: ArtifactLayout;
  private readonly cache: ChunkCache | undefined;
  private readonly maxInFlightGets: number;
  /** Buffers for chunk bytes nobody keeps (no cache): at most maxInFlightGets + 1 in use at once. */
  private readonly pool: BufferPool;

  constructor(options: ArtifactReaderOptions) {
    this.store = options.store;
    this.layout = options.layout;
    this.cache = options.cache;
    this.maxInFlightGets = options.maxInFlightGets ?? DEFAULT_MAX_IN_FLIGHT_GETS;
    if (!Number.isSafeInteger(this.maxInFlightGets) || this.maxInFlightGets < 1) {
      throw new RangeError(`maxInFlightGets must be a positive integer, got ${this.maxInFlightGets}`);
    }
    this.pool = new BufferPool({ maxFree: this.maxInFlightGets + 1 });
  }

  /**
   * The manifest of a document, verified against this reader's model and layout. Throws
   * ObjectNotFoundError ("document … not found") when the document has no manifest.
   */
  async readManifest(tenant: string, documentId: string): Promise<DocumentManifest> {
    const key = manifestObjectKey(validateTenant(tenant), validateDocumentId(documentId));
    let bytes: Uint8Array;
    try {
      bytes = await this.store.get(key);
    } catch (error) {
      if (error instanceof ObjectNotFoundError) throw new ObjectNotFoundError(key, `document ${documentId} of tenant ${tenant}`);
      throw error;
    }
    const manifest = parseManifest(key, bytes);
    if (manifest.tenant !== tenant) throw new ManifestFieldError(key, 'tenant', `names tenant ${manifest.tenant}, stored under tenant ${tenant}`);
    if (manifest.documentId !== documentId)
      throw new ManifestFieldError(key, 'documentId', `names document ${manifest.documentId}, stored under ${documentId}`);
    this.checkManifest(key, manifest);
    return manifest;
  }

  /**
   * The document's stored encoder tail (format/tail-codec; the manifest must name one), checked in
   * full: its size and SHA-256 against the manifest, then every field against `shape` (the model's)
   * and the manifest's token count and replay length. ArtifactMissingError when the store lacks it,
   * ArtifactCorruptError when a check fails; the caller then computes the tail (it is optional).
   */
  async readTail(
    manifest: DocumentManifest,
    shape: Omit<TailShape, 'tokenCount' | 'replayTokens' | 'modelId' | 'layoutId'>,
    candidates: { readonly sourceRatio: number; readonly blockSize: number } | null,
  ): Promise<StoredTail> {
    const t = manifest.tail;
    if (t === undefined)
      throw new ObjectNotFoundError(manifestObjectKey(manifest.tenant, manifest.documentId), `stored encoder tail of document ${manifest.documentId}`);
    const objectKey = chunkObjectKey(manifest.tenant, t.key);
    let bytes: Uint8Array;
    try {
      bytes = await this.store.get(objectKey);
    } catch (error) {
      if (error instanceof ObjectNotFoundError)
        throw new ArtifactMissingError(objectKey, `the stored encoder tail of document ${manifest.documentId}`, { cause: error });
      throw error;
    }
    if (bytes.length !== t.sizeBytes)
      throw new ArtifactCorruptError(
        objectKey,
        Math.min(bytes.length, t.sizeBytes),
        `encoder tail has ${bytes.length} bytes, the manifest records ${t.sizeBytes}`,
      );
    if (!tailChecksumValid(bytes))
      throw new ArtifactCorruptError(objectKey, bytes.length - TAIL_CHECKSUM_BYTES, 'encoder tail: its SHA-256 checksum does not match its bytes');
    if (tailKey(bytes) !== t.key)
      throw new ArtifactCorruptError(objectKey, bytes.length - TAIL_CHECKSUM_BYTES, 'encoder tail: its checksum is not the key the manifest names');
    const { modelId, layoutId } = this.layout;
    return decodeTail(objectKey, bytes, { ...shape, modelId, layoutId, tokenCount: manifest.tokenCount, replayTokens: t.replayTokens }, candidates);
  }

  /**
   * Appends the document's tokens [0, uptoToken) and the global-KV rows of the entries they complete
   * to `seq`, which must be empty and built for this layout (SequenceStateError otherwise).
   */
  async loadInto(seq: Sequence, manifest: DocumentManifest, options: LoadOptions = {}): Promise<LoadStats> {
    if (!isSequenceEmpty(seq)) throw new SequenceStateError('refusing to load an artifact into a non-empty sequence (it holds tokens or global-KV rows)');
    checkSequenceLayout(seq, this.layout);
    this.checkManifest(manifestObjectKey(manifest.tenant, manifest.documentId), manifest);
    const upto = options.uptoToken ?? manifest.tokenCount;
    if (!Number.isSafeInteger(upto) || upto < 0 || upto > manifest.tokenCount) {
      throw new SequenceStateError(`uptoToken must be an integer in [0, ${manifest.tokenCount}], got ${upto}`);
    }
    const refs: ChunkRef[] = [];
    for (const [i, c] of manifest.chunks.entries()) {
      if (c.startToken >= upto) break;
      refs.push({ ...c, encoder: manifest.encoder ?? '', previousKey: i === 0 ? null : (manifest.chunks[i - 1]?.key ?? null) });
    }
    const stats: MutableStats = { tokensLoaded: 0, chunksLoaded: 0, bytesFetched: 0, cacheHits: 0 };
    await this.forEachChunk(manifest.tenant, refs, stats, (chunk) => {
      appendChunk(seq, this.layout, chunk, upto);
      stats.tokensLoaded = sequenceLength(seq);
    });
    return stats;
  }

  /** The document's token ids (every chunk is fetched and verified). */
  async readTokens(manifest: DocumentManifest): Promise<number[]> {
    const tokens: number[] = [];
    await this.visitChunks(manifest, (chunk) => {
      for (const id of chunk.tokenIds) tokens.push(id);
    });
    return tokens;
  }

  /**
   * Fetches and verifies every chunk of the manifest (as loadInto does, with the same parallelism and
   * cache) and visits them strictly in order, as decoded chunks: token ids and packed rows, the rows
   * being views of the fetched bytes. No Sequence is involved (bytes in, bytes out). A chunk is valid
   * only while `visit` runs: without a cache the reader reads the next chunks into the same buffers,
   * so copy what you keep. An exception from `visit` stops the read.
   *
   * @example
   * await reader.visitChunks(manifest, (chunk) => sink.write(chunk.sources[0].mainKvU8));
   */
  async visitChunks(manifest: DocumentManifest, visit: (chunk: DecodedChunk) => void): Promise<LoadStats> {
    this.checkManifest(manifestObjectKey(manifest.tenant, manifest.documentId), manifest);
    const refs = manifest.chunks.map((c, i) => ({
      ...c,
      encoder: manifest.encoder ?? '',
      previousKey: i === 0 ? null : (manifest.chunks[i - 1]?.key ?? null),
    }));
    const stats: MutableStats = { tokensLoaded: 0, chunksLoaded: 0, bytesFetched: 0, cacheHits: 0 };
    await this.forEachChunk(manifest.tenant, refs, stats, (chunk) => {
      visit(chunk);
      stats.tokensLoaded = chunk.endToken;
    });
    return stats;
  }

  /**
   * Loads the first `prefix.chunkCount` full chunks of `prefix.tokenIds` (content-addressed, no
   * manifest needed) into an empty Sequence: the reuse path of an encoder after `existingChunkPrefix`.
   *
   * @example
   * const chunkCount = await existingChunkPrefix(store, layout, tenant, ids, 4096);
   * await reader.loadChunkPrefix(seq, { tenant, tokenIds: ids, chunkTokens: 4096, chunkCount });
   * // encode ids.slice(chunkCount * 4096) with encoder replay, then write the rest
   */
  async loadChunkPrefix(seq: Sequence, prefix: ChunkPrefix): Promise<LoadStats> {
    const { tenant, tokenIds, chunkTokens, chunkCount } = prefix;
    if (!isSequenceEmpty(seq)) throw new SequenceStateError('refusing to load an artifact into a non-empty sequence (it holds tokens or global-KV rows)');
    checkSequenceLayout(seq, this.layout);
    validateChunkTokens(this.layout, chunkTokens);
    const keys = fullChunkKeys(this.layout.modelId, tokenIds, chunkTokens, chunkCount, this.layout.encoder);
    if (keys.length < chunkCount)
      throw new SequenceStateError(`${tokenIds.length} tokens hold ${keys.length} full chunks of ${chunkTokens}, ${chunkCount} requested`);
    const refs = keys.map((key, i) => ({
      key,
      encoder: this.layout.encoder,
      previousKey: i === 0 ? null : (keys[i - 1] ?? null),
      startToken: i * chunkTokens,
      endToken: (i + 1) * chunkTokens,
    }));
    const stats: MutableStats = { tokensLoaded: 0, chunksLoaded: 0, bytesFetched: 0, cacheHits: 0 };
    await this.forEachChunk(validateTenant(tenant), refs, stats, (chunk) => {
      appendChunk(seq, this.layout, chunk);
      stats.tokensLoaded = sequenceLength(seq);
    });
    return stats;
  }

  private checkManifest(key: string, manifest: DocumentManifest): void {
    if (manifest.modelId !== this.layout.modelId) throw new ModelMismatchError(key, this.layout.modelId, manifest.modelId);
    if (manifest.layoutId !== this.layout.layoutId) {
      throw new ModelMismatchError(key, `${this.layout.modelId} (layout ${this.layout.layoutId})`, `${manifest.modelId} (layout ${manifest.layoutId})`);
    }
    try {
      validateChunkTokens(this.layout, manifest.chunkTokens);
    } catch (error) {
      throw new ManifestFieldError(key, 'chunkTokens', error instanceof Error ? error.message : String(error));
    }
  }

  /** Fetches refs with at most maxInFlightGets in flight and visits them strictly in order. */
  private async forEachChunk(tenant: string, refs: readonly ChunkRef[], stats: MutableStats, visit: (chunk: DecodedChunk) => void): Promise<void> {
    const inFlight: Promise<FetchedChunk>[] = [];
    let launched = 0;
    const launch = (): void => {
      while (launched < refs.length && launched - stats.chunksLoaded < this.maxInFlightGets) {
        const ref = refs[launched] as ChunkRef;
        const p = this.fetchChunk(tenant, ref, stats);
        p.catch(() => undefined); // awaited below in order; this only keeps a later failure from going unhandled
        inFlight.push(p);
        launched++;
      }
    };
    launch();
    for (let i = 0; i < refs.length; i++) {
      const fetched = await (inFlight[i] as Promise<FetchedChunk>);
      inFlight[i] = DONE; // drop the reference: the chunk's bytes may go as soon as it is visited
      visit(fetched.chunk);
      if (fetched.pooled !== undefined) this.pool.release(fetched.pooled); // visit copied what it keeps
      stats.chunksLoaded++;
      launch();
    }
  }

  private async fetchChunk(tenant: string, ref: ChunkRef, stats: MutableStats): Promise<FetchedChunk> {
    const objectKey = chunkObjectKey(tenant, ref.key);
    const hint = { sizeBytesHint: expectedSize(this.layout, ref) };
    if (this.cache === undefined) {
      // No cache keeps the bytes: read into a pooled buffer, given back once the chunk is visited.
      const into = this.pool.acquire(hint.sizeBytesHint);
      const bytes = await this.store.get(objectKey, { ...hint, into });
      stats.bytesFetched += bytes.length;
      const pooled = bytes.buffer === into.buffer ? into : undefined;
      let chunk: DecodedChunk;
      try {
        chunk = this.check(objectKey, ref, bytes, await decodeChunkAsync(this.layout, objectKey, bytes)); // hashed in slices: other gets go on
      } catch (error) {
        if (pooled !== undefined) this.pool.release(pooled);
        throw error;
      }
      return { chunk, ...(pooled !== undefined ? { pooled } : {}) };
    }
    const loaded: { chunk?: DecodedChunk } = {};
    const load = async (): Promise<Uint8Array> => {
      const bytes = await this.store.get(objectKey, hint);
      stats.bytesFetched += bytes.length;
      loaded.chunk = this.check(objectKey, ref, bytes, await decodeChunkAsync(this.layout, objectKey, bytes)); // only verified bytes enter the cache
      return bytes;
    };
    const bytes = await this.cache.getOrLoad(objectKey, load);
    if (loaded.chunk !== undefined) return { chunk: loaded.chunk };
    stats.cacheHits++;
    // The cache holds only objects this reader verified (above) and nobody modifies: their trailer is
    // their computed checksum, so they are not hashed again; the manifest checks still run.
    return { chunk: this.check(objectKey, ref, bytes, decodeChunk(this.layout, objectKey, bytes, { checksum: 'trust' })) };
  }

  /** Checks a decoded (self-verified) chunk against what the manifest and the key chain say. */
  private check(objectKey: string, ref: ChunkRef, bytes: Uint8Array, chunk: DecodedChunk): DecodedChunk {
    if (chunk.startToken !== ref.startToken || chunk.endToken !== ref.endToken) {
      throw new ArtifactCorruptError(
        objectKey,
        14,
        `chunk covers tokens [${chunk.startToken}, ${chunk.endToken}), the manifest says [${ref.startToken}, ${ref.endToken})`,
      );
    }
    if (ref.sizeBytes !== undefined && bytes.length !== ref.sizeBytes) {
      throw new ArtifactCorruptError(objectKey, Math.min(bytes.length, ref.sizeBytes), `object is ${bytes.length} bytes, the manifest says ${ref.sizeBytes}`);
    }
    if (ref.sha256 !== undefined && chunk.checksumHex !== ref.sha256) {
      throw new ArtifactCorruptError(objectKey, bytes.length - 32, `checksum ${chunk.checksumHex} differs from the manifest's ${ref.sha256}`);
    }
    if (chunkKey(this.layout.modelId, ref.previousKey, chunk.tokenIds, ref.encoder) !== ref.key) {
      throw new ArtifactCorruptError(objectKey, chunkHeaderBytes(this.layout), 'token ids do not hash to the chunk key (with the previous chunk key)');
    }
    return chunk;
  }
}
