/** Decoder config from the environment: defaults, and errors that name the variable. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EnvConfigError, stalledRecoveryBoundMs } from '@csa2/jobs';
import { DECODE_ATTENTION_ARENA_ROWS } from '@csa2/core';
import { loadDecoderConfig } from './config.js';
import { decoderEngineOptions } from './worker.js';

const BASE = { REDIS_URL: 'redis://127.0.0.1:6379', CSA2_MODEL_DIR: '/models/tiny' };

test('defaults: jobs at once sized by the engine (unset), 6 s locks renewed and checked every second, 50 ms cancel polls, no store, engine defaults', () => {
  const c = loadDecoderConfig(BASE);
  assert.deepEqual(c, {
    redisUrl: 'redis://127.0.0.1:6379',
    modelDir: '/models/tiny',
    scheduler: {},
    lockDurationMs: 6000,
    lockRenewMs: 1000,
    stalledIntervalMs: 1000,
    threads: 'auto',
    scanThreads: 'auto',
    provider: 'cpu',
    shutdownGraceMs: 20_000,
    cancelPollMs: 50,
    logLevel: 'info',
    httpHost: '127.0.0.1',
    httpPort: 9302,
    readyTimeoutMs: 1000,
  });
});

test("engine options: threads and provider from the config, the warm-up, and attention runs above a decode batch (a question's replay) without the arena", () => {
  const o = decoderEngineOptions(loadDecoderConfig({ ...BASE, CSA2_THREADS: '2' }));
  assert.deepEqual(o.runtime, { intraOpThreads: 2, executionProvider: 'cpu', attentionArenaMaxRows: DECODE_ATTENTION_ARENA_ROWS });
  assert.equal(o.warmUp, true);
  assert.equal(o.scanThreads, 'auto');
  assert.equal(decoderEngineOptions(loadDecoderConfig({ ...BASE, CSA2_SCAN_THREADS: '3' })).scanThreads, 3);
  assert.equal(DECODE_ATTENTION_ARENA_ROWS, 64);
});

test('every variable is read', () => {
  const c = loadDecoderConfig({
    ...BASE,
    CSA2_STORE_URL: 'file:///srv/store',
    CSA2_DECODE_CONCURRENCY: '4',
    CSA2_LOCK_DURATION_MS: '60000',
    CSA2_REPLAY_TOKENS: '256',
    CSA2_CHUNK_CACHE_BYTES: '1048576',
    CSA2_DOCUMENT_CACHE_BYTES: '0',
    CSA2_THREADS: '2',
    CSA2_SCAN_THREADS: '0',
    CSA2_SHUTDOWN_GRACE_MS: '5000',
    CSA2_HOST: '0.0.0.0',
    CSA2_WORKER_HTTP_PORT: '0',
    CSA2_READY_TIMEOUT_MS: '250',
  });
  assert.deepEqual([c.httpHost, c.httpPort, c.readyTimeoutMs], ['0.0.0.0', 0, 250]);
  assert.equal(c.storeUrl, 'file:///srv/store');
  assert.equal(c.concurrency, 4);
  assert.equal(c.lockDurationMs, 60_000);
  assert.equal(c.replayTokens, 256);
  assert.equal(c.chunkCacheBytes, 1_048_576);
  assert.equal(c.documentCacheBytes, 0);
  assert.equal(c.threads, 2);
  assert.equal(c.scanThreads, 0);
  assert.equal(c.shutdownGraceMs, 5000);
});

test('CSA2_DOCUMENT_PREFAULT_BYTES: read, unset by default, a bad value names the variable', () => {
  assert.equal(loadDecoderConfig({ ...BASE, CSA2_DOCUMENT_PREFAULT_BYTES: '268435456' }).documentPrefaultBytes, 268_435_456);
  assert.equal(loadDecoderConfig(BASE).documentPrefaultBytes, undefined);
  assert.equal(decoderEngineOptions(loadDecoderConfig({ ...BASE, CSA2_DOCUMENT_PREFAULT_BYTES: '4096' })).documentPrefaultBytes, 4096, 'passed to the engine');
  assert.equal(decoderEngineOptions(loadDecoderConfig(BASE)).documentPrefaultBytes, undefined);
  for (const bad of ['-1', 'lots', '1.5'])
    assert.throws(() => loadDecoderConfig({ ...BASE, CSA2_DOCUMENT_PREFAULT_BYTES: bad }), /CSA2_DOCUMENT_PREFAULT_BYTES/);
});

test("stalled checks run at least twice per lock duration, so a dead worker's job is back within lock + interval", () => {
  const c = loadDecoderConfig(BASE);
  assert.equal(stalledRecoveryBoundMs(c), 7000, "a killed worker's job is back within 7 s by default");
  assert.equal(c.lockRenewMs, 1000, 'a live worker keeps its jobs through a 5 s stall');
  assert.equal(loadDecoderConfig({ ...BASE, CSA2_LOCK_DURATION_MS: '1500' }).lockRenewMs, 750, 'the renewal follows a short lock');
  assert.throws(
    () => loadDecoderConfig({ ...BASE, CSA2_LOCK_RENEW_MS: '3001' }),
    (err: unknown) =>
      err instanceof EnvConfigError && err.variable === 'CSA2_LOCK_RENEW_MS' && /at most half of CSA2_LOCK_DURATION_MS \(3000\)/.test(err.message),
  );
  assert.throws(
    () => loadDecoderConfig({ ...BASE, CSA2_LOCK_RENEW_MS: '50' }),
    (err: unknown) => err instanceof EnvConfigError && err.variable === 'CSA2_LOCK_RENEW_MS',
  );
  assert.equal(loadDecoderConfig({ ...BASE, CSA2_LOCK_DURATION_MS: '1500' }).stalledIntervalMs, 750, 'the default follows a short lock');
  assert.equal(loadDecoderConfig({ ...BASE, CSA2_LOCK_DURATION_MS: '30000', CSA2_STALLED_INTERVAL_MS: '15000' }).stalledIntervalMs, 15_000);
  assert.throws(
    () => loadDecoderConfig({ ...BASE, CSA2_STALLED_INTERVAL_MS: '4000' }),
    (err: unknown) =>
      err instanceof EnvConfigError && err.variable === 'CSA2_STALLED_INTERVAL_MS' && /at most half of CSA2_LOCK_DURATION_MS \(3000\)/.test(err.message),
  );
});

test('a missing or bad value fails with an error naming the variable', () => {
  const named = (name: string) => (err: unknown) => err instanceof EnvConfigError && err.variable === name && err.message.startsWith(`${name}: `);
  assert.throws(() => loadDecoderConfig({ CSA2_MODEL_DIR: '/m' }), named('REDIS_URL'));
  assert.throws(() => loadDecoderConfig({ ...BASE, REDIS_URL: 'localhost:6379' }), named('REDIS_URL'));
  assert.throws(() => loadDecoderConfig({ REDIS_URL: BASE.REDIS_URL }), named('CSA2_MODEL_DIR'));
  assert.throws(() => loadDecoderConfig({ ...BASE, CSA2_DECODE_CONCURRENCY: 'two' }), named('CSA2_DECODE_CONCURRENCY'));
  assert.throws(() => loadDecoderConfig({ ...BASE, CSA2_DECODE_CONCURRENCY: '0' }), named('CSA2_DECODE_CONCURRENCY'));
  assert.throws(() => loadDecoderConfig({ ...BASE, CSA2_LOCK_DURATION_MS: '1.5' }), named('CSA2_LOCK_DURATION_MS'));
  assert.throws(() => loadDecoderConfig({ ...BASE, CSA2_THREADS: 'many' }), named('CSA2_THREADS'));
  for (const bad of ['-1', '65', 'two']) assert.throws(() => loadDecoderConfig({ ...BASE, CSA2_SCAN_THREADS: bad }), named('CSA2_SCAN_THREADS'));
  assert.throws(() => loadDecoderConfig({ ...BASE, CSA2_PROVIDER: 'tpu' }), named('CSA2_PROVIDER'));
  assert.throws(() => loadDecoderConfig({ ...BASE, CSA2_WORKER_HTTP_PORT: '70000' }), named('CSA2_WORKER_HTTP_PORT'));
});

test('the engine scheduler variables are read, and a bad one names itself', () => {
  const c = loadDecoderConfig({
    ...BASE,
    CSA2_DECODE_CONCURRENCY: '12',
    CSA2_DECODE_BATCH_SEQUENCES: '16',
    CSA2_MAX_STEP_TOKENS: '384',
    CSA2_PREFILL_CHUNK_TOKENS: '64',
    CSA2_KV_BUDGET_BYTES: String(2 ** 31),
    CSA2_DECODE_LATENCY_FACTOR: '1.5',
    CSA2_PREFILL_IDLE_CREDIT_MS: '500',
  });
  assert.equal(c.concurrency, 12);
  assert.deepEqual(c.scheduler, {
    maxRunning: 16,
    maxStepTokens: 384,
    prefillChunkTokens: 64,
    kvBudgetBytes: 2 ** 31,
    decodeLatencyFactor: 1.5,
    prefillIdleCreditMs: 500,
  });
  for (const [name, bad] of [
    ['CSA2_DECODE_LATENCY_FACTOR', '0.5'],
    ['CSA2_DECODE_LATENCY_FACTOR', 'fast'],
    ['CSA2_DECODE_BATCH_SEQUENCES', '0'],
    ['CSA2_KV_BUDGET_BYTES', '1k'],
    ['CSA2_PREFILL_IDLE_CREDIT_MS', '-1'],
  ] as const) {
    assert.throws(
      () => loadDecoderConfig({ ...BASE, [name]: bad }),
      (err: unknown) => err instanceof EnvConfigError && err.variable === name,
      `${name}=${bad}`,
    );
  }
});
