/**
 * @module config
 * The encoder worker's settings, read once from the environment (see README.md for the table): the
 * engine workers' common ones (WorkerConfig, @csa2/jobs worker-config) plus the encoder's own.
 * A bad value fails start with an EnvConfigError naming the variable.
 */
import { EXECUTION_PROVIDERS, LOG_LEVELS, envChoice, envInt, envOptionalInt, envRedisUrl, envStalledIntervalMs, envString, envThreads, type Env, type WorkerConfig } from '@csa2/jobs';

export interface EncoderConfig extends WorkerConfig {
  /** CSA2_STORE_URL: where artifacts are written (file:///… or s3://…). Required. */
  readonly storeUrl: string;
  /** CSA2_CHUNK_TOKENS: tokens per artifact chunk. @defaultValue the engine's (4096) */
  readonly chunkTokens?: number;
  /** CSA2_PROGRESS_INTERVAL_MS: least time between two job.updateProgress calls of one job. @defaultValue 200 */
  readonly progressIntervalMs: number;
  /** CSA2_CANCEL_POLL_MS: how often a running prompt job checks its request's cancel key. @defaultValue 50 */
  readonly cancelPollMs: number;
}

export function loadEncoderConfig(env: Env = process.env): EncoderConfig {
  const chunkTokens = envOptionalInt(env, 'CSA2_CHUNK_TOKENS', { min: 1 });
  const chunkCacheBytes = envOptionalInt(env, 'CSA2_CHUNK_CACHE_BYTES', { min: 0 });
  const lockDurationMs = envInt(env, 'CSA2_LOCK_DURATION_MS', 30_000, { min: 1000 });
  return {
    redisUrl: envRedisUrl(env),
    modelDir: envString(env, 'CSA2_MODEL_DIR', 'a checkpoint directory with config.json and model.safetensors'),
    storeUrl: envString(env, 'CSA2_STORE_URL', 'file:///path or s3://bucket/prefix?endpoint=…'),
    concurrency: envInt(env, 'CSA2_PREFILL_CONCURRENCY', 1, { min: 1, max: 256 }),
    ...(chunkTokens !== undefined ? { chunkTokens } : {}),
    ...(chunkCacheBytes !== undefined ? { chunkCacheBytes } : {}),
    lockDurationMs,
    stalledIntervalMs: envStalledIntervalMs(env, 'CSA2_STALLED_INTERVAL_MS', lockDurationMs),
    threads: envThreads(env, 'CSA2_THREADS'),
    provider: envChoice(env, 'CSA2_PROVIDER', EXECUTION_PROVIDERS, 'cpu'),
    shutdownGraceMs: envInt(env, 'CSA2_SHUTDOWN_GRACE_MS', 20_000, { min: 0 }),
    progressIntervalMs: envInt(env, 'CSA2_PROGRESS_INTERVAL_MS', 200, { min: 0 }),
    cancelPollMs: envInt(env, 'CSA2_CANCEL_POLL_MS', 50, { min: 5, max: 10_000 }),
    logLevel: envChoice(env, 'CSA2_LOG_LEVEL', LOG_LEVELS, 'info'),
  };
}
