/**
 * @module format/keys
 * The one place that decides object keys of cache artifacts. Everything is tenant-scoped, so
 * content-addressed chunks are shared between documents of one tenant, never across tenants:
 *
 * | object          | key                                                  |
 * |-----------------|------------------------------------------------------|
 * | chunk           | `tenants/<tenant>/chunks/<aa>/<chunkKey>`            |
 * | manifest        | `tenants/<tenant>/documents/<documentId>/manifest.json` |
 * | ingest marker   | `tenants/<tenant>/ingests/<documentId>.<startedAtMs>.<nonce>` (see ingest-marker) |
 * | job input       | `tenants/<tenant>/inputs/<name>.u32` (a job's token list, token-lists.ts) |
 *
 * `<chunkKey>` is 64 lowercase hex chars (format/chunk-key) and `<aa>` its first two, which spreads
 * chunks over 256 directories (filesystem store) or key ranges (S3). Tenant and document ids match
 * `[A-Za-z0-9_-]{1,64}`; anything else is refused with an InvalidKeyError.
 */
import { InvalidKeyError } from '../errors.js';

const ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
const CHUNK_KEY_PATTERN = /^[0-9a-f]{64}$/;

/** Refuses a tenant id outside `[A-Za-z0-9_-]{1,64}`. */
export function validateTenant(tenant: string): string {
  if (typeof tenant !== 'string' || !ID_PATTERN.test(tenant)) {
    throw new InvalidKeyError(String(tenant), 'a tenant id must match [A-Za-z0-9_-]{1,64}');
  }
  return tenant;
}

/** Refuses a document id outside `[A-Za-z0-9_-]{1,64}`. */
export function validateDocumentId(documentId: string): string {
  if (typeof documentId !== 'string' || !ID_PATTERN.test(documentId)) {
    throw new InvalidKeyError(String(documentId), 'a document id must match [A-Za-z0-9_-]{1,64}');
  }
  return documentId;
}

/** Refuses anything but 64 lowercase hex chars. */
export function validateChunkKey(chunkKey: string): string {
  if (typeof chunkKey !== 'string' || !CHUNK_KEY_PATTERN.test(chunkKey)) {
    throw new InvalidKeyError(String(chunkKey), 'a chunk key is 64 lowercase hex characters (SHA-256)');
  }
  return chunkKey;
}

/** Prefix of every object of one tenant. */
export function tenantPrefix(tenant: string): string {
  return `tenants/${validateTenant(tenant)}/`;
}

/**
 * Object key of a chunk.
 *
 * @example
 * chunkObjectKey('acme', 'ab12…'); // 'tenants/acme/chunks/ab/ab12…'
 */
export function chunkObjectKey(tenant: string, chunkKey: string): string {
  validateChunkKey(chunkKey);
  return `${tenantPrefix(tenant)}chunks/${chunkKey.slice(0, 2)}/${chunkKey}`;
}

const INPUT_NAME_PATTERN = /^[A-Za-z0-9_.-]{1,160}$/;

/**
 * Object key of a job's input token list (token-lists.ts): `name` is the job id
 * ([A-Za-z0-9_.-]{1,160}).
 *
 * @example
 * inputObjectKey('acme', 'doc.acme.doc-1'); // 'tenants/acme/inputs/doc.acme.doc-1.u32'
 */
export function inputObjectKey(tenant: string, name: string): string {
  if (typeof name !== 'string' || !INPUT_NAME_PATTERN.test(name) || name.startsWith('.')) {
    throw new InvalidKeyError(String(name), 'an input name must match [A-Za-z0-9_.-]{1,160} and not start with "."');
  }
  return `${tenantPrefix(tenant)}inputs/${name}.u32`;
}

/** Prefix of every object of one document (today only its manifest). */
export function documentPrefix(tenant: string, documentId: string): string {
  return `${tenantPrefix(tenant)}documents/${validateDocumentId(documentId)}/`;
}

/**
 * Object key of a document's manifest.
 *
 * @example
 * manifestObjectKey('acme', 'doc-1'); // 'tenants/acme/documents/doc-1/manifest.json'
 */
export function manifestObjectKey(tenant: string, documentId: string): string {
  return `${documentPrefix(tenant, documentId)}manifest.json`;
}

/** Prefix of every chunk object of one tenant. */
export function chunksPrefix(tenant: string): string {
  return `${tenantPrefix(tenant)}chunks/`;
}

/** Prefix of every document (manifest) of one tenant. */
export function documentsPrefix(tenant: string): string {
  return `${tenantPrefix(tenant)}documents/`;
}

/** Prefix of the ingest markers of one tenant (ingest-marker). */
export function ingestMarkersPrefix(tenant: string): string {
  return `${tenantPrefix(tenant)}ingests/`;
}

const NONCE_PATTERN = /^[0-9a-f]{16}$/;

/**
 * Object key of an ingest marker: the document, when the ingest started (ms since the epoch) and a
 * random 16-hex-char nonce (two ingests of one document have two markers).
 */
export function ingestMarkerKey(tenant: string, documentId: string, startedAtMs: number, nonce: string): string {
  if (!Number.isSafeInteger(startedAtMs) || startedAtMs < 0)
    throw new InvalidKeyError(String(startedAtMs), 'an ingest start time is a non-negative integer (ms)');
  if (!NONCE_PATTERN.test(nonce)) throw new InvalidKeyError(nonce, 'an ingest marker nonce is 16 lowercase hex characters');
  return `${ingestMarkersPrefix(tenant)}${validateDocumentId(documentId)}.${startedAtMs}.${nonce}`;
}

/** The parts of an ingest marker key, or null for any other key. */
export function parseIngestMarkerKey(key: string): { tenant: string; documentId: string; startedAtMs: number } | null {
  const m = /^tenants\/([A-Za-z0-9_-]{1,64})\/ingests\/([A-Za-z0-9_-]{1,64})\.([0-9]{1,16})\.([0-9a-f]{16})$/.exec(key);
  if (m === null) return null;
  return { tenant: m[1] as string, documentId: m[2] as string, startedAtMs: Number(m[3]) };
}

/** The tenant and content key of a chunk object key, or null for any other key (the fan-out directory must match). */
export function parseChunkObjectKey(key: string): { tenant: string; chunkKey: string } | null {
  const m = /^tenants\/([A-Za-z0-9_-]{1,64})\/chunks\/([0-9a-f]{2})\/([0-9a-f]{64})$/.exec(key);
  if (m === null || !(m[3] as string).startsWith(m[2] as string)) return null;
  return { tenant: m[1] as string, chunkKey: m[3] as string };
}

/** The tenant and document id of a manifest object key, or null for any other key. */
export function parseManifestObjectKey(key: string): { tenant: string; documentId: string } | null {
  const m = /^tenants\/([A-Za-z0-9_-]{1,64})\/documents\/([A-Za-z0-9_-]{1,64})\/manifest\.json$/.exec(key);
  return m === null ? null : { tenant: m[1] as string, documentId: m[2] as string };
}

/** The tenant a key belongs to (`tenants/<tenant>/…`), or null. */
export function tenantOfKey(key: string): string | null {
  const m = /^tenants\/([A-Za-z0-9_-]{1,64})\//.exec(key);
  return m === null ? null : (m[1] as string);
}
