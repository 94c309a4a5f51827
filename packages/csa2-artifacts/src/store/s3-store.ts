/**
 * @module store/s3-store
 * The S3 ObjectStore on @aws-sdk/client-s3: AWS S3 or any S3-compatible endpoint (path-style
 * addressing optional). Key 'a/b' is the S3 object `<prefix>/a/b` in the bucket.
 *
 * - **put** sends one PutObject up to `multipartThresholdBytes`, above it a multipart upload
 *   (@aws-sdk/lib-storage `Upload`, at most `multipartQueueSize` parts in flight). S3 makes both
 *   atomic: readers see the old or the new object.
 * - **get** of an object larger than `readPartSizeBytes` whose size the caller knows (`sizeBytesHint`,
 *   e.g. from a manifest) is fetched as parallel ranged GETs of that part size, at most
 *   `readParallelism` in flight, each streamed straight into its place in one buffer. Every part's
 *   Content-Range must name the hinted total; if the object turns out to have another size, the
 *   parts are dropped and it is read again with one plain GET (a wrong hint costs time, not
 *   correctness). Without a hint, or below the part size, one GET. The parts go into `into` when it
 *   is given and large enough.
 * - **ifAbsent** has two implementations (see {@link ConditionalWriteMode}):
 *   - `'if-none-match'`: PutObject / CompleteMultipartUpload with `If-None-Match: *`. The server
 *     decides, so of concurrent writers exactly one wins (AWS S3 since 2024-08, MinIO, …).
 *   - `'head-then-put'`: HeadObject, then a plain put when absent. **Not race-safe**: writers that
 *     all head before any of them puts all return true, and the last write wins. What still holds:
 *     a put that returns false wrote nothing; the stored object is one whole body of a writer that
 *     returned true. That is enough for content-addressed, idempotent writes (equal keys carry
 *     equal bytes), not for "first writer wins" protocols.
 *
 *   With `conditionalWrites: 'auto'` (the default) the first ifAbsent put probes the server once:
 *   it writes a probe object and writes it again with `If-None-Match: *`. A 412 means the header is
 *   honoured; a success means it is ignored (s3rver ignores it), and the store falls back to
 *   head-then-put rather than let a conditional put silently overwrite.
 * - **errors**: NoSuchKey / 404 → ObjectNotFoundError (head → null); 416 → RangeError; network
 *   errors, timeouts, 5xx, 408/409/429 → StoreUnavailableError (the SDK error as cause, after the
 *   SDK's own `maxAttempts` retries); NoSuchBucket, 400, 403 and other 4xx → StoreConfigError with
 *   the server's code and message; no credentials from the default chain → StoreConfigError. HeadObject answers a missing bucket with a bare 404, so `head`
 *   then returns null: `ping` is the check that the bucket exists.
 * - **lastModifiedMs** is S3's LastModified (whole seconds; the server's clock). **touch** copies the
 *   object onto itself (CopyObject, metadata replaced), which sets it to now without re-sending the
 *   bytes (or, with `touchMode: 'rewrite'`, gets and puts it again: s3rver's copy keeps the old
 *   time). **deleteIfUnmodifiedSince** is HeadObject then DeleteObject, not atomic.
 * - **list** pages with ListObjectsV2 (`listPageSize` per request), `startAfter` as StartAfter.
 * - Objects under the prefix whose names break the key rules (written by something else, or this
 *   store's '~csa2-probe-…' object) are skipped by `list`.
 */
