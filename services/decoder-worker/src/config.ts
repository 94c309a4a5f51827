/**
 * @module config
 * The decoder worker's settings, read once from the environment (see README.md for the table).
 * A bad value fails start with an EnvConfigError naming the variable.
 */
import { envChoice, envInt, envOptionalInt, envOptionalString, envRedisUrl, envString, type Env } from '@csa2/jobs';

export interface DecoderConfig {
  /** REDIS_URL: the queues, streams and cancel flags. */
  readonly redisUrl: string;
  /** CSA2_MODEL_DIR: checkpoint directory (config.json + model.safetensors). */
  readonly modelDir: string;
  /** CSA2_STORE_URL: artifact store (file:///… or s3://…); needed for jobs that name a document. */
  readonly storeUrl?: string;
  /** CSA2_DECODE_CONCURRENCY: jobs one worker runs at once (they share one engine thread). @defaultValue 1 */
  readonly concurrency: number;
  /** CSA2_LOCK_DURATION_MS: BullMQ job lock; a dead worker's job is picked up again after it expires. @defaultValue 30000 */
  readonly lockDurationMs: number;
  /** CSA2_STALLED_INTERVAL_MS: how often this worker looks for stalled jobs. @defaultValue 30000 */
  readonly stalledIntervalMs: number;
  /** CSA2_REPLAY_TOKENS: bounded replay length for jobs that leave it null. @defaultValue the engine's (128) */
  readonly replayTokens?: number;
  /** CSA2_CHUNK_CACHE_BYTES: verified artifact chunks kept in memory. @defaultValue the engine's (256 MiB) */
  readonly chunkCacheBytes?: number;
  /** CSA2_THREADS: onnxruntime intra-op threads, a number or 'auto'. @defaultValue 'auto' */
  readonly threads: number | 'auto';
  /** CSA2_PROVIDER: onnxruntime execution provider. @defaultValue 'cpu' */
  readonly provider: 'cpu' | 'cuda';
  /** CSA2_SHUTDOWN_GRACE_MS: on SIGTERM, how long the running jobs may take to finish before they are handed back. @defaultValue 20000 */
  readonly shutdownGraceMs: number;
  /** CSA2_CANCEL_POLL_MS: how often a running job checks its cancel key. @defaultValue 50 */
  readonly cancelPollMs: number;
  /** CSA2_LOG_LEVEL: debug | info | warn | error. @defaultValue 'info' */
  readonly logLevel: 'debug' | 'info' | 'warn' | 'error';
}

export function loadDecoderConfig(env: Env = process.env): DecoderConfig {
  const storeUrl = envOptionalString(env, 'CSA2_STORE_URL');
  const replayTokens = envOptionalInt(env, 'CSA2_REPLAY_TOKENS', { min: 1 });
  const chunkCacheBytes = envOptionalInt(env, 'CSA2_CHUNK_CACHE_BYTES', { min: 0 });
  const threads = envOptionalString(env, 'CSA2_THREADS');
  return {
    redisUrl: envRedisUrl(env),
    modelDir: envString(env, 'CSA2_MODEL_DIR', 'a checkpoint directory with config.json and model.safetensors'),
    ...(storeUrl !== undefined ? { storeUrl } : {}),
    concurrency: envInt(env, 'CSA2_DECODE_CONCURRENCY', 1, { min: 1, max: 256 }),
    lockDurationMs: envInt(env, 'CSA2_LOCK_DURATION_MS', 30_000, { min: 1000 }),
    stalledIntervalMs: envInt(env, 'CSA2_STALLED_INTERVAL_MS', 30_000, { min: 1000 }),
    ...(replayTokens !== undefined ? { replayTokens } : {}),
    ...(chunkCacheBytes !== undefined ? { chunkCacheBytes } : {}),
    threads: threads === undefined || threads === 'auto' ? 'auto' : envInt(env, 'CSA2_THREADS', 1, { min: 1, max: 1024 }),
    provider: envChoice(env, 'CSA2_PROVIDER', ['cpu', 'cuda'], 'cpu'),
    shutdownGraceMs: envInt(env, 'CSA2_SHUTDOWN_GRACE_MS', 20_000, { min: 0 }),
    cancelPollMs: envInt(env, 'CSA2_CANCEL_POLL_MS', 50, { min: 5, max: 10_000 }),
    logLevel: envChoice(env, 'CSA2_LOG_LEVEL', ['debug', 'info', 'warn', 'error'], 'info'),
  };
}
