/** Encoder config from the environment: defaults, and errors that name the variable. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EnvConfigError } from '@csa2/jobs';
import { loadEncoderConfig } from './config.js';

const BASE = { REDIS_URL: 'redis://127.0.0.1:6379', CSA2_MODEL_DIR: '/models/tiny', CSA2_STORE_URL: 'file:///srv/store' };

test('defaults, and every variable read', () => {
  const c = loadEncoderConfig(BASE);
  assert.equal(c.storeUrl, 'file:///srv/store');
  assert.equal(c.concurrency, undefined, 'unset: the worker sizes it from its engine');
  assert.deepEqual(c.scheduler, {});
  assert.equal(c.chunkTokens, undefined);
  assert.equal(c.lockDurationMs, 6000);
  assert.equal(c.lockRenewMs, 1000);
  assert.equal(c.stalledIntervalMs, 1000, "a dead worker's job is back within 7 s");
  assert.equal(c.reservedSlots, 2);
  assert.equal(c.slotPollMs, 100);
  assert.deepEqual(
    [
      loadEncoderConfig({ ...BASE, CSA2_PREFILL_RESERVED_SLOTS: '0' }).reservedSlots,
      loadEncoderConfig({ ...BASE, CSA2_PREFILL_SLOT_POLL_MS: '25' }).slotPollMs,
    ],
    [0, 25],
  );
  assert.equal(c.progressIntervalMs, 200);
  assert.deepEqual([c.httpHost, c.httpPort, c.readyTimeoutMs], ['127.0.0.1', 9301, 1000], "its own default port, not the decoder's 9302");
  assert.equal(c.cancelPollMs, 50);
  assert.equal(c.scanThreads, 'auto');
  const d = loadEncoderConfig({
    ...BASE,
    CSA2_PREFILL_CONCURRENCY: '2',
    CSA2_CHUNK_TOKENS: '1024',
    CSA2_CHUNK_CACHE_BYTES: '0',
    CSA2_LOCK_DURATION_MS: '120000',
  });
  assert.deepEqual([d.concurrency, d.chunkTokens, d.chunkCacheBytes, d.lockDurationMs], [2, 1024, 0, 120_000]);
  assert.equal(loadEncoderConfig({ ...BASE, CSA2_SCAN_THREADS: '3' }).scanThreads, 3);
  assert.equal(loadEncoderConfig({ ...BASE, CSA2_SCAN_THREADS: 'auto' }).scanThreads, 'auto');
  assert.equal(loadEncoderConfig(BASE).encoder, undefined);
  assert.equal(loadEncoderConfig({ ...BASE, CSA2_ENCODER: 'layers' }).encoder, 'layers');
  assert.throws(() => loadEncoderConfig({ ...BASE, CSA2_ENCODER: 'fused' }), /CSA2_ENCODER.*must be one of layers, graph/);
  assert.equal(loadEncoderConfig(BASE).encoderRows, undefined);
  assert.equal(loadEncoderConfig({ ...BASE, CSA2_ENCODER_ROWS: '8192' }).encoderRows, 8192);
  assert.throws(() => loadEncoderConfig({ ...BASE, CSA2_ENCODER_ROWS: '8' }), /CSA2_ENCODER_ROWS/);
});

test('the store is required; bad numbers name their variable', () => {
  const named = (name: string) => (err: unknown) => err instanceof EnvConfigError && err.variable === name;
  assert.throws(() => loadEncoderConfig({ ...BASE, CSA2_STORE_URL: '' }), named('CSA2_STORE_URL'));
  assert.throws(() => loadEncoderConfig({ ...BASE, CSA2_PREFILL_CONCURRENCY: '-1' }), named('CSA2_PREFILL_CONCURRENCY'));
  assert.throws(() => loadEncoderConfig({ ...BASE, CSA2_CHUNK_TOKENS: '4k' }), named('CSA2_CHUNK_TOKENS'));
  assert.throws(() => loadEncoderConfig({ ...BASE, CSA2_WORKER_HTTP_PORT: 'http' }), named('CSA2_WORKER_HTTP_PORT'));
  assert.throws(() => loadEncoderConfig({ ...BASE, CSA2_STALLED_INTERVAL_MS: '4000' }), named('CSA2_STALLED_INTERVAL_MS'));
  assert.throws(() => loadEncoderConfig({ ...BASE, CSA2_LOCK_RENEW_MS: '4000' }), named('CSA2_LOCK_RENEW_MS'));
  assert.throws(() => loadEncoderConfig({ ...BASE, CSA2_PREFILL_RESERVED_SLOTS: '65' }), named('CSA2_PREFILL_RESERVED_SLOTS'));
  assert.throws(() => loadEncoderConfig({ ...BASE, CSA2_PREFILL_RESERVED_SLOTS: 'two' }), named('CSA2_PREFILL_RESERVED_SLOTS'));
  assert.throws(() => loadEncoderConfig({ ...BASE, CSA2_PREFILL_SLOT_POLL_MS: '5' }), named('CSA2_PREFILL_SLOT_POLL_MS'));
  assert.throws(() => loadEncoderConfig({ ...BASE, CSA2_CANCEL_POLL_MS: '1' }), named('CSA2_CANCEL_POLL_MS'));
  for (const bad of ['-1', '65', 'two', '1.5']) assert.throws(() => loadEncoderConfig({ ...BASE, CSA2_SCAN_THREADS: bad }), named('CSA2_SCAN_THREADS'));
});