import { randomUUID } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import {
  CopyObjectCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import type { S3ClientConfig } from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { InvalidKeyError, ObjectNotFoundError, StoreConfigError, StoreUnavailableError } from '../errors.js';
import { MAX_KEY_CHARS, checkListOptions, checkRange, isValidKey, keyProblem, validateKey, validatePrefix } from './keys.js';
import type { ByteRange, ConditionalDeleteResult, GetOptions, ListOptions, ObjectInfo, ObjectStore, PutOptions } from './object-store.js';

/** How `put(…, { ifAbsent: true })` is carried out; see the module comment. */
export type ConditionalWriteMode = 'if-none-match' | 'head-then-put';

/** Static S3 credentials; without them the AWS default chain (env, profile, IMDS, …) is used. */
export interface S3Credentials {
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly sessionToken?: string;
}

export interface S3ObjectStoreOptions {
  /** Bucket name (3–63 of [a-z0-9.-], starting and ending with a letter or digit). */
  readonly bucket: string;
  /** Key prefix inside the bucket ('a/b' and 'a/b/' are the same); key k is object '<prefix>/k'. @defaultValue '' */
  readonly prefix?: string;
  /** Endpoint URL of an S3-compatible server, e.g. 'http://127.0.0.1:4568'. @defaultValue AWS S3 */
  readonly endpoint?: string;
  /** @defaultValue env AWS_REGION, else 'us-east-1' */
  readonly region?: string;
  /** Path-style addressing (endpoint/bucket/key); local servers need it. @defaultValue false */
  readonly forcePathStyle?: boolean;
  /** @defaultValue the AWS default credential chain */
  readonly credentials?: S3Credentials;
  /** Bodies larger than this go up as multipart uploads. @defaultValue 16 MiB */
  readonly multipartThresholdBytes?: number;
  /** Part size of multipart uploads (S3's minimum is 5 MiB). @defaultValue 8 MiB */
  readonly multipartPartSizeBytes?: number;
  /** Parts in flight per multipart upload (memory: about queueSize × partSize). @defaultValue 4 */
  readonly multipartQueueSize?: number;
  /** Part size of the ranged GETs of one large object (see `get`). @defaultValue 8 MiB */
  readonly readPartSizeBytes?: number;
  /** Ranged GETs of one object in flight at most. @defaultValue 4 */
  readonly readParallelism?: number;
  /** MaxKeys of each ListObjectsV2 page (1–1000). @defaultValue 1000 */
  readonly listPageSize?: number;
  /**
   * How `touch` sets LastModified to now: 'copy' copies the object onto itself (S3 and MinIO set
   * LastModified to the copy's time; no bytes travel); 'rewrite' downloads and puts it again, for
   * servers whose in-place copy keeps LastModified (s3rver). @defaultValue 'copy'
   */
  readonly touchMode?: 'copy' | 'rewrite';
  /** Attempts per request, the first included (the SDK retries network errors, 5xx, throttling). @defaultValue 3 */
  readonly maxAttempts?: number;
  /** Limit on establishing a connection (0: none). @defaultValue 5000 */
  readonly connectTimeoutMs?: number;
  /** Limit on one HTTP request and its response (one PutObject, one part, one GetObject; 0: none). @defaultValue 60000 */
  readonly requestTimeoutMs?: number;
  /** How ifAbsent puts are made; 'auto' probes the server once. @defaultValue 'auto' */
  readonly conditionalWrites?: 'auto' | ConditionalWriteMode;
}

const MIB = 1024 * 1024;
/** S3's smallest part size (all parts but the last). */
export const MIN_MULTIPART_PART_SIZE_BYTES = 5 * MIB;
const BUCKET_NAME = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
/** Attempts of an If-None-Match put that S3 answers with 409 ConditionalRequestConflict. */
const MAX_CONDITIONAL_CONFLICT_ATTEMPTS = 3;

/** The parts of an SDK (smithy) error this module looks at. */
interface SdkErrorInfo {
  readonly name: string;
  readonly message: string;
  readonly status: number | undefined;
}

function sdkErrorInfo(err: unknown): SdkErrorInfo {
  if (!(err instanceof Error)) return { name: 'Error', message: String(err), status: undefined };
  const metadata: unknown = '$metadata' in err ? err.$metadata : undefined;
  const status =
    typeof metadata === 'object' && metadata !== null && 'httpStatusCode' in metadata && typeof metadata.httpStatusCode === 'number'
      ? metadata.httpStatusCode
      : undefined;
  return { name: err.name, message: err.message, status };
}

function integerOption(name: string, value: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new StoreConfigError(`S3 store option ${name} must be an integer in [${min}, ${max}], got ${value}`);
  }
  return value;
}

