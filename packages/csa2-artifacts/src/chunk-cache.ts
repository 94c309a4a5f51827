/**
 * @module chunk-cache
 * A decoder worker's local cache of chunk objects, in memory, bounded in bytes, least recently used
 * out first. Values are the objects' bytes as fetched (packed rows, 4 bits a value); decoded chunks
 * are views of them, so callers must not modify them. Concurrent loads of one key share one fetch, and a
 * load that fails caches nothing. Counters feed metrics.
 *
 * ArtifactReader puts only objects it has verified (checksum included) into the cache, and on a hit
 * it trusts their trailer instead of hashing them again: anything else writing into a cache handed
 * to a reader must hold to the same rule.
 */

export interface ChunkCacheOptions {
  /** Upper bound on the bytes held; an object larger than this is never cached. */
  readonly maxBytes: number;
}

export interface ChunkCacheStats {
  /** Lookups served from memory or from a load already in flight. */
  readonly hits: number;
  /** Lookups that started a load (or found nothing, for `get`). */
  readonly misses: number;
  /** Entries dropped to make room. */
  readonly evictions: number;
  readonly entries: number;
  readonly bytes: number;
  readonly maxBytes: number;
}

/**
 * @example
 * const cache = new ChunkCache({ maxBytes: 2 * 1024 ** 3 });
 * const bytes = await cache.getOrLoad(key, () => store.get(key));
 */
export class ChunkCache {
  readonly maxBytes: number;
  private readonly entries = new Map<string, Uint8Array>(); // insertion order = recency order, oldest first
  private readonly loading = new Map<string, Promise<Uint8Array>>();
  private heldBytes = 0;
  private hits = 0;
  private misses = 0;
  private evictions = 0;

  constructor(options: ChunkCacheOptions) {
    if (!Number.isSafeInteger(options.maxBytes) || options.maxBytes < 0) {
      throw new RangeError(`ChunkCache maxBytes must be a non-negative integer, got ${options.maxBytes}`);
    }
    this.maxBytes = options.maxBytes;
  }

  get stats(): ChunkCacheStats {
    return { hits: this.hits, misses: this.misses, evictions: this.evictions, entries: this.entries.size, bytes: this.heldBytes, maxBytes: this.maxBytes };
  }

  /** The bytes under `key` (now the most recently used), or undefined; counts a hit or a miss. */
  get(key: string): Uint8Array | undefined {
    const bytes = this.touch(key);
    if (bytes === undefined) this.misses++;
    else this.hits++;
    return bytes;
  }

  /** Whether `key` is held (no counters, no recency change). */
  has(key: string): boolean {
    return this.entries.has(key);
  }

  /**
   * Holds `bytes` under `key` as the most recently used entry, evicting the least recently used ones
   * until the total fits. Returns false (holding nothing) when the object alone exceeds maxBytes.
   */
  set(key: string, bytes: Uint8Array): boolean {
    this.delete(key);
    if (bytes.length > this.maxBytes) return false;
    while (this.heldBytes + bytes.length > this.maxBytes) {
      const oldest = this.entries.keys().next();
      if (oldest.done === true) break;
      this.delete(oldest.value);
      this.evictions++;
    }
    this.entries.set(key, bytes);
    this.heldBytes += bytes.length;
    return true;
  }

  delete(key: string): void {
    const bytes = this.entries.get(key);
    if (bytes === undefined) return;
    this.entries.delete(key);
    this.heldBytes -= bytes.length;
  }

  clear(): void {
    this.entries.clear();
    this.heldBytes = 0;
  }

  /**
   * The bytes under `key`, loading (and caching) them with `load` on a miss. Concurrent calls for one
   * key share a single load; a failed load rejects every waiter and caches nothing.
   */
  async getOrLoad(key: string, load: () => Promise<Uint8Array>): Promise<Uint8Array> {
    const held = this.touch(key);
    if (held !== undefined) {
      this.hits++;
      return held;
    }
    const pending = this.loading.get(key);
    if (pending !== undefined) {
      this.hits++;
      return pending;
    }
    this.misses++;
    const started = (async () => {
      try {
        const bytes = await load();
        this.set(key, bytes);
        return bytes;
      } finally {
        this.loading.delete(key);
      }
    })();
    this.loading.set(key, started);
    return started;
  }

  private touch(key: string): Uint8Array | undefined {
    const bytes = this.entries.get(key);
    if (bytes === undefined) return undefined;
    this.entries.delete(key); // re-insert: most recently used goes last
    this.entries.set(key, bytes);
    return bytes;
  }
}
