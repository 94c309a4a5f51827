/**
 * @module format/manifest
 * The per-document manifest (format v1): a UTF-8 JSON object, written after every chunk it names,
 * so a reader that sees a manifest sees a complete artifact.
 *
 * ```json
 * {
 *   "formatVersion": 1,
 *   "modelId": "…", "layoutId": "0123456789abcdef",
 *   "encoder": "cuda",                    (only when not the reference encoder: the key space of the chunks)
 *   "tenant": "acme", "documentId": "doc-1",
 *   "tokenCount": 8229, "chunkTokens": 4096,
 *   "chunks": [
 *     { "key": "<64 hex>", "startToken": 0, "endToken": 4096, "sizeBytes": 3663874, "sha256": "<64 hex>" },
 *     …
 *   ],
 *   "createdAt": "2025-01-01T00:00:00.000Z",
 *   "tail": { "key": "<64 hex>", "sizeBytes": 1054812, "replayTokens": 128 }
 * }
 * ```
 *
 * `key` is the chunk's content key (format/chunk-key; its object key comes from format/keys), `sha256`
 * the chunk object's own trailing checksum (SHA-256 of all its bytes but the last 32), so a writer can
 * learn it for a chunk that already exists with a 32-byte ranged read. Chunk i covers
 * [i·C, min((i+1)·C, tokenCount)): contiguous from 0, every chunk full but the last. Unknown fields are
 * ignored (additions within v1 stay readable).
 *
 * `tail` (optional, added within v1) names the document's stored encoder tail for CED questions with
 * replay `replayTokens` (format/tail-codec): a content-keyed object in the tenant's `chunks/` whose key
 * is the SHA-256 of its `sizeBytes` bytes. Readers that do not know it compute the tail themselves.
 */
import { ArtifactCorruptError, UnsupportedVersionError } from '../errors.js';
import { validateModelId } from '../layout.js';
import { validateChunkKey, validateDocumentId, validateTenant } from './keys.js';

export const MANIFEST_FORMAT_VERSION = 1;
export const SUPPORTED_MANIFEST_VERSIONS: readonly number[] = [MANIFEST_FORMAT_VERSION];

export interface ManifestChunk {
  /** Content key (64 hex chars). */
  readonly key: string;
  readonly startToken: number;
  /** Exclusive. */
  readonly endToken: number;
  readonly sizeBytes: number;
  /** Hex of the chunk object's trailing checksum. */
  readonly sha256: string;
}

/** The stored encoder tail a manifest names (format/tail-codec). */
export interface ManifestTail {
  /** SHA-256 of the object's bytes (64 hex); its object key is the chunk key of this content key. */
  readonly key: string;
  readonly sizeBytes: number;
  readonly replayTokens: number;
}

export interface DocumentManifest {
  readonly formatVersion: number;
  readonly modelId: string;
  /** The encoder whose key space the chunk keys are in (ArtifactLayout.encoder); absent: the reference encoder. */
  readonly encoder?: string;
  readonly layoutId: string;
  readonly tenant: string;
  readonly documentId: string;
  readonly tokenCount: number;
  readonly chunkTokens: number;
  readonly chunks: readonly ManifestChunk[];
  /** ISO 8601 UTC time. */
  readonly createdAt: string;
  /** The stored encoder tail, if the ingest stored one. */
  readonly tail?: ManifestTail;
}

/** A manifest field is missing, has the wrong type or an impossible value; `field` is its JSON path. */
export class ManifestFieldError extends ArtifactCorruptError {
  readonly field: string;
  constructor(key: string, field: string, reason: string) {
    super(key, 0, `manifest field ${field}: ${reason}`);
    this.field = field;
  }
}

const HEX64 = /^[0-9a-f]{64}$/;
const ISO_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$/;

type JsonObject = Record<string, unknown>;

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

class FieldReader {
  constructor(private readonly key: string) {}

  fail(field: string, reason: string): never {
    throw new ManifestFieldError(this.key, field, reason);
  }