/** @throws StoreConfigError unless `bucket` is a valid S3 bucket name. */
export function checkBucketName(bucket: string): void {
  if (!BUCKET_NAME.test(bucket)) {
    throw new StoreConfigError(`invalid S3 bucket name ${JSON.stringify(bucket)} (3-63 characters of [a-z0-9.-], starting and ending with a letter or digit)`);
  }
}

/** Normalizes a store prefix: '' or a valid key (one trailing '/' tolerated). */
export function normalizeS3Prefix(prefix: string): string {
  const trimmed = prefix.endsWith('/') ? prefix.slice(0, -1) : prefix;
  if (trimmed === '') return '';
  const problem = keyProblem(trimmed);
  if (problem !== null) throw new StoreConfigError(`invalid S3 store prefix ${JSON.stringify(prefix)}: ${problem}`);
  return trimmed;
}

/**
 * ObjectStore on an S3 bucket.
 * @example
 * const store = new S3ObjectStore({ bucket: 'csa2', prefix: 'prod', endpoint: 'http://127.0.0.1:4568', forcePathStyle: true });
 * await store.put('chunks/ab12', bytes, { ifAbsent: true });
 */
export class S3ObjectStore implements ObjectStore {
  readonly url: string;
  readonly bucket: string;
  /** The normalized prefix ('' or 'a/b', no trailing '/'). */
  readonly prefix: string;
  /** The SDK client, for operations this interface lacks (and for tests to observe requests). */
  readonly client: S3Client;
  readonly #keyBase: string;
  readonly #multipartThresholdBytes: number;
  readonly #partSizeBytes: number;
  readonly #queueSize: number;
  readonly #readPartSizeBytes: number;
  readonly #readParallelism: number;
  readonly #listPageSize: number;
  readonly #conditionalWrites: 'auto' | ConditionalWriteMode;
  readonly #touchMode: 'copy' | 'rewrite';
  #detectedMode: Promise<ConditionalWriteMode> | undefined;

