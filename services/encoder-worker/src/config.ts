/**
 * @module config
 * The encoder worker's settings, read once from the environment (see README.md for the table): the
 * engine workers' common ones (WorkerConfig, @csa2/jobs worker-config) plus the encoder's own.
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
  envOptionalChoice,
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

/** Prefill jobs one encoder takes at once by default (their chunks interleave in its engine, time-fairly across tenants). */
export const DEFAULT_PREFILL_CONCURRENCY = 4;

/** Slots past CSA2_PREFILL_CONCURRENCY that only interactive prompts and starved tenants' documents take (slots.ts). */
export const DEFAULT_PREFILL_RESERVED_SLOTS = 2;

/**
 * CSA2_PREFILL_CONCURRENCY unset: min(DEFAULT_PREFILL_CONCURRENCY, what the engine's KV budget holds at
 * max_seq_len) jobs at once.
 */
export interface EncoderConfig extends WorkerConfig {
  /** CSA2_STORE_URL: where artifacts are written (file:///… or s3://…). Required. */
  readonly storeUrl: string;
  /** CSA2_CHUNK_TOKENS: tokens per artifact chunk. @defaultValue the engine's (4096) */
  readonly chunkTokens?: number;
  /** CSA2_ENCODER_ROWS: rows of one encode run (@csa2/engine EngineOptions.encoderRows). @defaultValue the engine's (4096 on CUDA) */
  readonly encoderRows?: number;
  /** CSA2_PROGRESS_INTERVAL_MS: least time between two job.updateProgress calls of one job. @defaultValue 200 */
  readonly progressIntervalMs: number;
  /** CSA2_CANCEL_POLL_MS: how often a running prompt job checks its request's cancel key. @defaultValue 50 */
  readonly cancelPollMs: number;
  /**
   * CSA2_PREFILL_RESERVED_SLOTS: jobs taken past the concurrency, only for an interactive prompt or a
   * document of a tenant that runs none here, when it is next in the queue (slots.ts); 0 = none. @defaultValue 2
   */
  readonly reservedSlots: number;
  /** CSA2_PREFILL_SLOT_POLL_MS: how often the queue's next job is looked at while the base slots are full. @defaultValue 100 */
  readonly slotPollMs: number;
}

export function loadEncoderConfig(env: Env = process.env): EncoderConfig {
  const chunkTokens = envOptionalInt(env, 'CSA2_CHUNK_TOKENS', { min: 1 });
  const chunkCacheBytes = envOptionalInt(env, 'CSA2_CHUNK_CACHE_BYTES', { min: 0 });
  const lockDurationMs = envLockDurationMs(env, 'CSA2_LOCK_DURATION_MS');
  return {
    redisUrl: envRedisUrl(env),
    modelDir: envString(env, 'CSA2_MODEL_DIR', 'a checkpoint directory with config.json and model.safetensors'),
    storeUrl: envString(env, 'CSA2_STORE_URL', 'file:///path or s3://bucket/prefix?endpoint=…'),
    ...optional('concurrency', envOptionalInt(env, 'CSA2_PREFILL_CONCURRENCY', { min: 1, max: 4096 })),
    scheduler: envEngineScheduler(env),
    ...(chunkTokens !== undefined ? { chunkTokens } : {}),
    ...(chunkCacheBytes !== undefined ? { chunkCacheBytes } : {}),
    lockDurationMs,
    lockRenewMs: envLockRenewMs(env, 'CSA2_LOCK_RENEW_MS', lockDurationMs),
    stalledIntervalMs: envStalledIntervalMs(env, 'CSA2_STALLED_INTERVAL_MS', lockDurationMs),
    threads: envThreads(env, 'CSA2_THREADS'),
    scanThreads: envScanThreads(env, 'CSA2_SCAN_THREADS'),
    provider: envChoice(env, 'CSA2_PROVIDER', EXECUTION_PROVIDERS, 'cpu'),
    cudaDeviceId: envInt(env, 'CSA2_CUDA_DEVICE_ID', 0, { min: 0, max: 1023 }),
    cudaTf32: envChoice(env, 'CSA2_CUDA_TF32', ['0', '1'] as const, '0') === '1',
    cudaCpuFallback: envChoice(env, 'CSA2_CUDA_CPU_FALLBACK', ['refuse', 'allow'] as const, 'refuse'),
    ...optional('encoder', envOptionalChoice(env, 'CSA2_ENCODER', ['layers', 'graph'] as const)),
    ...optional('encoderRows', envOptionalInt(env, 'CSA2_ENCODER_ROWS', { min: 16, max: 1 << 20 })),
    shutdownGraceMs: envInt(env, 'CSA2_SHUTDOWN_GRACE_MS', 20_000, { min: 0 }),
    progressIntervalMs: envInt(env, 'CSA2_PROGRESS_INTERVAL_MS', 200, { min: 0 }),
    cancelPollMs: envInt(env, 'CSA2_CANCEL_POLL_MS', 50, { min: 5, max: 10_000 }),
    reservedSlots: envInt(env, 'CSA2_PREFILL_RESERVED_SLOTS', DEFAULT_PREFILL_RESERVED_SLOTS, { min: 0, max: 64 }),
    slotPollMs: envInt(env, 'CSA2_PREFILL_SLOT_POLL_MS', 100, { min: 10, max: 10_000 }),
    logLevel: envChoice(env, 'CSA2_LOG_LEVEL', LOG_LEVELS, 'info'),
    httpHost: envOptionalString(env, 'CSA2_HOST') ?? '127.0.0.1',
    httpPort: envInt(env, 'CSA2_WORKER_HTTP_PORT', WORKER_HTTP_PORTS.encoder, { min: 0, max: 65535 }),
    readyTimeoutMs: envInt(env, 'CSA2_READY_TIMEOUT_MS', 1000, { min: 10, max: 60_000 }),
  };
}