  int(obj: JsonObject, name: string, path: string, min: number): number {
    const v = obj[name];
    if (v === undefined) this.fail(path, 'is missing');
    if (typeof v !== 'number' || !Number.isSafeInteger(v)) this.fail(path, `must be an integer, got ${JSON.stringify(v)}`);
    if (v < min) this.fail(path, `must be at least ${min}, got ${v}`);
    return v;
  }

  str(obj: JsonObject, name: string, path: string, check?: (s: string) => unknown, rule?: string): string {
    const v = obj[name];
    if (v === undefined) this.fail(path, 'is missing');
    if (typeof v !== 'string') this.fail(path, `must be a string, got ${JSON.stringify(v)}`);
    if (check !== undefined) {
      let ok: boolean;
      try {
        ok = check(v) !== false;
      } catch {
        ok = false;
      }
      if (!ok) this.fail(path, `${JSON.stringify(v)} is not ${rule ?? 'valid'}`);
    }
    return v;
  }
}

/** JSON bytes of a manifest (UTF-8, fields in the documented order, trailing newline). */
export function encodeManifest(manifest: DocumentManifest): Uint8Array {
  const ordered: DocumentManifest = {
    formatVersion: manifest.formatVersion,
    modelId: manifest.modelId,
    ...(manifest.encoder !== undefined && manifest.encoder !== '' ? { encoder: manifest.encoder } : {}),
    layoutId: manifest.layoutId,
    tenant: manifest.tenant,
    documentId: manifest.documentId,
    tokenCount: manifest.tokenCount,
    chunkTokens: manifest.chunkTokens,
    chunks: manifest.chunks.map((c) => ({ key: c.key, startToken: c.startToken, endToken: c.endToken, sizeBytes: c.sizeBytes, sha256: c.sha256 })),
    createdAt: manifest.createdAt,
    ...(manifest.tail !== undefined ? { tail: { key: manifest.tail.key, sizeBytes: manifest.tail.sizeBytes, replayTokens: manifest.tail.replayTokens } } : {}),
  };
  return new TextEncoder().encode(`${JSON.stringify(ordered, null, 1)}\n`);
}

function parseJson(key: string, bytesU8: Uint8Array): unknown {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytesU8);
  } catch {
    throw new ArtifactCorruptError(key, 0, 'manifest is not valid UTF-8');
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    const position = /position (\d+)/.exec(message)?.[1];
    const offset = position === undefined ? 0 : Buffer.byteLength(text.slice(0, Number(position)), 'utf8');
    throw new ArtifactCorruptError(key, offset, `manifest is not valid JSON: ${message}`);
  }
}

function parseChunks(f: FieldReader, value: unknown, tokenCount: number, chunkTokens: number): ManifestChunk[] {
  if (!Array.isArray(value)) f.fail('chunks', value === undefined ? 'is missing' : 'must be an array');
  const expectedCount = Math.ceil(tokenCount / chunkTokens);
  if (value.length !== expectedCount) {
    f.fail('chunks', `has ${value.length} entries; ${tokenCount} tokens in chunks of ${chunkTokens} make ${expectedCount}`);
  }
  return value.map((item: unknown, i): ManifestChunk => {
    const path = `chunks[${i}]`;
    if (!isObject(item)) f.fail(path, 'must be an object');
    const key = f.str(item, 'key', `${path}.key`, validateChunkKey, '64 lowercase hex characters');
    const startToken = f.int(item, 'startToken', `${path}.startToken`, 0);
    const endToken = f.int(item, 'endToken', `${path}.endToken`, 0);
    const sizeBytes = f.int(item, 'sizeBytes', `${path}.sizeBytes`, 1);
    const sha256 = f.str(item, 'sha256', `${path}.sha256`, (s) => HEX64.test(s), '64 lowercase hex characters');
    const wantStart = i * chunkTokens;
    const wantEnd = Math.min(wantStart + chunkTokens, tokenCount);
    if (startToken !== wantStart)
      f.fail(`${path}.startToken`, `must be ${wantStart} (chunks are contiguous from 0 in steps of ${chunkTokens}), got ${startToken}`);
    if (endToken !== wantEnd) f.fail(`${path}.endToken`, `must be ${wantEnd} (chunks of ${chunkTokens}, ${tokenCount} tokens), got ${endToken}`);
    return { key, startToken, endToken, sizeBytes, sha256 };
  });
}