  /** @throws StoreConfigError naming the bad option. */
  constructor(options: S3ObjectStoreOptions) {
    checkBucketName(options.bucket);
    this.bucket = options.bucket;
    this.prefix = normalizeS3Prefix(options.prefix ?? '');
    this.#keyBase = this.prefix === '' ? '' : `${this.prefix}/`;
    if (options.endpoint !== undefined) checkEndpoint(options.endpoint);
    this.#multipartThresholdBytes = integerOption('multipartThresholdBytes', options.multipartThresholdBytes ?? 16 * MIB, 0);
    this.#partSizeBytes = integerOption('multipartPartSizeBytes', options.multipartPartSizeBytes ?? 8 * MIB, MIN_MULTIPART_PART_SIZE_BYTES);
    this.#queueSize = integerOption('multipartQueueSize', options.multipartQueueSize ?? 4, 1, 64);
    this.#readPartSizeBytes = integerOption('readPartSizeBytes', options.readPartSizeBytes ?? 8 * MIB, 64 * 1024);
    this.#readParallelism = integerOption('readParallelism', options.readParallelism ?? 4, 1, 64);
    this.#listPageSize = integerOption('listPageSize', options.listPageSize ?? 1000, 1, 1000);
    const maxAttempts = integerOption('maxAttempts', options.maxAttempts ?? 3, 1, 20);
    const connectTimeoutMs = integerOption('connectTimeoutMs', options.connectTimeoutMs ?? 5000, 0);
    const requestTimeoutMs = integerOption('requestTimeoutMs', options.requestTimeoutMs ?? 60_000, 0);
    this.#conditionalWrites = options.conditionalWrites ?? 'auto';
    this.#touchMode = options.touchMode ?? 'copy';
    if (this.#touchMode !== 'copy' && this.#touchMode !== 'rewrite')
      throw new StoreConfigError(`S3 store option touchMode must be copy or rewrite, got ${String(this.#touchMode)}`);
    const envRegion = process.env['AWS_REGION'];
    const region = options.region ?? (envRegion !== undefined && envRegion !== '' ? envRegion : 'us-east-1');
    const forcePathStyle = options.forcePathStyle ?? false;

    const config: S3ClientConfig = {
      region,
      forcePathStyle,
      maxAttempts,
      requestHandler: { connectionTimeout: connectTimeoutMs, requestTimeout: requestTimeoutMs, throwOnRequestTimeout: true },
      ...(options.endpoint !== undefined ? { endpoint: options.endpoint } : {}),
      ...(options.credentials !== undefined ? { credentials: { ...options.credentials } } : {}),
    };
    this.client = new S3Client(config);

    // The URL store/store-url parses back into these options; ':' and '/' stay readable.
    const query: string[] = [];
    if (options.endpoint !== undefined) query.push(`endpoint=${encodeQueryValue(options.endpoint)}`);
    if (forcePathStyle) query.push('forcePathStyle=1');
    if (options.region !== undefined) query.push(`region=${encodeQueryValue(options.region)}`);
    if (options.readPartSizeBytes !== undefined) query.push(`readPartSizeBytes=${this.#readPartSizeBytes}`);
    if (options.readParallelism !== undefined) query.push(`readParallelism=${this.#readParallelism}`);
    if (options.touchMode !== undefined) query.push(`touchMode=${this.#touchMode}`);
    this.url = `s3://${this.bucket}/${this.prefix}${query.length === 0 ? '' : `?${query.join('&')}`}`;
  }

  async put(key: string, body: Uint8Array, options: PutOptions = {}): Promise<boolean> {
    const objectKey = this.#objectKey(key);
    try {
      if (options.ifAbsent !== true) {
        await this.#upload(objectKey, body, false);
        return true;
      }
      if ((await this.conditionalWriteMode()) === 'head-then-put') {
        if ((await this.head(key)) !== null) return false;
        await this.#upload(objectKey, body, false);
        return true;
      }
      for (let attempt = 1; ; attempt++) {
        try {
          await this.#upload(objectKey, body, true);
          return true;
        } catch (err) {
          const { status } = sdkErrorInfo(err);
          if (status === 412) return false;
          // S3: a concurrent conditional write to the key was in progress; retrying settles it.
          if (status === 409 && attempt < MAX_CONDITIONAL_CONFLICT_ATTEMPTS) continue;
          throw err;
        }
      }
    } catch (err) {
      throw this.#mapError(err, 'put', key);
    }
  }

  async get(key: string, options: GetOptions = {}): Promise<Uint8Array> {
    const objectKey = this.#objectKey(key);
    const hint = options.sizeBytesHint;
    try {
      if (hint !== undefined && Number.isSafeInteger(hint) && hint > this.#readPartSizeBytes) {
        const parts = await this.#getInParts(objectKey, hint, options.into);
        if (parts !== null) return parts;
      }
      const response = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: objectKey }));
      const length = response.ContentLength;
      if (options.into !== undefined && length !== undefined && options.into.byteLength >= length) {
        if (!(await readBodyInto(response.Body, options.into, 0, length))) {
          throw new StoreUnavailableError(`S3 store ${this.url}: get ${key}: the response body is not the ${length} bytes its Content-Length says`);
        }
        return options.into.subarray(0, length);
      }
      return (await response.Body?.transformToByteArray()) ?? new Uint8Array(0);
    } catch (err) {
      throw this.#mapError(err, 'get', key);
    }
  }

  /** Parts in flight: at most readParallelism ranged GETs, each streamed into `out`; null when the object is not `sizeBytes` long. */
  async #getInParts(objectKey: string, sizeBytes: number, into: Uint8Array | undefined): Promise<Uint8Array | null> {
    // every byte is written by exactly one part, so a new buffer is not zeroed
    const out = into !== undefined && into.byteLength >= sizeBytes ? into.subarray(0, sizeBytes) : newUninitialized(sizeBytes);
    const partSize = this.#readPartSizeBytes;
    const partCount = Math.ceil(sizeBytes / partSize);
    let next = 0;
    let sizeMismatch = false;
    const abort = new AbortController();
    const worker = async (): Promise<void> => {
      while (!sizeMismatch && next < partCount) {
        const part = next++;
        const first = part * partSize;
        const last = Math.min(sizeBytes, first + partSize) - 1;
        const response = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: objectKey, Range: `bytes=${first}-${last}` }), {
          abortSignal: abort.signal,
        });
        const match = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(response.ContentRange ?? '');
        if (match === null || Number(match[1]) !== first || Number(match[2]) !== last || Number(match[3]) !== sizeBytes) {
          discardBody(response.Body);
          sizeMismatch = true;
          return;
        }
        if (!(await readBodyInto(response.Body, out, first, last + 1))) {
          sizeMismatch = true;
          return;
        }
      }
    };
    try {
      await Promise.all(Array.from({ length: Math.min(this.#readParallelism, partCount) }, worker));
    } catch (err) {
      abort.abort(); // stop the other parts' requests
      throw err;
    }
    return sizeMismatch ? null : out;
  }

  async getRange(key: string, range: ByteRange): Promise<Uint8Array> {
    const objectKey = this.#objectKey(key);
    checkRange(range);
    const endOffset = range.offset + range.length;
    if (range.length === 0) {
      // 'bytes=a-b' cannot name an empty range: check the bounds against the size instead.
      const info = await this.head(key);
      if (info === null) throw new ObjectNotFoundError(key);
      if (range.offset > info.sizeBytes) throw pastEnd(key, range, info.sizeBytes);
      return new Uint8Array(0);
    }
    try {
      const response = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: objectKey, Range: `bytes=${range.offset}-${endOffset - 1}` }));
      // Judge the range by Content-Range before reading the body: S3 trims a range that runs past
      // the end, and some servers announce bytes they never send (s3rver on an empty object).
      // Without Content-Range the server ignored Range and sends the whole object.
      const { ContentRange: contentRange } = response;
      const match = contentRange === undefined ? null : /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(contentRange);
      if (contentRange !== undefined && match === null) {
        discardBody(response.Body);
        throw new StoreUnavailableError(`S3 store ${this.url}: get ${key}: unparseable Content-Range ${JSON.stringify(contentRange)}`);
      }
      const startOffset = match === null ? 0 : Number(match[1]);
      const totalBytes = match === null || match[3] === '*' ? undefined : Number(match[3]);
      if (startOffset > range.offset) {
        discardBody(response.Body);
        throw new StoreUnavailableError(
          `S3 store ${this.url}: get ${key}: asked for bytes from ${range.offset}, got Content-Range ${JSON.stringify(contentRange)}`,
        );
      }
      if (totalBytes !== undefined && endOffset > totalBytes) {
        discardBody(response.Body);
        throw pastEnd(key, range, totalBytes);
      }
      const bytes = (await response.Body?.transformToByteArray()) ?? new Uint8Array(0);
      // A server may also send more than asked (s3rver reads 'bytes=0-0' as 'bytes=0-').
      const skipBytes = range.offset - startOffset;
      if (skipBytes + range.length > bytes.byteLength) throw pastEnd(key, range, totalBytes ?? (match === null ? bytes.byteLength : undefined));
      return bytes.subarray(skipBytes, skipBytes + range.length);
    } catch (err) {
      const mapped = this.#mapError(err, 'get', key);
      throw mapped instanceof RangeError ? pastEnd(key, range, undefined, mapped) : mapped;
    }
  }

  async head(key: string): Promise<ObjectInfo | null> {
    const objectKey = this.#objectKey(key);
    try {
      const response = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: objectKey }));
      return { key, sizeBytes: response.ContentLength ?? 0, lastModifiedMs: response.LastModified?.getTime() ?? 0 };
    } catch (err) {
      const mapped = this.#mapError(err, 'head', key);
      if (mapped instanceof ObjectNotFoundError) return null;
      throw mapped;
    }
  }

  async list(prefix: string, options: ListOptions = {}): Promise<ObjectInfo[]> {
    validatePrefix(prefix);
    const limit = checkListOptions(options);
    const found: ObjectInfo[] = [];
    let continuationToken: string | undefined;
    const startAfter = options.startAfter !== undefined && options.startAfter !== '' ? `${this.#keyBase}${options.startAfter}` : undefined;
    try {
      while (found.length < limit) {
        // Whole pages even when fewer keys are wanted: a server that pages in another order than
        // byte order (s3rver) then still gives the right first keys of a listing up to one page.
        const response = await this.client.send(
          new ListObjectsV2Command({
            Bucket: this.bucket,
            Prefix: `${this.#keyBase}${prefix}`,
            MaxKeys: this.#listPageSize,
            ...(continuationToken !== undefined ? { ContinuationToken: continuationToken } : startAfter !== undefined ? { StartAfter: startAfter } : {}),
          }),
        );
        for (const object of response.Contents ?? []) {
          const key = object.Key?.slice(this.#keyBase.length);
          if (key === undefined || !isValidKey(key)) continue;
          if (options.startAfter !== undefined && key <= options.startAfter) continue; // servers that ignore StartAfter
          found.push({ key, sizeBytes: object.Size ?? 0, lastModifiedMs: object.LastModified?.getTime() ?? 0 });
        }
        continuationToken = response.IsTruncated === true ? response.NextContinuationToken : undefined;
        if (continuationToken === undefined) break;
      }
    } catch (err) {
      throw this.#mapError(err, 'list', undefined);
    }
    found.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    return limit < found.length ? found.slice(0, limit) : found;
  }

  async delete(key: string): Promise<void> {
    const objectKey = this.#objectKey(key);
    try {
      await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: objectKey }));
    } catch (err) {
      const mapped = this.#mapError(err, 'delete', key);
      if (mapped instanceof ObjectNotFoundError) return;
      throw mapped;
    }
  }

  /**
   * CopyObject of the object onto itself with replaced metadata (S3's way to set LastModified to now
   * without sending the bytes again; a server-side copy, objects up to 5 GB), then HeadObject.
   */
  async touch(key: string): Promise<ObjectInfo | null> {
    const objectKey = this.#objectKey(key);
    if (this.#touchMode === 'rewrite') {
      let bytes: Uint8Array;
      try {
        bytes = await this.get(key);
      } catch (err) {
        if (err instanceof ObjectNotFoundError) return null;
        throw err;
      }
      await this.put(key, bytes); // the same bytes: readers see the old or the new object, both equal
      // The size is the bytes' (s3rver answers a put of a small body before the file is written, so a
      // HEAD right after it may see a short object); the time is the server's.
      const info = await this.head(key);
      return { key, sizeBytes: bytes.byteLength, lastModifiedMs: info?.lastModifiedMs ?? Date.now() };
    }
    try {
      await this.client.send(
        new CopyObjectCommand({
          Bucket: this.bucket,
          Key: objectKey,
          // the key alphabet ([A-Za-z0-9._=/-]) needs no URL-encoding in a path
          CopySource: `${this.bucket}/${objectKey}`,
          MetadataDirective: 'REPLACE',
          Metadata: { 'csa2-touched-ms': String(Date.now()) },
        }),
      );
    } catch (err) {
      const mapped = this.#mapError(err, 'touch', key);
      if (mapped instanceof ObjectNotFoundError) return null;
      throw mapped;
    }
    return this.head(key);
  }

  /** HeadObject, then DeleteObject when LastModified is before `sinceMs`: not atomic (see ObjectStore). */
  async deleteIfUnmodifiedSince(key: string, sinceMs: number): Promise<ConditionalDeleteResult> {
    const info = await this.head(key);
    if (info === null) return { outcome: 'absent', sizeBytes: 0 };
    if (info.lastModifiedMs >= sinceMs) return { outcome: 'modified', sizeBytes: info.sizeBytes };
    await this.delete(key);
    return { outcome: 'deleted', sizeBytes: info.sizeBytes };
  }

  /** HeadBucket: the endpoint answers, the credentials work and the bucket exists. */
  async ping(): Promise<void> {
    try {
      await this.client.send(new HeadBucketCommand({ Bucket: this.bucket }));
    } catch (err) {
      if (sdkErrorInfo(err).status === 404) throw this.#bucketMissing('ping');
      throw this.#mapError(err, 'ping', undefined);
    }
  }

  async close(): Promise<void> {
    this.client.destroy();
  }

  /**
   * How this store makes ifAbsent puts: the configured mode, or with 'auto' the result of a
   * one-time probe of the server (see the module comment). A failed probe is retried next call.
   */
  conditionalWriteMode(): Promise<ConditionalWriteMode> {
    if (this.#conditionalWrites !== 'auto') return Promise.resolve(this.#conditionalWrites);
    if (this.#detectedMode === undefined) {
      const detection = this.#probeConditionalWrites();
      this.#detectedMode = detection;
      detection.catch(() => {
        if (this.#detectedMode === detection) this.#detectedMode = undefined;
      });
    }
    return this.#detectedMode;
  }

  async #probeConditionalWrites(): Promise<ConditionalWriteMode> {
    // '~' is outside the key alphabet: the probe can never be a real key and list skips it.
    const probeKey = `${this.#keyBase}~csa2-probe-${randomUUID()}`;
    const empty = new Uint8Array(0);
    try {
      await this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: probeKey, Body: empty }));
      try {
        await this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: probeKey, Body: empty, IfNoneMatch: '*' }));
        return 'head-then-put'; // the header was ignored: the second write succeeded over the first
      } catch (err) {
        const { status } = sdkErrorInfo(err);
        if (status === 412) return 'if-none-match';
        if (status === 501 || status === 400) return 'head-then-put'; // refused as unsupported
        throw err;
      }
    } catch (err) {
      throw this.#mapError(err, 'probe of If-None-Match support', undefined);
    } finally {
      await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: probeKey })).catch(() => undefined);
    }
  }

  async #upload(objectKey: string, body: Uint8Array, ifNoneMatch: boolean): Promise<void> {
    const condition = ifNoneMatch ? { IfNoneMatch: '*' } : {};
    if (body.byteLength <= this.#multipartThresholdBytes) {
      await this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: objectKey, Body: body, ContentLength: body.byteLength, ...condition }));
      return;
    }
    // lib-storage passes the params (the condition included) to CompleteMultipartUpload too.
    const upload = new Upload({
      client: this.client,
      params: { Bucket: this.bucket, Key: objectKey, Body: body, ...condition },
      partSize: this.#partSizeBytes,
      queueSize: this.#queueSize,
      leavePartsOnError: false,
    });
    await upload.done();
  }

  #objectKey(key: string): string {
    validateKey(key);
    if (this.#keyBase.length + key.length > MAX_KEY_CHARS) {
      throw new InvalidKeyError(key, `longer than ${MAX_KEY_CHARS} characters with the store prefix ${JSON.stringify(this.prefix)}`);
    }
    return `${this.#keyBase}${key}`;
  }

  #bucketMissing(operation: string): StoreConfigError {
    return new StoreConfigError(`S3 store ${this.url}: ${operation}: bucket ${JSON.stringify(this.bucket)} does not exist`);
  }

  /** Maps an SDK error to the store's errors (see the module comment); passes the store's own through. */
  #mapError(err: unknown, operation: string, key: string | undefined): Error {
    if (
      err instanceof ObjectNotFoundError ||
      err instanceof StoreConfigError ||
      err instanceof StoreUnavailableError ||
      err instanceof InvalidKeyError ||
      err instanceof RangeError
    ) {
      return err;
    }
    const { name, status } = sdkErrorInfo(err);
    let { message } = sdkErrorInfo(err);
    // Responses without a body (HEAD) leave the SDK only the status: say what the status means.
    if (message === 'UnknownError' && status !== undefined) message = `${STATUS_CODES[status] ?? 'error'} (the response carried no error detail)`;
    const what = `S3 store ${this.url}: ${operation}${key === undefined ? '' : ` ${key}`}`;
    if (name === 'NoSuchBucket') return this.#bucketMissing(operation);
    // The default chain found no credentials (no env, profile, web identity or instance role).
    if (name === 'CredentialsProviderError') return new StoreConfigError(`${what}: no AWS credentials: ${message}`);
    if (key !== undefined && (name === 'NoSuchKey' || status === 404)) return new ObjectNotFoundError(key);
    if (status === 416 || name === 'InvalidRange') return new RangeError(`${what}: ${message}`);
    if (status === undefined || status >= 500 || status === 408 || status === 409 || status === 429) {
      return new StoreUnavailableError(`${what}: ${status === undefined ? '' : `${status} `}${name}: ${message}`, { cause: err });
    }
    return new StoreConfigError(`${what}: ${status} ${name}: ${message}`);
  }
}

