/**
 * @module config
 * The gateway's settings, read once from the environment (README.md has the table). A bad value
 * fails start with an EnvConfigError naming the variable. Limits that depend on the model (its
 * context length) are resolved against the model's config in `resolveLimits`.
 */
import { randomBytes } from 'node:crypto';
import { parseKeyLimitSettings, type KeyLimitSettings } from './key-limits-config.js';
import { basename, resolve } from 'node:path';
import {
  EnvConfigError,
  ID_PATTERN,
  MAX_CHOICES,
  MAX_INLINE_TOKEN_IDS,
  envChoice,
  envInt,
  envOptionalInt,
  envOptionalString,
  envRedisUrl,
  envString,
  type Env,
} from '@csa2/jobs';
import { loadBatchConfig, type BatchConfig } from './batch/batch-config.js';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';

export interface GatewayConfig {
  /** REDIS_URL: queues, token streams and cancel flags. */
  readonly redisUrl: string;
  /** CSA2_STORE_URL: artifact store (file:///abs/path, /abs/path or s3://bucket/prefix?…). */
  readonly storeUrl: string;
  /** CSA2_MODEL_DIR: checkpoint directory (config.json, optional tokenizer.json). */
  readonly modelDir: string;
  /** CSA2_MODEL_NAME: the model name clients send. @defaultValue basename of CSA2_MODEL_DIR */
  readonly modelName: string;
  /** CSA2_HOST. @defaultValue '127.0.0.1' */
  readonly host: string;
  /** PORT (0 = any free port). @defaultValue 8080 */
  readonly port: number;
  /** CSA2_API_KEYS as key → tenant; null when unset (one key is generated at start). */
  readonly apiKeys: ReadonlyMap<string, string> | null;
  /** The limits CSA2_API_KEYS sets per key (key → settings; keys without any are absent). */
  readonly apiKeyLimits: ReadonlyMap<string, KeyLimitSettings>;
  /** CSA2_DEFAULT_KEY_LIMITS: the limits of every key that does not set its own. @defaultValue none (unlimited, weight 1) */
  readonly defaultKeyLimits: KeyLimitSettings;
  /** CSA2_MAX_BODY_BYTES: largest request body. @defaultValue 16 MiB */
  readonly maxBodyBytes: number;
  /**
   * CSA2_MAX_INFLIGHT_BODY_BYTES: request bodies read, parsed and tokenized at once, in bytes; more
   * wait their turn (middleware/body-budget). At least CSA2_MAX_BODY_BYTES. @defaultValue 4 × CSA2_MAX_BODY_BYTES
   */
  readonly maxInflightBodyBytes: number;
  /**
   * CSA2_SMALL_BODY_BYTES: bodies of at most this many bytes (a usual prompt) wait in a lane of their
   * own, SMALL_BODY_LANE_BODIES of them at once, not behind large ones (middleware/body-budget);
   * 0 = one lane for all. At most CSA2_MAX_BODY_BYTES. @defaultValue 256 KiB
   */
  readonly smallBodyBytes: number;
  /** CSA2_MAX_PROMPT_TOKENS: prompt tokens (document included) per completion. @defaultValue model max_seq_len - 1 */
  readonly maxPromptTokens: number | undefined;
  /** CSA2_MAX_DOCUMENT_TOKENS: tokens per ingested document. @defaultValue model max_seq_len - 1 */
  readonly maxDocumentTokens: number | undefined;
  /** CSA2_MAX_TOKENS: ceiling of max_tokens. @defaultValue 4096 (and never past the context) */
  readonly maxTokens: number;
  /** CSA2_DEFAULT_MAX_TOKENS: max_tokens when a request gives none. @defaultValue 256 */
  readonly defaultMaxTokens: number;
  /** CSA2_MAX_CHOICES: most choices (`n`) per request, at most 16 (the engine's limit). @defaultValue 8 */
  readonly maxChoices: number;
  /** CSA2_MAX_QUEUE_DEPTH: backlog (waiting + prioritized + delayed jobs) at which a queue refuses new work with 429. @defaultValue 1000 */
  readonly maxQueueDepth: number;
  /** CSA2_PREFILL_THRESHOLD_TOKENS: prompts this long or longer go through an encoder worker. @defaultValue 2048 */
  readonly prefillThresholdTokens: number;
  /** CSA2_REQUEST_TIMEOUT_MS: longest a completion may take end to end before it is cancelled (504). @defaultValue 600000 */
  readonly requestTimeoutMs: number;
  /**
   * CSA2_PROMPT_ARTIFACT_TTL_MS: a long prompt's artifact left in the store (its gateway died before
   * deleting it) is deleted this long after its request was accepted. @defaultValue CSA2_REQUEST_TIMEOUT_MS + 60000
   */
  readonly promptArtifactTtlMs: number;
  /** CSA2_READY_TIMEOUT_MS: /readyz probe timeout per dependency. @defaultValue 1000 */
  readonly readyTimeoutMs: number;
  /** CSA2_REDIS_COMMAND_TIMEOUT_MS: a Redis command that takes longer fails (503). @defaultValue 5000 */
  readonly redisCommandTimeoutMs: number;
  /** CSA2_SSE_KEEPALIVE_MS: SSE comment interval while a stream waits for tokens. @defaultValue 15000 */
  readonly sseKeepaliveMs: number;
  /** CSA2_JOB_POLL_MS: how often a waiting request checks whether its jobs failed. @defaultValue 2000 */
  readonly jobPollMs: number;
  /** CSA2_SHUTDOWN_GRACE_MS: on SIGTERM, how long running requests may finish before they are cancelled. @defaultValue 30000 */
  readonly shutdownGraceMs: number;
  /** CSA2_LOG_LEVEL. @defaultValue 'info' */
  readonly logLevel: LogLevel;
  /** Files and Batch API settings (batch/batch-config.ts). */
  readonly batch: BatchConfig;
  /** CSA2_CORS_ORIGINS: '*' or a list of origins allowed to call from a browser; null (unset) = CORS off. */
  readonly corsOrigins: '*' | readonly string[] | null;
  /** CSA2_OPERATOR_KEYS: keys that see every tenant on the status page (`/`); null when unset (one is generated at start). */
  readonly operatorKeys: ReadonlySet<string> | null;
}

