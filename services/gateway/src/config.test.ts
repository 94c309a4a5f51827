import assert from 'node:assert/strict';
import { test } from 'node:test';
import { EnvConfigError } from '@csa2/jobs';
import { loadGatewayConfig, parseApiKeys, resolveLimits } from './config.js';
import { resolveKeyLimits } from './key-limits-config.js';

const base = { REDIS_URL: 'redis://127.0.0.1:6390', CSA2_STORE_URL: 'file:///tmp/store', CSA2_MODEL_DIR: '/models/deepseek-v41-tiny-a' };

/** Asserts that loading `env` fails with an EnvConfigError naming `variable`. */
function rejects(env: Record<string, string>, variable: string, message?: RegExp): void {
  assert.throws(
    () => loadGatewayConfig(env),
    (err: unknown) => {
      assert.ok(err instanceof EnvConfigError, String(err));
      assert.equal(err.variable, variable);
      assert.ok(err.message.startsWith(`${variable}: `), err.message);
      if (message !== undefined) assert.match(err.message, message);
      return true;
    },
  );
}

test('defaults: model name from the model directory, units in the field names', () => {
  const c = loadGatewayConfig(base);
  assert.equal(c.modelName, 'deepseek-v41-tiny-a');
  assert.equal(c.port, 8080);
  assert.equal(c.host, '127.0.0.1');
  assert.equal(c.apiKeys, null);
  assert.equal(c.maxBodyBytes, 16 * 1024 * 1024);
  assert.equal(c.maxTokens, 4096);
  assert.equal(c.maxQueueDepth, 1000);
  assert.equal(c.maxPromptTokens, undefined);
  assert.equal(c.readyTimeoutMs, 1000);
});