function encodeQueryValue(value: string): string {
  return encodeURIComponent(value).replace(/%3A/gi, ':').replace(/%2F/gi, '/');
}

function pastEnd(key: string, range: ByteRange, sizeBytes: number | undefined, known?: RangeError): RangeError {
  if (known?.message.startsWith('range [') === true) return known; // already ours
  const size = sizeBytes === undefined ? '' : ` (${sizeBytes} bytes)`;
  return new RangeError(`range [${range.offset}, ${range.offset + range.length}) is past the end of ${key}${size}`);
}

function newUninitialized(sizeBytes: number): Uint8Array {
  const buffer = Buffer.allocUnsafeSlow(sizeBytes);
  return new Uint8Array(buffer.buffer, buffer.byteOffset, sizeBytes);
}

/**
 * Copies a response body (a Node stream, or anything with transformToByteArray) into out[start, end).
 * False when it holds another number of bytes.
 */
async function readBodyInto(body: unknown, out: Uint8Array, start: number, end: number): Promise<boolean> {
  let at = start;
  if (typeof body === 'object' && body !== null && Symbol.asyncIterator in body) {
    for await (const piece of body as AsyncIterable<Uint8Array>) {
      if (at + piece.byteLength > end) {
        discardBody(body);
        return false;
      }
      out.set(piece, at);
      at += piece.byteLength;
    }
    return at === end;
  }
  if (typeof body === 'object' && body !== null && 'transformToByteArray' in body && typeof body.transformToByteArray === 'function') {
    const bytes = (await (body.transformToByteArray as () => Promise<Uint8Array>)()) ?? new Uint8Array(0);
    if (bytes.byteLength !== end - start) return false;
    out.set(bytes, start);
    return true;
  }
  return start === end;
}

/** Drops a response body we will not read, so its socket is not left waiting. */
function discardBody(body: unknown): void {
  if (typeof body === 'object' && body !== null && 'destroy' in body && typeof body.destroy === 'function') body.destroy();
}

/** Checks an endpoint is an absolute http(s) URL with nothing after the host but an optional '/'. */
export function checkEndpoint(endpoint: string): void {
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    throw new StoreConfigError(`invalid S3 endpoint ${JSON.stringify(endpoint)}: not a URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new StoreConfigError(`invalid S3 endpoint ${JSON.stringify(endpoint)}: scheme must be http or https, got ${url.protocol}`);
  }
  if (url.username !== '' || url.password !== '') {
    throw new StoreConfigError(`invalid S3 endpoint ${JSON.stringify(endpoint)}: credentials do not belong in the URL`);
  }
  if (url.search !== '' || url.hash !== '') {
    throw new StoreConfigError(`invalid S3 endpoint ${JSON.stringify(endpoint)}: no query or fragment allowed`);
  }
}
