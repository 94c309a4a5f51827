/**
 * @module format/keys
 * The one place that decides object keys of cache artifacts. Everything is tenant-scoped, so
 * content-addressed chunks are shared between documents of one tenant, never across tenants:
 *
 * | object          | key                                                  |
 * |-----------------|------------------------------------------------------|
 * | chunk           | `tenants/<tenant>/chunks/<aa>/<chunkKey>`            |
 * | manifest        | `tenants/<tenant>/documents/<documentId>/manifest.json` |
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
