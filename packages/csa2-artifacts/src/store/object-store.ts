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
  /** Every object whose key starts with `prefix`, sorted by key. */
  list(prefix: string): Promise<ObjectInfo[]>;
  /** Removes the object; deleting an absent key is not an error. */
  delete(key: string): Promise<void>;
  /** Checks the store is reachable (readiness probes); throws with the reason when not. */
  ping(): Promise<void>;
  /** Releases clients and sockets. */
  close(): Promise<void>;
}