const MIB = 1024 * 1024;

/** One entry of CSA2_API_KEYS: `key:tenant`, then optional `;name=value` limits (key-limits-config). */
export interface ApiKeyEntry {
  readonly key: string;
  readonly tenant: string;
  readonly limits: KeyLimitSettings;
}

/**
 * Parses `CSA2_API_KEYS` ("key1:tenant1,key2:tenant2;rpm=60;weight=2"). Keys are at least 8
 * characters without ':', ',', ';' or spaces; tenants match [A-Za-z0-9_-]{1,64}; a key may appear
 * once; the settings after ';' are those of key-limits-config.
 * @throws EnvConfigError naming CSA2_API_KEYS and the bad entry.
 */
export function parseApiKeyEntries(value: string, variable = 'CSA2_API_KEYS'): ApiKeyEntry[] {
  const seen = new Set<string>();
  const out: ApiKeyEntry[] = [];
  const entries = value
    .split(',')
    .map((e) => e.trim())
    .filter((e) => e !== '');
  if (entries.length === 0) throw new EnvConfigError(variable, 'lists no key:tenant pair');
  for (const [i, entry] of entries.entries()) {
    const semi = entry.indexOf(';');
    const head = semi < 0 ? entry : entry.slice(0, semi);
    const colon = head.lastIndexOf(':');
    if (colon <= 0 || colon === head.length - 1) throw new EnvConfigError(variable, `entry ${i + 1} is not key:tenant`);
    const key = head.slice(0, colon);
    const tenant = head.slice(colon + 1);
    if (key.length < 8 || /[\s:,;]/.test(key))
      throw new EnvConfigError(variable, `entry ${i + 1}: a key has at least 8 characters and no spaces, ':', ',' or ';'`);
    if (!ID_PATTERN.test(tenant)) throw new EnvConfigError(variable, `entry ${i + 1}: tenant "${tenant}" must match [A-Za-z0-9_-]{1,64}`);
    if (seen.has(key)) throw new EnvConfigError(variable, `entry ${i + 1}: the key appears twice`);
    seen.add(key);
    out.push({ key, tenant, limits: semi < 0 ? {} : parseKeyLimitSettings(entry.slice(semi + 1), variable, `entry ${i + 1}`) });
  }
  return out;
}

/** `CSA2_API_KEYS` as key → tenant (see parseApiKeyEntries). */
export function parseApiKeys(value: string, variable = 'CSA2_API_KEYS'): Map<string, string> {
  return new Map(parseApiKeyEntries(value, variable).map((e) => [e.key, e.tenant]));
}

/**
 * Parses `CSA2_CORS_ORIGINS`: '*' (any origin) or comma-separated origins (`scheme://host[:port]`).
 * @throws EnvConfigError naming the bad entry.
 */
