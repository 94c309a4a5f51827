/**
 * @module scheduler/document-cache
 * Loaded documents kept in memory once for every question on them ("ingest once, ask many times"):
 * a document's artifact is read and verified into a Sequence, which is frozen (its packed global
 * cache becomes an immutable prefix, @csa2/core PackedRowStore) and handed out as forks that read the
 * rows in place and own only what they add (the prompt, the output, their windows). Thirty-two
 * concurrent questions on one 1M-token document hold its ~0.9 GB (released layout) once, not 32
 * times, and a repeated question skips the fetch, the verification and the copy.
 *
 * Entries are keyed by tenant, document id and the manifest's identity (its chunk checksums and
 * creation time), so a re-ingested document is a new entry and no tenant reads another's. The cache
 * is bounded in bytes; entries in use (leased) are never evicted, the least recently used idle ones
 * go first, and a document that does not fit beside the leased ones is not cached: its work loads
 * a private copy (GenerateWork's fallback), as when the cache is off (maxBytes 0). Concurrent
 * acquires of one document share one load; a load that fails caches nothing.
 */
import { createHash } from 'node:crypto';
import type { DocumentManifest } from '@csa2/artifacts';
import { Csa2Error, RowArena, type RowArenaStats, type Sequence } from '@csa2/core';
import type { PrimedTail } from './stored-tail.js';

/**
 * Encoder tails are kept for replays of at most this many rows (their stream is R × hc × dim floats:
 * 67 MB at the released width for 1,024 rows; the default R = 128 is ~8 MB), and at most
 * MAX_TAILS_PER_DOCUMENT replay lengths a document, so that requests choosing many or long replays do
 * not fill the cache with tails.
 */
export const MAX_TAIL_REPLAY = 1024;
export const MAX_TAILS_PER_DOCUMENT = 4;

/** Default bytes of loaded documents an engine keeps (CSA2_DOCUMENT_CACHE_BYTES): one 1M-token document at the released layout, twice. */
export const DEFAULT_DOCUMENT_CACHE_BYTES = 2 * 1024 ** 3;

export interface DocumentCacheStats {
  /** Acquires served by a loaded (or loading) entry. */
  readonly hits: number;
  /** Acquires that loaded the document. */
  readonly misses: number;
  /** Acquires for a document that could not be cached (too big beside the leased entries). */
  readonly bypassed: number;
  readonly evictions: number;
  readonly entries: number;
  /** Packed global-cache bytes of the documents held (capacity included). */
  readonly bytes: number;
  /** Bytes of their stored encoder tails (windows, token ids, streams), held besides `bytes` within maxBytes. */
  readonly tailBytes: number;
  readonly maxBytes: number;
  /** Entries with at least one lease. */
  readonly leased: number;
  /** Questions that started from a document's stored encoder tail (see PrimedTail) instead of encoding it. */
  readonly tailHits: number;
  /** Encoder tails stored (one per document and replay length, by the first question that encoded it). */
  readonly tailsStored: number;
  /** Encoder tails read from a document's artifact (its ingest stored one) instead of computed. */
  readonly tailsLoaded: number;
  /** Stored encoder tails not used (missing, damaged, not matching the model): those questions computed it. */
  readonly tailsRejected: number;
  /** Why the last one was not used. */
  readonly lastTailRejection: string | null;
  /**
   * The memory loaded documents' rows are written into (@csa2/core RowArena, capacity maxBytes): its
   * bytes in use, the most of it ever used (resident since: the next document reuses those pages), the
   * loads' requests it served and those it could not (they allocated as before). Null with the arena off.
   */
  readonly arena: RowArenaStats | null;
}

/** A loaded document lent to one work item; `release` once the work no longer reads it. */
export interface DocumentLease {
  /** The frozen loaded sequence: fork it, never modify it. */
  readonly seq: Sequence;
  /** The document's encoder tail for replay R, if a question stored one (never modify it); `use` false: a look that is not counted as a use. */
  tail(replay: number, use?: boolean): PrimedTail | null;
  /** Offers the encoder tail for replay R (computed by a question, or read from the artifact); kept (true) when the cache has room for its bytes beside the rest. */
  storeTail(replay: number, tail: PrimedTail, origin?: 'computed' | 'stored'): boolean;
  release(): void;
}

interface Entry {
  readonly key: string;
  bytes: number;
  seq: Sequence | null;
  loading: Promise<Sequence> | null;
  leases: number;
  readonly tails: Map<number, PrimedTail>;
}

/** The cache key of a manifest's document: tenant, id and the exact stored content. */
export function documentCacheKey(tenant: string, documentId: string, manifest: DocumentManifest): string {
  const h = createHash('sha256');
  h.update(`${manifest.createdAt}\0${manifest.tokenCount}\0`);
  for (const c of manifest.chunks) h.update(`${c.sha256}\0`);
  return `${tenant}\0${documentId}\0${h.digest('hex')}`;
}

export class DocumentCache {
  /** Where loaded documents' rows go (see DocumentCacheStats.arena); null when off or maxBytes is 0. */
  readonly arena: RowArena | null;
  private readonly entries = new Map<string, Entry>(); // insertion order = recency, oldest first
  private held = 0;
  private hits = 0;
  private misses = 0;
  private bypassed = 0;
  private evictions = 0;
  private tailHits = 0;
  private tailsStored = 0;
  private tailsLoaded = 0;
  private tailsRejected = 0;
  private lastTailRejection: string | null = null;
  private tailBytes = 0;

