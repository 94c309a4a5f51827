/**
 * @module errors
 * Typed errors of object storage and artifacts. They extend csa2-core's Csa2Error, so services map
 * them to retry decisions and HTTP statuses by `code` alone: 'store-unavailable' is transient
 * (retry with backoff); every other code here is deterministic (fail at once).
 */
import { Csa2Error } from '@csa2/core';

/** A store URL or store option is malformed (names the part that is wrong). */
export class StoreConfigError extends Csa2Error {
  constructor(message: string) {
    super('store-config', message);
  }
}

/** An object key breaks the key rules of store/object-store. */
export class InvalidKeyError extends Csa2Error {
  readonly key: string;
  constructor(key: string, reason: string) {
    super('store-config', `invalid object key ${JSON.stringify(key)}: ${reason}`);
    this.key = key;
  }
}

/** The store could not be reached or answered with a server error (transient: retry). */
export class StoreUnavailableError extends Csa2Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super('store-unavailable', message, options);
  }
}

/** No object (or no document) under the key. */
export class ObjectNotFoundError extends Csa2Error {
  readonly key: string;
  constructor(key: string, what = 'object') {
    super('not-found', `${what} not found: ${key}`);
    this.key = key;
  }
}

/** An artifact object fails verification; names the key and the byte offset where it went wrong. */
export class ArtifactCorruptError extends Csa2Error {
  readonly key: string;
  readonly offset: number;
  readonly reason: string;
  constructor(
    key: string,
    offset: number,
    reason: string,
    options?: { readonly document?: { readonly tenant: string; readonly documentId: string }; readonly cause?: unknown },
  ) {
    const doc = options?.document;
    const whose = doc === undefined ? '' : `document ${doc.documentId} of tenant ${doc.tenant} is damaged (ingesting it again repairs it): `;
    super(
      'artifact-corrupt',
      `${whose}corrupt artifact object ${key} at byte ${offset}: ${reason}`,
      options?.cause !== undefined ? { cause: options.cause } : undefined,
    );
    this.key = key;
    this.offset = offset;
    this.reason = reason;
  }
}

/**
 * An object that a manifest lists is gone from the store: storage loss (a deleted or lost chunk), a
 * server-side failure, unlike ObjectNotFoundError for something that never existed. Deterministic:
 * the document must be ingested again.
 */
export class ArtifactMissingError extends Csa2Error {
  readonly key: string;
  constructor(key: string, what: string, options?: { cause?: unknown }) {
    super('artifact-missing', `${what}: object ${key} is missing from the store`, options);
    this.key = key;
  }
}

/** An artifact was written for another model (or cache layout) than the reader's. */
export class ModelMismatchError extends Csa2Error {
  readonly key: string;
  constructor(key: string, expected: string, actual: string) {
    super('model-mismatch', `artifact object ${key} belongs to model ${actual}, expected ${expected}`);
    this.key = key;
  }
}

/** An artifact object has a format version this reader does not know. */
export class UnsupportedVersionError extends Csa2Error {
  readonly key: string;
  readonly version: number;
  constructor(key: string, version: number, supported: readonly number[]) {
    super('unsupported-version', `artifact object ${key} has format version ${version}; this reader supports ${supported.join(', ')}`);
    this.key = key;
    this.version = version;
  }
}
