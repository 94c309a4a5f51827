/**
 * @module scheduler/stored-chunks
 * Reading what the store holds for a work item: a document's token ids, the verified prefix of
 * stored chunks an ingest re-uses (a damaged chunk ends it and is deleted so the writer stores it
 * again), and the mapping of a missing listed chunk to storage loss.
 */
import {
  ArtifactCorruptError,
  ArtifactMissingError,
  ArtifactReader,
  ModelMismatchError,
  ObjectNotFoundError,
  UnsupportedVersionError,
  chunkObjectKey,
  fullChunkKeys,
  type ObjectStore,
} from '@csa2/artifacts';
import type { Sequence } from '@csa2/core';
import type { DocumentRef } from '../types.js';
import type { WorkContext } from './work-context.js';

/**
 * Runs a read of the chunks a manifest lists: one that is missing is storage loss
 * (ArtifactMissingError), not an unknown document; one that fails verification names the document
 * (the next ingest of its text finds the damaged object and writes it again).
 */
export async function listedChunks<T>(doc: DocumentRef, read: () => Promise<T>): Promise<T> {
  try {
    return await read();
  } catch (err) {
    if (err instanceof ObjectNotFoundError) throw new ArtifactMissingError(err.key, `document ${doc.documentId} of tenant ${doc.tenant}`, { cause: err });
    if (err instanceof ArtifactCorruptError) throw new ArtifactCorruptError(err.key, err.offset, err.reason, { document: doc, cause: err });
    throw err;
  }
}

/** A stored chunk that cannot be used as it is: it failed verification, or it is gone. */
function isDamagedChunkError(err: unknown): err is ArtifactCorruptError | ObjectNotFoundError | ModelMismatchError | UnsupportedVersionError {
  return (
    err instanceof ArtifactCorruptError || err instanceof ObjectNotFoundError || err instanceof ModelMismatchError || err instanceof UnsupportedVersionError
  );
}

/** A stored document's token ids (its manifest, then every chunk, verified). */
export async function documentTokens(ctx: WorkContext, store: ObjectStore, doc: DocumentRef): Promise<number[]> {
  const reader = new ArtifactReader({ store, layout: ctx.layout, cache: ctx.cache });
  const manifest = await reader.readManifest(doc.tenant, doc.documentId);
  return listedChunks(doc, () => reader.readTokens(manifest));
}

/**
 * Loads the first `chunkCount` stored full chunks of `ids` into a fresh sequence (made by `create`),
 * each read from the store (not from the chunk cache) and verified by the reader. A chunk that fails verification (or vanished since it was found) ends
 * the prefix there: it is deleted, so that the writer stores it again, and the chunks before it are
 * loaded again (from the chunk cache) into a new sequence. Returns the sequence, the chunks loaded
 * and the number of damaged chunks found (0 or 1).
 */
export async function loadStoredPrefix(
  ctx: WorkContext,
  store: ObjectStore,
  tenant: string,
  ids: ArrayLike<number>,
  chunkTokens: number,
  chunkCount: number,
  create: () => Sequence,
): Promise<{ seq: Sequence; chunks: number; damaged: number }> {
  const reader = new ArtifactReader({ store, layout: ctx.layout, cache: ctx.cache });
  const objectKeys = fullChunkKeys(ctx.layout.modelId, ids, chunkTokens, chunkCount, ctx.layout.encoder).map((k) => chunkObjectKey(tenant, k));
  // what the ingest adopts is what the store holds now, verified: a copy this process cached earlier
  // would hide an object damaged since, which the ingest must find and write again
  for (const k of objectKeys) ctx.cache.delete(k);
  let count = chunkCount;
  let damaged = 0;
  for (;;) {
    const seq = create();
    if (count === 0) return { seq, chunks: 0, damaged };
    try {
      await reader.loadChunkPrefix(seq, { tenant, tokenIds: ids, chunkTokens, chunkCount: count });
      return { seq, chunks: count, damaged };
    } catch (err) {
      if (!isDamagedChunkError(err)) throw err;
      const bad = objectKeys.indexOf(err.key);
      if (bad < 0 || bad >= count) throw err;
      // the key is its content's hash: whatever is stored under it that does not verify is damage
      await store.delete(err.key);
      ctx.cache.delete(err.key);
      damaged = 1;
      count = bad;
    }
  }
}