  /**
   * `arena` (default true): documents are loaded into one region of memory of maxBytes that the cache
   * keeps (DocumentCache.loadSequence): a document that replaces another is written into pages the
   * process holds already instead of new ones (on a VM, the page faults were most of a 1M-token load).
   * The process then keeps what documents have used (at most maxBytes) resident.
   */
  constructor(
    readonly maxBytes: number,
    options: { readonly arena?: boolean } = {},
  ) {
    if (!Number.isSafeInteger(maxBytes) || maxBytes < 0)
      throw new Csa2Error('config-invalid', `document cache bytes must be a non-negative integer, got ${maxBytes}`);
    this.arena = options.arena !== false && maxBytes > 0 ? new RowArena(maxBytes) : null;
  }

  /**
   * `seq` (new, empty) made ready for a document this cache is about to hold (acquire's `load`): its rows
   * go to the arena where they fit. A load that fails must call `discard` on it.
   */
  loadSequence(seq: Sequence): Sequence {
    if (this.arena !== null) seq.useArena(this.arena);
    return seq;
  }

  /** Gives back the rows of a sequence from loadSequence that the cache will not hold (its load failed). */
  discard(seq: Sequence): void {
    seq.releaseRows();
  }

  get stats(): DocumentCacheStats {
    let leased = 0;
    for (const e of this.entries.values()) if (e.leases > 0) leased++;
    return {
      hits: this.hits,
      misses: this.misses,
      bypassed: this.bypassed,
      evictions: this.evictions,
      entries: this.entries.size,
      bytes: this.held - this.tailBytes,
      tailBytes: this.tailBytes,
      maxBytes: this.maxBytes,
      leased,
      tailHits: this.tailHits,
      tailsStored: this.tailsStored,
      tailsLoaded: this.tailsLoaded,
      tailsRejected: this.tailsRejected,
      lastTailRejection: this.lastTailRejection,
      arena: this.arena?.stats ?? null,
    };
  }

  /** A document's stored encoder tail could not be used (`reason`); the question computes it. */
  noteTailRejected(reason: string): void {
    this.tailsRejected++;
    this.lastTailRejection = reason;
  }

  /**
   * True when a document of `bytes` is (or could be) cached now: present, or fits once idle entries
   * are evicted. The scheduler's admission uses it to count the document's rows as shared.
   */
  canHold(key: string, bytes: number): boolean {
    if (this.entries.has(key)) return true;
    return bytes <= this.maxBytes - this.leasedBytes();
  }

  /**
   * Leases the document under `key`, loading it with `load` (which returns a filled sequence; it is
   * frozen here) unless it is cached or loading. Null when it cannot be cached: the caller loads a
   * private copy.
   */
  async acquire(key: string, bytes: number, load: () => Promise<Sequence>): Promise<DocumentLease | null> {
    let entry = this.entries.get(key);
    if (entry !== undefined) {
      this.hits++;
      this.entries.delete(key);
      this.entries.set(key, entry); // most recently used
    } else {
      if (!this.makeRoom(bytes)) {
        this.bypassed++;
        return null;
      }
      this.misses++;
      const e: Entry = { key, bytes, seq: null, loading: null, leases: 0, tails: new Map() };
      e.loading = load().then(
        (seq) => {
          seq.freeze();
          e.seq = seq;
          e.loading = null;
          return seq;
        },
        (err: unknown) => {
          if (this.entries.get(key) === e) this.drop(e);
          throw err;
        },
      );
      this.entries.set(key, e);
      this.held += bytes;
      entry = e;
    }
    entry.leases++;
    const e = entry;
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      e.leases--;
      if (this.held > this.maxBytes) this.makeRoom(0);
    };
    const tail = (replay: number, use = true): PrimedTail | null => {
      const t = e.tails.get(replay) ?? null;
      if (t !== null && use) this.tailHits++;
      return t;
    };
    const storeTail = (replay: number, t: PrimedTail, origin: 'computed' | 'stored' = 'computed'): boolean => {
      // only while the entry is cached (not evicted meanwhile) and the tail fits beside everything held
      if (released || replay > MAX_TAIL_REPLAY || e.tails.has(replay) || e.tails.size >= MAX_TAILS_PER_DOCUMENT) return false;
      if (this.entries.get(e.key) !== e || this.held + t.bytes > this.maxBytes) return false;
      e.tails.set(replay, t);
      e.bytes += t.bytes;
      this.held += t.bytes;
      this.tailBytes += t.bytes;
      if (origin === 'stored') this.tailsLoaded++;
      else this.tailsStored++;
      return true;
    };
    try {
      const seq = e.seq ?? (await (e.loading as Promise<Sequence>));
      return { seq, tail, storeTail, release };
    } catch (err) {
      release();
      throw err;
    }
  }

  /** Drops every idle entry (tests, shutdown). */
  clear(): void {
    for (const e of this.entries.values()) {
      if (e.leases > 0 || e.loading !== null) continue;
      this.drop(e);
    }
  }

  private drop(e: Entry): void {
    this.entries.delete(e.key);
    this.held -= e.bytes;
    for (const t of e.tails.values()) this.tailBytes -= t.bytes;
    // an idle entry: no work reads it (works release their lease when they end, between forward calls),
    // so its rows go back to the arena for the next document
    e.seq?.releaseRows();
    e.seq = null;
  }

  private leasedBytes(): number {
    let b = 0;
    for (const e of this.entries.values()) if (e.leases > 0 || e.loading !== null) b += e.bytes;
    return b;
  }

  /** Evicts idle entries, oldest first, until `bytes` more fit; false (nothing evicted) when they cannot. */
  private makeRoom(bytes: number): boolean {
    if (bytes > this.maxBytes - this.leasedBytes()) return false;
    for (const e of this.entries.values()) {
      if (this.held + bytes <= this.maxBytes) break;
      if (e.leases > 0 || e.loading !== null) continue;
      this.drop(e);
      this.evictions++;
    }
    return this.held + bytes <= this.maxBytes;
  }
}