export function parseCorsOrigins(value: string, variable = 'CSA2_CORS_ORIGINS'): '*' | string[] {
  if (value.trim() === '*') return '*';
  const origins = value
    .split(',')
    .map((e) => e.trim())
    .filter((e) => e !== '');
  if (origins.length === 0) throw new EnvConfigError(variable, "lists no origin (use '*' for any)");
  for (const origin of origins) {
    let url: URL | null = null;
    try {
      url = new URL(origin);
    } catch {
      url = null;
    }
    if (url === null || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.origin !== origin) {
      throw new EnvConfigError(variable, `"${origin}" is not an origin (scheme://host[:port], no path or trailing '/')`);
    }
  }
  return origins;
}

/** Parses `CSA2_OPERATOR_KEYS` (comma-separated keys, each at least 8 characters without ':' , ',' or spaces). */
export function parseOperatorKeys(value: string, variable = 'CSA2_OPERATOR_KEYS'): Set<string> {
  const keys = value
    .split(',')
    .map((e) => e.trim())
    .filter((e) => e !== '');
  if (keys.length === 0) throw new EnvConfigError(variable, 'lists no key');
  for (const [i, key] of keys.entries()) {
    if (key.length < 8 || /[\s:,]/.test(key)) throw new EnvConfigError(variable, `entry ${i + 1}: a key has at least 8 characters and no spaces, ':' or ','`);
  }
  return new Set(keys);
}

/** A fresh API key (`sk-csa2-` + 32 random base64url characters). */
export function generateApiKey(): string {
  return `sk-csa2-${randomBytes(24).toString('base64url')}`;
}

/** The tenant of the generated key when CSA2_API_KEYS is unset. */
export const DEFAULT_TENANT = 'default';

/** Reads the gateway's settings; throws EnvConfigError naming the first bad variable. */
export function loadGatewayConfig(env: Env = process.env): GatewayConfig {
  const modelDir = resolve(envString(env, 'CSA2_MODEL_DIR', 'a checkpoint directory with config.json'));
  const apiKeys = envOptionalString(env, 'CSA2_API_KEYS');
  const apiKeyEntries = apiKeys === undefined ? [] : parseApiKeyEntries(apiKeys);
  const defaultKeyLimits = parseKeyLimitSettings(envOptionalString(env, 'CSA2_DEFAULT_KEY_LIMITS') ?? '', 'CSA2_DEFAULT_KEY_LIMITS', 'the defaults');
  const maxPromptTokens = envOptionalInt(env, 'CSA2_MAX_PROMPT_TOKENS', { min: 1 });
  const maxDocumentTokens = envOptionalInt(env, 'CSA2_MAX_DOCUMENT_TOKENS', { min: 1 });
  const maxTokens = envInt(env, 'CSA2_MAX_TOKENS', 4096, { min: 1 });
  const defaultMaxTokens = envInt(env, 'CSA2_DEFAULT_MAX_TOKENS', Math.min(256, maxTokens), { min: 1 });
  if (defaultMaxTokens > maxTokens)
    throw new EnvConfigError('CSA2_DEFAULT_MAX_TOKENS', `must not exceed CSA2_MAX_TOKENS (${maxTokens}), got ${defaultMaxTokens}`);
  const modelName = envOptionalString(env, 'CSA2_MODEL_NAME') ?? basename(modelDir);
  const corsOrigins = envOptionalString(env, 'CSA2_CORS_ORIGINS');
  const operatorKeys = envOptionalString(env, 'CSA2_OPERATOR_KEYS');
  const requestTimeoutMs = envInt(env, 'CSA2_REQUEST_TIMEOUT_MS', 600_000, { min: 100 });
  const maxBodyBytes = envInt(env, 'CSA2_MAX_BODY_BYTES', 16 * MIB, { min: 1024 });
  if (modelName.length > 256) throw new EnvConfigError('CSA2_MODEL_NAME', 'must be at most 256 characters');
  return {
    redisUrl: envRedisUrl(env),
    storeUrl: envString(env, 'CSA2_STORE_URL', 'file:///abs/path, /abs/path or s3://bucket/prefix'),
    modelDir,
    modelName,
    host: envOptionalString(env, 'CSA2_HOST') ?? '127.0.0.1',
    port: envInt(env, 'PORT', 8080, { min: 0, max: 65535 }),
    apiKeys: apiKeys === undefined ? null : new Map(apiKeyEntries.map((e) => [e.key, e.tenant])),
    apiKeyLimits: new Map(apiKeyEntries.filter((e) => Object.keys(e.limits).length > 0).map((e) => [e.key, e.limits])),
    defaultKeyLimits,
    maxBodyBytes,
    maxInflightBodyBytes: envInt(env, 'CSA2_MAX_INFLIGHT_BODY_BYTES', 4 * maxBodyBytes, { min: maxBodyBytes }),
    smallBodyBytes: envInt(env, 'CSA2_SMALL_BODY_BYTES', Math.min(256 * 1024, maxBodyBytes), { min: 0, max: maxBodyBytes }),
    maxPromptTokens,
    maxDocumentTokens,
    maxTokens,
    defaultMaxTokens,
    maxChoices: envInt(env, 'CSA2_MAX_CHOICES', 8, { min: 1, max: MAX_CHOICES }),
    maxQueueDepth: envInt(env, 'CSA2_MAX_QUEUE_DEPTH', 1000, { min: 1 }),
    // shorter prompts travel inline in decode payloads, which carry at most MAX_INLINE_TOKEN_IDS
    prefillThresholdTokens: envInt(env, 'CSA2_PREFILL_THRESHOLD_TOKENS', 2048, { min: 2, max: MAX_INLINE_TOKEN_IDS }),
    requestTimeoutMs,
    promptArtifactTtlMs: envInt(env, 'CSA2_PROMPT_ARTIFACT_TTL_MS', requestTimeoutMs + 60_000, { min: requestTimeoutMs }),
    readyTimeoutMs: envInt(env, 'CSA2_READY_TIMEOUT_MS', 1000, { min: 10, max: 60_000 }),
    redisCommandTimeoutMs: envInt(env, 'CSA2_REDIS_COMMAND_TIMEOUT_MS', 5000, { min: 10 }),
    sseKeepaliveMs: envInt(env, 'CSA2_SSE_KEEPALIVE_MS', 15_000, { min: 100 }),
    jobPollMs: envInt(env, 'CSA2_JOB_POLL_MS', 2000, { min: 10 }),
    shutdownGraceMs: envInt(env, 'CSA2_SHUTDOWN_GRACE_MS', 30_000, { min: 0 }),
    logLevel: envChoice<LogLevel>(env, 'CSA2_LOG_LEVEL', ['debug', 'info', 'warn', 'error', 'silent'], 'info'),
    batch: loadBatchConfig(env),
    corsOrigins: corsOrigins === undefined ? null : parseCorsOrigins(corsOrigins),
    operatorKeys: operatorKeys === undefined ? null : parseOperatorKeys(operatorKeys),
  };
}