test('every required variable is named when missing', () => {
  for (const name of ['REDIS_URL', 'CSA2_STORE_URL', 'CSA2_MODEL_DIR']) {
    const env: Record<string, string> = { ...base };
    delete env[name];
    rejects(env, name, /is required/);
  }
  rejects({ ...base, REDIS_URL: 'localhost:6379' }, 'REDIS_URL', /redis:\/\//);
});

test('numbers are checked and the variable is named', () => {
  rejects({ ...base, CSA2_MAX_BODY_BYTES: '1MB' }, 'CSA2_MAX_BODY_BYTES', /integer/);
  rejects({ ...base, CSA2_MAX_TOKENS: '0' }, 'CSA2_MAX_TOKENS');
  rejects({ ...base, CSA2_MAX_QUEUE_DEPTH: '-5' }, 'CSA2_MAX_QUEUE_DEPTH');
  rejects({ ...base, PORT: '70000' }, 'PORT');
  rejects({ ...base, CSA2_DEFAULT_MAX_TOKENS: '100', CSA2_MAX_TOKENS: '50' }, 'CSA2_DEFAULT_MAX_TOKENS');
  rejects({ ...base, CSA2_LOG_LEVEL: 'loud' }, 'CSA2_LOG_LEVEL');
  const c = loadGatewayConfig({ ...base, CSA2_MAX_PROMPT_TOKENS: '100', CSA2_REQUEST_TIMEOUT_MS: '5000', PORT: '0' });
  assert.equal(c.maxPromptTokens, 100);
  assert.equal(c.requestTimeoutMs, 5000);
  assert.equal(c.port, 0);
});

test('CSA2_API_KEYS: key:tenant pairs, checked', () => {
  assert.deepEqual(
    [...parseApiKeys('sk-aaaaaaaa:acme, sk-bbbbbbbb:beta_2')],
    [
      ['sk-aaaaaaaa', 'acme'],
      ['sk-bbbbbbbb', 'beta_2'],
    ],
  );
  assert.deepEqual([...(loadGatewayConfig({ ...base, CSA2_API_KEYS: 'sk-aaaaaaaa:acme' }).apiKeys ?? [])], [['sk-aaaaaaaa', 'acme']]);
  rejects({ ...base, CSA2_API_KEYS: 'sk-aaaaaaaa' }, 'CSA2_API_KEYS', /key:tenant/);
  rejects({ ...base, CSA2_API_KEYS: 'short:acme' }, 'CSA2_API_KEYS', /8 characters/);
  rejects({ ...base, CSA2_API_KEYS: 'sk-aaaaaaaa:bad tenant' }, 'CSA2_API_KEYS', /tenant/);
  rejects({ ...base, CSA2_API_KEYS: 'sk-aaaaaaaa:a,sk-aaaaaaaa:b' }, 'CSA2_API_KEYS', /twice/);
});

test('CSA2_API_KEYS entries carry per-key limits and weights; CSA2_DEFAULT_KEY_LIMITS fills the rest', () => {
  const c = loadGatewayConfig({
    ...base,
    CSA2_API_KEYS: 'sk-aaaaaaaa:acme;rpm=600;tpm=2000000;weight=4, sk-bbbbbbbb:beta;concurrency=2;queued_documents=50, sk-cccccccc:gamma',
    CSA2_DEFAULT_KEY_LIMITS: 'rpm=60; tpm=100000',
  });
  assert.deepEqual(
    [...(c.apiKeys ?? [])],
    [
      ['sk-aaaaaaaa', 'acme'],
      ['sk-bbbbbbbb', 'beta'],
      ['sk-cccccccc', 'gamma'],
    ],
  );
  assert.deepEqual(resolveKeyLimits(c.apiKeyLimits.get('sk-aaaaaaaa'), c.defaultKeyLimits), {
    requestsPerMinute: 600,
    tokensPerMinute: 2_000_000,
    concurrentRequests: null,
    queuedDocuments: null,
    weight: 4,
  });
  assert.deepEqual(resolveKeyLimits(c.apiKeyLimits.get('sk-bbbbbbbb'), c.defaultKeyLimits), {
    requestsPerMinute: 60,
    tokensPerMinute: 100_000,
    concurrentRequests: 2,
    queuedDocuments: 50,
    weight: 1,
  });
  assert.deepEqual(resolveKeyLimits(c.apiKeyLimits.get('sk-cccccccc'), c.defaultKeyLimits), {
    requestsPerMinute: 60,
    tokensPerMinute: 100_000,
    concurrentRequests: null,
    queuedDocuments: null,
    weight: 1,
  });
  rejects({ ...base, CSA2_API_KEYS: 'sk-aaaaaaaa:acme;rpm=0' }, 'CSA2_API_KEYS', /entry 1: rpm must be a positive integer/);
  rejects({ ...base, CSA2_API_KEYS: 'sk-aaaaaaaa:acme;burst=5' }, 'CSA2_API_KEYS', /unknown setting "burst"/);
  rejects({ ...base, CSA2_API_KEYS: 'sk-aaaaaaaa:acme;weight=5000' }, 'CSA2_API_KEYS', /weight/);
  rejects({ ...base, CSA2_DEFAULT_KEY_LIMITS: 'tpm=lots' }, 'CSA2_DEFAULT_KEY_LIMITS', /tpm must be a positive integer/);
});

test('limits are resolved against the model context; a limit past it names the variable', () => {
  const limits = resolveLimits(loadGatewayConfig(base), { maxSeqLen: 256 });
  assert.equal(limits.contextTokens, 256);
  assert.equal(limits.maxPromptTokens, 255);
  assert.equal(limits.maxDocumentTokens, 255);
  assert.throws(
    () => resolveLimits(loadGatewayConfig({ ...base, CSA2_MAX_PROMPT_TOKENS: '256' }), { maxSeqLen: 256 }),
    (err: unknown) => err instanceof EnvConfigError && err.variable === 'CSA2_MAX_PROMPT_TOKENS',
  );
});

test('CORS, operator keys and the batch settings: off / generated / defaults, bad values named', () => {
  const c = loadGatewayConfig(base);
  assert.equal(c.corsOrigins, null, 'CORS off by default');
  assert.equal(c.operatorKeys, null);
  assert.equal(c.batch.maxFileBytes, 100 * 1024 * 1024);
  assert.equal(c.batch.maxLines, 50_000);
  assert.equal(c.batch.windowLines, 16);
  assert.equal(c.batch.weight, 0.01);
  assert.equal(c.batch.concurrency, 4);
  const on = loadGatewayConfig({
    ...base,
    CSA2_CORS_ORIGINS: 'https://a.example, http://localhost:3000',
    CSA2_OPERATOR_KEYS: 'sk-op-aaaaaaaa',
    CSA2_BATCH_CONCURRENCY: '0',
  });
  assert.deepEqual(on.corsOrigins, ['https://a.example', 'http://localhost:3000']);
  assert.deepEqual([...(on.operatorKeys ?? [])], ['sk-op-aaaaaaaa']);
  assert.equal(on.batch.concurrency, 0);
  assert.equal(loadGatewayConfig({ ...base, CSA2_CORS_ORIGINS: '*' }).corsOrigins, '*');
  rejects({ ...base, CSA2_CORS_ORIGINS: 'https://a.example/' }, 'CSA2_CORS_ORIGINS', /not an origin/);
  rejects({ ...base, CSA2_CORS_ORIGINS: 'a.example' }, 'CSA2_CORS_ORIGINS', /not an origin/);
  rejects({ ...base, CSA2_OPERATOR_KEYS: 'short' }, 'CSA2_OPERATOR_KEYS', /8 characters/);
  rejects({ ...base, CSA2_BATCH_WEIGHT: '0' }, 'CSA2_BATCH_WEIGHT');
  rejects({ ...base, CSA2_BATCH_WINDOW_LINES: 'many' }, 'CSA2_BATCH_WINDOW_LINES', /integer/);
  rejects({ ...base, CSA2_BATCH_STALLED_INTERVAL_MS: '60000', CSA2_BATCH_LOCK_DURATION_MS: '30000' }, 'CSA2_BATCH_STALLED_INTERVAL_MS', /must not exceed/);
});
