/**
 * @module config
 * The decoder worker's settings, read once from the environment (see README.md for the table): the
 * engine workers' common ones (WorkerConfig, @csa2/jobs worker-config) plus the decoder's own.
 * A bad value fails start with an EnvConfigError naming the variable.
 */
import { EXECUTION_PROVIDERS, LOG_LEVELS, envChoice, envInt, envOptionalInt, envOptionalString, envRedisUrl, envStalledIntervalMs, envString, envThreads, type Env, type WorkerConfig } from '@csa2/jobs';

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
  const lockDurationMs = envInt(env, 'CSA2_LOCK_DURATION_MS', 30_000, { min: 1000 });
  return {
    redisUrl: envRedisUrl(env),
    modelDir: envString(env, 'CSA2_MODEL_DIR', 'a checkpoint directory with config.json and model.safetensors'),
    ...(storeUrl !== undefined ? { storeUrl } : {}),
    concurrency: envInt(env, 'CSA2_DECODE_CONCURRENCY', 1, { min: 1, max: 256 }),
    lockDurationMs,
    stalledIntervalMs: envStalledIntervalMs(env, 'CSA2_STALLED_INTERVAL_MS', lockDurationMs),
    ...(replayTokens !== undefined ? { replayTokens } : {}),
    ...(chunkCacheBytes !== undefined ? { chunkCacheBytes } : {}),
    threads: envThreads(env, 'CSA2_THREADS'),
    provider: envChoice(env, 'CSA2_PROVIDER', EXECUTION_PROVIDERS, 'cpu'),
    shutdownGraceMs: envInt(env, 'CSA2_SHUTDOWN_GRACE_MS', 20_000, { min: 0 }),
    cancelPollMs: envInt(env, 'CSA2_CANCEL_POLL_MS', 50, { min: 5, max: 10_000 }),
    logLevel: envChoice(env, 'CSA2_LOG_LEVEL', LOG_LEVELS, 'info'),
  };
}