/** The limits a request is checked against, resolved against the served model. */
export interface GatewayLimits {
  readonly maxBodyBytes: number;
  readonly maxInflightBodyBytes: number;
  readonly smallBodyBytes: number;
  /** The model's context: prompt tokens + max_tokens never exceed it. */
  readonly contextTokens: number;
  readonly maxPromptTokens: number;
  readonly maxDocumentTokens: number;
  readonly maxTokens: number;
  readonly defaultMaxTokens: number;
  /** Most choices (`n`) per request. */
  readonly maxChoices: number;
  readonly maxQueueDepth: number;
  readonly prefillThresholdTokens: number;
}

/**
 * Fills the model-dependent defaults; a limit past the model's context (`maxSeqLen`) is a config
 * error naming the variable.
 */
export function resolveLimits(config: GatewayConfig, model: { readonly maxSeqLen: number }): GatewayLimits {
  const contextTokens = model.maxSeqLen;
  const check = (variable: string, value: number | undefined): number => {
    if (value === undefined) return Math.max(1, contextTokens - 1);
    if (value >= contextTokens) {
      throw new EnvConfigError(
        variable,
        `must be below the model's context of ${contextTokens} tokens (max_seq_len; one token is left to generate), got ${value}`,
      );
    }
    return value;
  };
  return {
    maxBodyBytes: config.maxBodyBytes,
    maxInflightBodyBytes: config.maxInflightBodyBytes,
    smallBodyBytes: config.smallBodyBytes,
    contextTokens,
    maxPromptTokens: check('CSA2_MAX_PROMPT_TOKENS', config.maxPromptTokens),
    maxDocumentTokens: check('CSA2_MAX_DOCUMENT_TOKENS', config.maxDocumentTokens),
    maxTokens: config.maxTokens,
    defaultMaxTokens: config.defaultMaxTokens,
    maxChoices: config.maxChoices,
    maxQueueDepth: config.maxQueueDepth,
    prefillThresholdTokens: config.prefillThresholdTokens,
  };
}
