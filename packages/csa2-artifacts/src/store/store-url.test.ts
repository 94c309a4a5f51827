/**
 * @module store/store-url.test
 * Store URLs: what parses to which config, what fails with which message, and that each store's
 * `url` parses back to the config it came from.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { StoreConfigError } from '../errors.js';
import { FsObjectStore } from './fs-store.js';
import { S3ObjectStore } from './s3-store.js';
import { createObjectStore, openStore, parseStoreUrl } from './store-url.js';
import type { StoreConfig } from './store-url.js';

describe('parseStoreUrl', () => {
  it('parses file URLs and plain absolute paths, normalized', () => {
    const cases: [string, string][] = [
      ['file:///var/lib/csa2', '/var/lib/csa2'],
      ['file:///var/lib/csa2/', '/var/lib/csa2'],
      ['file://localhost/data', '/data'],
      ['file:///a%20b/c', '/a b/c'],
      ['/var/lib/csa2', '/var/lib/csa2'],
      ['/var/lib/../csa2/./x/', '/var/csa2/x'],
    ];
    for (const [url, root] of cases) assert.deepEqual(parseStoreUrl(url), { kind: 'fs', root }, url);
  });

  it('parses s3 URLs with and without prefix and parameters', () => {
    const cases: [string, StoreConfig][] = [
      ['s3://bucket', { kind: 's3', bucket: 'bucket', prefix: '' }],
      ['s3://bucket/', { kind: 's3', bucket: 'bucket', prefix: '' }],
      ['s3://my.bucket-1/a/b/', { kind: 's3', bucket: 'my.bucket-1', prefix: 'a/b' }],
      ['S3://bucket/p', { kind: 's3', bucket: 'bucket', prefix: 'p' }],
      [
        's3://csa2/prod?endpoint=http://127.0.0.1:4568&forcePathStyle=1&region=eu-west-1',
        { kind: 's3', bucket: 'csa2', prefix: 'prod', endpoint: 'http://127.0.0.1:4568', forcePathStyle: true, region: 'eu-west-1' },
      ],
      [
        's3://csa2?endpoint=https%3A%2F%2Fs3.example.com&forcePathStyle=false',
        { kind: 's3', bucket: 'csa2', prefix: '', endpoint: 'https://s3.example.com', forcePathStyle: false },
      ],
      ['s3://csa2/x?forcePathStyle=true', { kind: 's3', bucket: 'csa2', prefix: 'x', forcePathStyle: true }],
      ['s3://csa2/x?readPartSizeBytes=1048576&readParallelism=8', { kind: 's3', bucket: 'csa2', prefix: 'x', readPartSizeBytes: 1048576, readParallelism: 8 }],
      ['s3://csa2/x?touchMode=rewrite', { kind: 's3', bucket: 'csa2', prefix: 'x', touchMode: 'rewrite' }],
    ];
    for (const [url, config] of cases) assert.deepEqual(parseStoreUrl(url), config, url);
  });

  it('refuses bad URLs with a StoreConfigError naming the bad part', () => {
    const cases: [string, RegExp][] = [
      ['gs://bucket/x', /unknown scheme "gs:"/],
      ['http://host/x', /unknown scheme "http:"/],
      ['relative/dir', /no scheme and is not an absolute path/],
      ['', /no scheme/],
      ['s3:///prefix', /missing bucket/],
      ['s3://', /missing bucket/],
      ['s3://Upper_Case/x', /bucket name/],
      ['s3://bucket:9000/x', /no port/],
      ['s3://key:secret@bucket/x', /credentials do not belong/],
      ['s3://bucket/a//b', /prefix/],
      ['s3://bucket/a b', /prefix/],
      ['s3://bucket/x?endpoint=not-a-url', /endpoint.*not a URL/],
      ['s3://bucket/x?endpoint=ftp://host', /endpoint.*scheme must be http or https/],
      ['s3://bucket/x?endpoint=http://h:1?q=1', /endpoint.*no query/],
      ['s3://bucket/x?endpnt=http://h:1', /unknown query parameter "endpnt"/],
      ['s3://bucket/x?region=r&region=s', /"region" given twice/],
      ['s3://bucket/x?region=Bad_Region', /invalid region/],
      ['s3://bucket/x?forcePathStyle=yes', /forcePathStyle must be 1, 0, true or false/],
      ['s3://bucket/x?readPartSizeBytes=8MiB', /readPartSizeBytes must be a positive integer, got "8MiB"/],
      ['s3://bucket/x?readParallelism=0', /readParallelism must be a positive integer/],
      ['s3://bucket/x?readParallelism=-2', /readParallelism must be a positive integer/],
      ['s3://bucket/x?touchMode=utimes', /touchMode must be copy or rewrite/],
      ['s3://bucket/x#frag', /fragment/],
      ['file://remote-host/x', /must be local/],
      ['file:///x?mode=1', /unknown query parameter "mode"/],
    ];
    for (const [url, message] of cases) {
      assert.throws(
        () => parseStoreUrl(url),
        (err: unknown) => err instanceof StoreConfigError && message.test(err.message) && err.message.includes(JSON.stringify(url)),
        url,
      );
    }
  });
});

describe('openStore', () => {
  it('opens the backend the URL names, and its url parses back to the same config', async () => {
    const urls = [
      'file:///tmp/csa2-store-url-test',
      '/tmp/csa2 store/x',
      's3://bucket',
      's3://bucket/a/b?endpoint=http://127.0.0.1:4568&forcePathStyle=1&region=eu-west-1',
      's3://bucket/p?region=us-west-2',
      's3://bucket/p?readPartSizeBytes=1048576&readParallelism=8&touchMode=rewrite',
    ];
    for (const url of urls) {
      const store = openStore(url, { s3: { credentials: { accessKeyId: 'a', secretAccessKey: 'b' } } });
      try {
        const config = parseStoreUrl(url);
        assert.ok(config.kind === 'fs' ? store instanceof FsObjectStore : store instanceof S3ObjectStore, url);
        assert.deepEqual(parseStoreUrl(store.url), config, `${url} → ${store.url}`);
      } finally {
        await store.close();
      }
    }
  });

  it('passes overrides to the backend', async () => {
    const store = createObjectStore({ kind: 's3', bucket: 'bucket', prefix: 'p' }, { s3: { conditionalWrites: 'head-then-put' } });
    try {
      assert.ok(store instanceof S3ObjectStore);
      assert.equal(await store.conditionalWriteMode(), 'head-then-put');
    } finally {
      await store.close();
    }
    assert.throws(() => openStore('s3://bucket/p', { s3: { listPageSize: 0 } }), StoreConfigError);
  });
});
