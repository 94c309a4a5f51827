/**
 * @module worker-config
 * The settings both engine workers (encoder, decoder) share, with the same variables, bounds and
 * defaults: Redis, the checkpoint, how many jobs run at once, BullMQ locking, the onnxruntime
 * runtime, the shutdown grace period and the log level.
 *
 * Each service's `config.ts` extends `WorkerConfig` with its own settings and still reads every
 * variable itself (with `env*(env, 'NAME', …)`): that file is the one list of what a service reads,
 * which its README table and the infra tests are checked against.
 */
import { EnvConfigError, envInt, envOptionalString, type Env } from './env-config.js';
import type { LogLevel } from './log-line.js';

/** onnxruntime execution providers a worker can run on (CSA2_PROVIDER). */
export const EXECUTION_PROVIDERS = ['cpu', 'cuda'] as const;
export type ExecutionProvider = (typeof EXECUTION_PROVIDERS)[number];

export interface WorkerConfig {
  /** REDIS_URL: the queues, request streams and cancel flags. */
  readonly redisUrl: string;
  /** CSA2_MODEL_DIR: checkpoint directory (config.json + model.safetensors). */
  readonly modelDir: string;
  /**
   * The service's own variable (CSA2_DECODE_CONCURRENCY, CSA2_PREFILL_CONCURRENCY): jobs one worker
   * runs at once (they share one engine thread). @defaultValue 1
   */
  readonly concurrency: number;
  /**
   * CSA2_LOCK_DURATION_MS: BullMQ job lock, renewed every half of it while the job runs; a dead
   * worker's job is picked up again once it expired, at the next stalled check: within
   * lockDurationMs + stalledIntervalMs of the death (see STALLED_RECOVERY below). @defaultValue 30000
   */
  readonly lockDurationMs: number;
  /**
   * CSA2_STALLED_INTERVAL_MS: how often the workers look for stalled jobs (one check per interval
   * across all workers of a queue); at most half the lock duration. @defaultValue min(5000, lockDurationMs / 2)
   */
  readonly stalledIntervalMs: number;
  /** CSA2_CHUNK_CACHE_BYTES: verified artifact chunks kept in memory (re-used prefixes). @defaultValue the engine's (256 MiB) */
  readonly chunkCacheBytes?: number;
  /** CSA2_THREADS: onnxruntime intra-op threads, a number or 'auto'. @defaultValue 'auto' */
  readonly threads: number | 'auto';
  /** CSA2_PROVIDER: onnxruntime execution provider. @defaultValue 'cpu' */
  readonly provider: ExecutionProvider;
  /** CSA2_SHUTDOWN_GRACE_MS: on SIGTERM, how long the running jobs may take to finish before they are handed back. @defaultValue 20000 */
  readonly shutdownGraceMs: number;
  /** CSA2_LOG_LEVEL: debug | info | warn | error. @defaultValue 'info' */
  readonly logLevel: LogLevel;
}

/**
 * How BullMQ recovers the job of a dead worker (its stalled-job check, moveStalledJobsToWait): the
 * job's lock was last renewed at most lockDuration / 2 before the death, so it expires between
 * lockDuration / 2 and lockDuration after it; every check first moves the jobs it marked at the
 * previous check whose lock is gone back to the queue, then marks the active ones again (a renewal
 * unmarks a live job). A job is therefore back in the queue within lockDuration + stalledInterval
 * of the death, provided stalledInterval ≤ lockDuration / 2 (so that a check has marked it before
 * its lock expires). With BullMQ's own default (stalledInterval = lockDuration = 30 s) it took up to
 * three periods: 61–94 s measured.
 */
export const DEFAULT_STALLED_INTERVAL_MS = 5000;

/** The longest time from a worker's death to its job back in the queue, for the given settings. */
export function stalledRecoveryBoundMs(config: Pick<WorkerConfig, 'lockDurationMs' | 'stalledIntervalMs'>): number {
  return config.lockDurationMs + config.stalledIntervalMs;
}

/**
 * CSA2_STALLED_INTERVAL_MS against the lock duration: unset → min(DEFAULT_STALLED_INTERVAL_MS,
 * lockDurationMs / 2); at least 100 and at most lockDurationMs / 2 (a longer interval can miss a dead
 * worker's job for a whole extra period).
 */
export function envStalledIntervalMs(env: Env, name: string, lockDurationMs: number): number {
  const max = Math.floor(lockDurationMs / 2);
  const v = envInt(env, name, Math.min(DEFAULT_STALLED_INTERVAL_MS, max), { min: 100 });
  if (v > max) throw new EnvConfigError(name, `must be at most half of CSA2_LOCK_DURATION_MS (${max}), got ${v}: a dead worker's job is then picked up again within their sum`);
  return v;
}

/** A thread count: unset, blank or 'auto' → 'auto'; otherwise an integer in [1, 1024]. */
export function envThreads(env: Env, name: string): number | 'auto' {
  const v = envOptionalString(env, name);
  return v === undefined || v === 'auto' ? 'auto' : envInt(env, name, 1, { min: 1, max: 1024 });
}