/**
 * Parses and validates a manifest object. Throws UnsupportedVersionError for another formatVersion,
 * ManifestFieldError (an ArtifactCorruptError) naming the field for anything missing, mistyped or
 * inconsistent, ArtifactCorruptError for bytes that are not UTF-8 JSON.
 *
 * @example
 * const manifest = parseManifest(objectKey, await store.get(objectKey));
 */
export function parseManifest(key: string, bytesU8: Uint8Array): DocumentManifest {
  const json = parseJson(key, bytesU8);
  const f: FieldReader = new FieldReader(key);
  if (!isObject(json)) f.fail('(root)', 'must be a JSON object');
  const formatVersion = f.int(json, 'formatVersion', 'formatVersion', 0);
  if (!SUPPORTED_MANIFEST_VERSIONS.includes(formatVersion)) throw new UnsupportedVersionError(key, formatVersion, SUPPORTED_MANIFEST_VERSIONS);
  const modelId = f.str(json, 'modelId', 'modelId', validateModelId, '1..64 printable ASCII characters');
  const encoder =
    json['encoder'] === undefined
      ? ''
      : f.str(json, 'encoder', 'encoder', (s) => s !== '' && /^[a-z0-9][a-z0-9-]{0,15}$/.test(s), "1..16 characters of a-z, 0-9 and '-'");
  const layoutId = f.str(json, 'layoutId', 'layoutId', (s) => /^[\x21-\x7E]{1,64}$/.test(s), '1..64 printable ASCII characters');
  const tenant = f.str(json, 'tenant', 'tenant', validateTenant, 'a tenant id ([A-Za-z0-9_-]{1,64})');
  const documentId = f.str(json, 'documentId', 'documentId', validateDocumentId, 'a document id ([A-Za-z0-9_-]{1,64})');
  const tokenCount = f.int(json, 'tokenCount', 'tokenCount', 0);
  if (tokenCount >= 2 ** 32) f.fail('tokenCount', `must be below 2^32, got ${tokenCount}`);
  const chunkTokens = f.int(json, 'chunkTokens', 'chunkTokens', 1);
  const chunks = parseChunks(f, json['chunks'], tokenCount, chunkTokens);
  const createdAt = f.str(json, 'createdAt', 'createdAt', (s) => ISO_UTC.test(s) && !Number.isNaN(Date.parse(s)), 'an ISO 8601 UTC time');
  const tail = parseTail(f, json['tail'], tokenCount);
  return {
    formatVersion,
    modelId,
    ...(encoder !== '' ? { encoder } : {}),
    layoutId,
    tenant,
    documentId,
    tokenCount,
    chunkTokens,
    chunks,
    createdAt,
    ...(tail !== null ? { tail } : {}),
  };
}

function parseTail(f: FieldReader, value: unknown, tokenCount: number): ManifestTail | null {
  if (value === undefined) return null;
  if (!isObject(value)) f.fail('tail', 'must be an object');
  const key = f.str(value, 'key', 'tail.key', validateChunkKey, '64 lowercase hex characters');
  const sizeBytes = f.int(value, 'sizeBytes', 'tail.sizeBytes', 1);
  const replayTokens = f.int(value, 'replayTokens', 'tail.replayTokens', 1);
  if (replayTokens > tokenCount) f.fail('tail.replayTokens', `must be at most tokenCount ${tokenCount}, got ${replayTokens}`);
  return { key, sizeBytes, replayTokens };
}
