/**
 * @module store/object-store
 * The object-store interface every artifact read and write goes through, with two backends:
 * the filesystem (store/fs-store, the embedded default) and S3 (store/s3-store). Keys are
 * '/'-separated relative paths of printable ASCII ([A-Za-z0-9._=/-], no empty, '.' or '..'
 * segments); both backends refuse anything else with an InvalidKeyError.
 */

/** What `head` and `list` report about one object. */
export interface ObjectInfo {
  readonly key: string;
  readonly sizeBytes: number;
  /**
   * When the object was last written or touched, in ms since the epoch, by the store's clock (file
   * mtime; S3 LastModified, whole seconds). Garbage collection compares it with a grace period.
   */
  readonly lastModifiedMs: number;
}

export interface ListOptions {
  /** Only keys that sort after this string (byte order; need not be a key). @defaultValue none */
  readonly startAfter?: string;
  /** At most this many objects, the first in key order. @defaultValue all */
  readonly limit?: number;
}

/** What `deleteIfUnmodifiedSince` did. */
export interface ConditionalDeleteResult {
  /** 'deleted'; 'modified' (kept: written or touched at or after the time given); 'absent'. */
  readonly outcome: 'deleted' | 'modified' | 'absent';
  /** The size of the object deleted or kept (0 when absent). */
  readonly sizeBytes: number;
}

/** A byte range [offset, offset + length) of an object. */
export interface ByteRange {
  readonly offset: number;
  readonly length: number;
}

export interface PutOptions {
  /**
   * Write only if no object exists under the key (idempotent writers). Returns false, writing
   * nothing, when one does. @defaultValue false
   */
  readonly ifAbsent?: boolean;
}

export interface GetOptions {
  /**
   * The object's size when the caller knows it (a manifest records every chunk's). A backend may use
   * it to fetch a large object as parallel ranged reads without asking for the size first; a wrong
   * hint costs speed, never correctness (the backend then reads the object as it is).
   */
  readonly sizeBytesHint?: number;
  /**
   * A buffer the backend may read the object into when it is large enough (from a BufferPool: it
   * saves a fresh allocation per object). The result is then a view of its start; otherwise it is a
   * new buffer and `into` is left untouched. @defaultValue none
   */
  readonly into?: Uint8Array;
}

export interface ObjectStore {
  /** A URL naming the store (file:///… or s3://bucket/prefix?…), for messages and logs. */
  readonly url: string;
  /**
   * Stores `body` under `key`, atomically: readers see either the old object or all of the new
   * one, never a partial write. Returns false when `ifAbsent` is set and the key already exists.
   */
  put(key: string, body: Uint8Array, options?: PutOptions): Promise<boolean>;
  /** The whole object; throws ObjectNotFoundError when absent. */
  get(key: string, options?: GetOptions): Promise<Uint8Array>;
  /** Bytes [offset, offset+length) of the object; throws ObjectNotFoundError when absent, RangeError past its end. */
  getRange(key: string, range: ByteRange): Promise<Uint8Array>;
  /** Size of the object, or null when absent. */
  head(key: string): Promise<ObjectInfo | null>;
  /** Every object whose key starts with `prefix`, sorted by key (byte order); `options` pages through them. */
  list(prefix: string, options?: ListOptions): Promise<ObjectInfo[]>;
  /** Removes the object; deleting an absent key is not an error. */
  delete(key: string): Promise<void>;
  /**
   * Sets the object's last-modified time to now without changing its bytes (a writer that relies on
   * an object it did not write keeps it out of garbage collection's reach for the grace period).
   * Returns its info afterwards, or null when it is absent.
   */
  touch(key: string): Promise<ObjectInfo | null>;
  /**
   * Deletes the object only if its last-modified time is before `sinceMs` (store clock). How exact:
   * the filesystem store decides atomically (a touch or write before the decision keeps the object,
   * one after it finds the object gone); S3 checks with HEAD, then deletes, so a touch landing
   * between the two is lost (garbage collection's writers re-check their chunks after their manifest).
   */
  deleteIfUnmodifiedSince(key: string, sinceMs: number): Promise<ConditionalDeleteResult>;
  /** Checks the store is reachable (readiness probes); throws with the reason when not. */
  ping(): Promise<void>;
  /** Releases clients and sockets. */
  close(): Promise<void>;
}
