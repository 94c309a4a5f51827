/**
 * @module config
 * The decoder worker's settings, read once from the environment (see README.md for the table): the
 * engine workers' common ones (WorkerConfig, @csa2/jobs worker-config) plus the decoder's own.
 * A bad value fails start with an EnvConfigError naming the variable.
 */
import {
  EXECUTION_PROVIDERS,
  LOG_LEVELS,
  envChoice,
  envEngineScheduler,
  envInt,
  envLockDurationMs,
  envLockRenewMs,
  envOptionalInt,
  envOptionalString,
  envRedisUrl,
  envStalledIntervalMs,
  envString,
  envThreads,
  envScanThreads,
  type Env,
  type WorkerConfig,
  WORKER_HTTP_PORTS,
} from '@csa2/jobs';

const optional = <K extends string, V>(k: K, v: V | undefined): { [P in K]?: V } => (v === undefined ? {} : ({ [k]: v } as { [P in K]: V }));

/**
 * CSA2_DECODE_CONCURRENCY unset: the worker takes as many decode jobs at once as its engine can batch
 * whatever their length (ModelInfo.batchCapacity: min(CSA2_DECODE_BATCH_SEQUENCES, CSA2_KV_BUDGET_BYTES ÷
 * the bytes of one sequence at max_seq_len)).
 */
export interface DecoderConfig extends WorkerConfig {
  /** CSA2_STORE_URL: artifact store (file:///… or s3://…); needed for jobs that name a document. */
  readonly storeUrl?: string;
  /** CSA2_REPLAY_TOKENS: bounded replay length for jobs that leave it null. @defaultValue the engine's (128) */
  readonly replayTokens?: number;
  /** CSA2_CANCEL_POLL_MS: how often a running job checks its cancel key. @defaultValue 50 */
  readonly cancelPollMs: number;
}

export function loadDecoderConfig(env: Env = process.env): DecoderConfig {
  const storeUrl = envOptionalString(env, 'CSA2_STORE_URL');
  const replayTokens = envOptionalInt(env, 'CSA2_REPLAY_TOKENS', { min: 1 });
  const chunkCacheBytes = envOptionalInt(env, 'CSA2_CHUNK_CACHE_BYTES', { min: 0 });
  const documentCacheBytes = envOptionalInt(env, 'CSA2_DOCUMENT_CACHE_BYTES', { min: 0 });
  const documentPrefaultBytes = envOptionalInt(env, 'CSA2_DOCUMENT_PREFAULT_BYTES', { min: 0 });
  const lockDurationMs = envLockDurationMs(env, 'CSA2_LOCK_DURATION_MS');
  return {
    redisUrl: envRedisUrl(env),
    modelDir: envString(env, 'CSA2_MODEL_DIR', 'a checkpoint directory with config.json and model.safetensors'),
    ...(storeUrl !== undefined ? { storeUrl } : {}),
    ...optional('concurrency', envOptionalInt(env, 'CSA2_DECODE_CONCURRENCY', { min: 1, max: 4096 })),
    scheduler: envEngineScheduler(env),
    lockDurationMs,
    lockRenewMs: envLockRenewMs(env, 'CSA2_LOCK_RENEW_MS', lockDurationMs),
    stalledIntervalMs: envStalledIntervalMs(env, 'CSA2_STALLED_INTERVAL_MS', lockDurationMs),
    ...(replayTokens !== undefined ? { replayTokens } : {}),
    ...(chunkCacheBytes !== undefined ? { chunkCacheBytes } : {}),
    ...(documentCacheBytes !== undefined ? { documentCacheBytes } : {}),
    ...(documentPrefaultBytes !== undefined ? { documentPrefaultBytes } : {}),
    threads: envThreads(env, 'CSA2_THREADS'),
    scanThreads: envScanThreads(env, 'CSA2_SCAN_THREADS'),
    provider: envChoice(env, 'CSA2_PROVIDER', EXECUTION_PROVIDERS, 'cpu'),
    shutdownGraceMs: envInt(env, 'CSA2_SHUTDOWN_GRACE_MS', 20_000, { min: 0 }),
    cancelPollMs: envInt(env, 'CSA2_CANCEL_POLL_MS', 50, { min: 5, max: 10_000 }),
    logLevel: envChoice(env, 'CSA2_LOG_LEVEL', LOG_LEVELS, 'info'),
    httpHost: envOptionalString(env, 'CSA2_HOST') ?? '127.0.0.1',
    httpPort: envInt(env, 'CSA2_WORKER_HTTP_PORT', WORKER_HTTP_PORTS.decoder, { min: 0, max: 65535 }),
    readyTimeoutMs: envInt(env, 'CSA2_READY_TIMEOUT_MS', 1000, { min: 10, max: 60_000 }),
  };
}
