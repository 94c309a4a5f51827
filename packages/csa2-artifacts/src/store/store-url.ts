/**
 * @module store/store-url
 * Store URLs: one string names a store in config and env vars.
 *
 * - `file:///abs/path` or a plain absolute path `/abs/path`: FsObjectStore rooted there.
 * - `s3://bucket/prefix?endpoint=http://host:port&forcePathStyle=1&region=r`: S3ObjectStore on
 *   `bucket` under key prefix `prefix` (may be empty: `s3://bucket` or `s3://bucket/`). Every
 *   query parameter is optional; `forcePathStyle` takes 1/0/true/false; `readPartSizeBytes` and
 *   `readParallelism` (positive integers) tune the parallel ranged GETs of large objects
 *   (store/s3-store `get`); `touchMode=copy|rewrite` says how `touch` refreshes LastModified
 *   (`rewrite` for servers such as s3rver whose in-place copy keeps it). Credentials never go in the URL: they come from the AWS default chain
 *   (or `overrides.s3.credentials`).
 *
 * Anything else fails with a StoreConfigError naming the part that is wrong. Each store's `url`
 * parses back to the config it was made from.
 */
import { isAbsolute, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { StoreConfigError } from '../errors.js';
import { FsObjectStore } from './fs-store.js';
import type { FsObjectStoreOptions } from './fs-store.js';
import type { ObjectStore } from './object-store.js';
import { S3ObjectStore, checkBucketName, checkEndpoint, normalizeS3Prefix } from './s3-store.js';
import type { S3ObjectStoreOptions } from './s3-store.js';

export interface FsStoreConfig {
  readonly kind: 'fs';
  /** Absolute, normalized root directory. */
  readonly root: string;
}

export interface S3StoreConfig {
  readonly kind: 's3';
  readonly bucket: string;
  /** '' or a key-like path without a trailing '/'. */
  readonly prefix: string;
  readonly endpoint?: string;
  readonly region?: string;
  readonly forcePathStyle?: boolean;
  readonly readPartSizeBytes?: number;
  readonly readParallelism?: number;
  readonly touchMode?: 'copy' | 'rewrite';
}

/** A parsed store URL. */
export type StoreConfig = FsStoreConfig | S3StoreConfig;

/** Options a URL cannot carry (credentials, tuning), by backend. */
export interface StoreOverrides {
  readonly fs?: FsObjectStoreOptions;
  readonly s3?: Omit<S3ObjectStoreOptions, 'bucket' | 'prefix' | 'endpoint' | 'region' | 'forcePathStyle'>;
}

const S3_PARAMETERS = new Set(['endpoint', 'forcePathStyle', 'region', 'readPartSizeBytes', 'readParallelism', 'touchMode']);
const REGION = /^[a-z0-9][a-z0-9-]*$/;
const SCHEME = /^([A-Za-z][A-Za-z0-9+.-]*):/;

/**
 * Parses a store URL (see the module comment).
 * @throws StoreConfigError naming the bad part.
 * @example parseStoreUrl('s3://csa2/prod?endpoint=http://127.0.0.1:4568&forcePathStyle=1')
 *   // { kind: 's3', bucket: 'csa2', prefix: 'prod', endpoint: 'http://127.0.0.1:4568', forcePathStyle: true }
 */
export function parseStoreUrl(url: string): StoreConfig {
  if (url.startsWith('/')) return { kind: 'fs', root: resolve(url) };
  const scheme = SCHEME.exec(url)?.[1]?.toLowerCase();
  if (scheme === undefined) {
    throw new StoreConfigError(
      `store URL ${JSON.stringify(url)} has no scheme and is not an absolute path (use file:///abs/path, /abs/path or s3://bucket/prefix)`,
    );
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new StoreConfigError(`store URL ${JSON.stringify(url)} is not a valid URL`);
  }
  if (parsed.hash !== '') throw new StoreConfigError(`store URL ${JSON.stringify(url)}: unexpected fragment ${JSON.stringify(parsed.hash)}`);
  switch (scheme) {
    case 'file':
      return parseFileUrl(url, parsed);
    case 's3':
      return parseS3Url(url, parsed);
    default:
      throw new StoreConfigError(`store URL ${JSON.stringify(url)}: unknown scheme "${scheme}:" (use file: or s3:)`);
  }
}

function parseFileUrl(url: string, parsed: URL): FsStoreConfig {
  if (parsed.host !== '' && parsed.host !== 'localhost') {
    throw new StoreConfigError(`store URL ${JSON.stringify(url)}: file URLs must be local (file:///abs/path), got host ${JSON.stringify(parsed.host)}`);
  }
  for (const name of parsed.searchParams.keys()) {
    throw new StoreConfigError(`store URL ${JSON.stringify(url)}: unknown query parameter ${JSON.stringify(name)} (file URLs take none)`);
  }
  if (parsed.search !== '') throw new StoreConfigError(`store URL ${JSON.stringify(url)}: unexpected query ${JSON.stringify(parsed.search)}`);
  let root: string;
  try {
    root = fileURLToPath(parsed);
  } catch (err) {
    throw new StoreConfigError(`store URL ${JSON.stringify(url)}: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (!isAbsolute(root)) throw new StoreConfigError(`store URL ${JSON.stringify(url)}: path must be absolute`);
  return { kind: 'fs', root: resolve(root) };
}

function parseS3Url(url: string, parsed: URL): S3StoreConfig {
  if (parsed.host === '') throw new StoreConfigError(`store URL ${JSON.stringify(url)}: missing bucket (use s3://bucket/prefix)`);
  if (parsed.port !== '') throw new StoreConfigError(`store URL ${JSON.stringify(url)}: a bucket has no port; give the server as ?endpoint=http://host:port`);
  if (parsed.username !== '' || parsed.password !== '') {
    throw new StoreConfigError(`store URL ${JSON.stringify(url)}: credentials do not belong in the URL (use the AWS credential chain)`);
  }
  const bucket = parsed.hostname;
  wrap(url, () => checkBucketName(bucket));
  const prefix = wrap(url, () => normalizeS3Prefix(parsed.pathname.replace(/^\//, '')));

  const seen = new Set<string>();
  let endpoint: string | undefined;
  let region: string | undefined;
  let forcePathStyle: boolean | undefined;
  let readPartSizeBytes: number | undefined;
  let readParallelism: number | undefined;
  let touchMode: 'copy' | 'rewrite' | undefined;
  for (const [name, value] of parsed.searchParams) {
    if (!S3_PARAMETERS.has(name)) {
      throw new StoreConfigError(`store URL ${JSON.stringify(url)}: unknown query parameter ${JSON.stringify(name)} (known: ${[...S3_PARAMETERS].join(', ')})`);
    }
    if (seen.has(name)) throw new StoreConfigError(`store URL ${JSON.stringify(url)}: query parameter ${JSON.stringify(name)} given twice`);
    seen.add(name);
    switch (name) {
      case 'endpoint':
        wrap(url, () => checkEndpoint(value));
        endpoint = value;
        break;
      case 'region':
        if (!REGION.test(value)) throw new StoreConfigError(`store URL ${JSON.stringify(url)}: invalid region ${JSON.stringify(value)}`);
        region = value;
        break;
      case 'forcePathStyle':
        forcePathStyle = parseFlag(url, name, value);
        break;
      case 'readPartSizeBytes':
        readPartSizeBytes = parsePositiveInt(url, name, value);
        break;
      case 'readParallelism':
        readParallelism = parsePositiveInt(url, name, value);
        break;
      case 'touchMode':
        if (value !== 'copy' && value !== 'rewrite')
          throw new StoreConfigError(`store URL ${JSON.stringify(url)}: touchMode must be copy or rewrite, got ${JSON.stringify(value)}`);
        touchMode = value;
        break;
    }
  }
  return {
    kind: 's3',
    bucket,
    prefix,
    ...(endpoint !== undefined ? { endpoint } : {}),
    ...(region !== undefined ? { region } : {}),
    ...(forcePathStyle !== undefined ? { forcePathStyle } : {}),
    ...(readPartSizeBytes !== undefined ? { readPartSizeBytes } : {}),
    ...(readParallelism !== undefined ? { readParallelism } : {}),
    ...(touchMode !== undefined ? { touchMode } : {}),
  };
}

function parsePositiveInt(url: string, name: string, value: string): number {
  const n = Number(value);
  if (!/^[0-9]+$/.test(value) || !Number.isSafeInteger(n) || n < 1) {
    throw new StoreConfigError(`store URL ${JSON.stringify(url)}: ${name} must be a positive integer, got ${JSON.stringify(value)}`);
  }
  return n;
}

function parseFlag(url: string, name: string, value: string): boolean {
  switch (value) {
    case '1':
    case 'true':
      return true;
    case '0':
    case 'false':
      return false;
    default:
      throw new StoreConfigError(`store URL ${JSON.stringify(url)}: ${name} must be 1, 0, true or false, got ${JSON.stringify(value)}`);
  }
}

/** Runs a check and prefixes its StoreConfigError with the URL. */
function wrap<T>(url: string, check: () => T): T {
  try {
    return check();
  } catch (err) {
    if (err instanceof StoreConfigError) throw new StoreConfigError(`store URL ${JSON.stringify(url)}: ${err.message}`);
    throw err;
  }
}

/** Creates the store a config names. */
export function createObjectStore(config: StoreConfig, overrides: StoreOverrides = {}): ObjectStore {
  switch (config.kind) {
    case 'fs':
      return new FsObjectStore(config.root, overrides.fs ?? {});
    case 's3': {
      const { kind: _kind, ...location } = config;
      return new S3ObjectStore({ ...overrides.s3, ...location });
    }
  }
}

/**
 * Parses a store URL and creates the store. Makes no request: call `ping()` to check it.
 * @throws StoreConfigError naming the bad part of the URL.
 * @example const store = openStore(process.env.CSA2_STORE_URL ?? '/var/lib/csa2/artifacts');
 */
export function openStore(url: string, overrides: StoreOverrides = {}): ObjectStore {
  return createObjectStore(parseStoreUrl(url), overrides);
}
