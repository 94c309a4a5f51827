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
import { EnvConfigError, envInt, envOptionalInt, envOptionalNumber, envOptionalString, type Env } from './env-config.js';
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
   * takes at once; they run in one batching engine (their steps share forward calls). Unset: sized
   * by the worker from its engine (see each service's config).
   */
  readonly concurrency?: number;
  /** How the engine batches: the CSA2_* scheduler variables (see `envEngineScheduler`). */
  readonly scheduler: EngineSchedulerSettings;
  /**
   * CSA2_LOCK_DURATION_MS: BullMQ job lock, renewed every lockRenewMs while the job runs; a dead
   * worker's job is picked up again once it expired, at the next stalled check: within
   * lockDurationMs + stalledIntervalMs of the death (see DEFAULT_STALLED_INTERVAL_MS below). @defaultValue 6000
   */
  readonly lockDurationMs: number;
  /**
   * CSA2_LOCK_RENEW_MS: how often a worker renews the locks of its running jobs; a live worker whose
   * event loop stalls for up to lockDurationMs − lockRenewMs keeps them. @defaultValue min(1000, lockDurationMs / 2)
   */
  readonly lockRenewMs: number;
  /**
   * CSA2_STALLED_INTERVAL_MS: how often the workers look for stalled jobs (one check per interval
   * across all workers of a queue); at most half the lock duration. @defaultValue min(1000, lockDurationMs / 2)
   */
  readonly stalledIntervalMs: number;
  /** CSA2_CHUNK_CACHE_BYTES: verified artifact chunks kept in memory (re-used prefixes). @defaultValue the engine's (256 MiB) */
  readonly chunkCacheBytes?: number;
  /**
   * CSA2_DOCUMENT_CACHE_BYTES (decoder): loaded documents kept for the questions on them, each held
   * once and read in place by every generation on it; 0 = off. @defaultValue the engine's (2 GiB)
   */
  readonly documentCacheBytes?: number;
  /**
   * CSA2_DOCUMENT_PREFAULT_BYTES (decoder): bytes of the document cache's memory faulted in at start,
   * so that the first documents load into pages the worker holds. @defaultValue 0
   */
  readonly documentPrefaultBytes?: number;
  /** CSA2_THREADS: onnxruntime intra-op threads, a number or 'auto'. @defaultValue 'auto' */
  readonly threads: number | 'auto';
  /**
   * CSA2_SCAN_THREADS: worker threads that take part of the long index scans (@csa2/core scan threads;
   * ~12 MB each), 0–64 or 'auto' (min(3, cores − 1), the node's cores). @defaultValue 'auto'
   */
  readonly scanThreads: number | 'auto';
  /** CSA2_PROVIDER: onnxruntime execution provider. @defaultValue 'cpu' */
  readonly provider: ExecutionProvider;
  /** CSA2_CUDA_DEVICE_ID: the CUDA device of a `cuda` worker. @defaultValue 0 */
  readonly cudaDeviceId?: number;
  /** CSA2_CUDA_TF32: 1 lets cuBLAS/cuDNN use TF32 for fp32 products (off by default: the reference numerics). @defaultValue false */
  readonly cudaTf32?: boolean;
  /** CSA2_CUDA_CPU_FALLBACK: refuse | allow a graph with nodes the CUDA provider cannot run (allowed ones are logged by name). @defaultValue 'refuse' */
  readonly cudaCpuFallback?: 'refuse' | 'allow';
  /** How encode chunks run (@csa2/core ModelOptions.encoder); absent: the provider's default (layers on the CPU, the graph on CUDA). */
  readonly encoder?: 'layers' | 'graph';
  /** CSA2_SHUTDOWN_GRACE_MS: on SIGTERM, how long the running jobs may take to finish before they are handed back. @defaultValue 20000 */
  readonly shutdownGraceMs: number;
  /** CSA2_LOG_LEVEL: debug | info | warn | error. @defaultValue 'info' */
  readonly logLevel: LogLevel;
  /** CSA2_HOST: interface of the worker's HTTP server (/healthz, /readyz, /metrics). @defaultValue '127.0.0.1' */
  readonly httpHost: string;
  /** CSA2_WORKER_HTTP_PORT: its port; 0 = any free one. @defaultValue WORKER_HTTP_PORTS of the role */
  readonly httpPort: number;
  /** CSA2_READY_TIMEOUT_MS: how long /readyz waits for Redis to answer a PING. @defaultValue 1000 */
  readonly readyTimeoutMs: number;
}

/** The engine scheduler's settings (@csa2/engine SchedulerPolicy); unset ones keep the engine's defaults. */
export interface EngineSchedulerSettings {
  /** CSA2_DECODE_BATCH_SEQUENCES: sequences decoding at once in one engine (the decode batch). @defaultValue 32 */
  readonly maxRunning?: number;
  /** CSA2_MAX_STEP_TOKENS: token rows one engine step may run, decode and prefill rows together. @defaultValue 512 */
  readonly maxStepTokens?: number;
  /** CSA2_PREFILL_CHUNK_TOKENS: rows of one prompt or document one step may prefill. @defaultValue 256 */
  readonly prefillChunkTokens?: number;
  /** CSA2_KV_BUDGET_BYTES: bytes the engine's admitted sequences may hold (packed cache, windows, ids). @defaultValue 4 GiB */
  readonly kvBudgetBytes?: number;
  /** CSA2_DECODE_LATENCY_FACTOR: a step mixing prefill rows into decoding may take this × a decode-only step. @defaultValue 2.5 */
  readonly decodeLatencyFactor?: number;
  /** CSA2_PREFILL_IDLE_CREDIT_MS: prefill time a tenant back from idle may run before it shares the steps with the others. @defaultValue 2000 */
  readonly prefillIdleCreditMs?: number;
}

/** Reads the CSA2_* scheduler variables (both engine workers use them). */
export function envEngineScheduler(env: Env): EngineSchedulerSettings {
  const fields = {
    maxRunning: envOptionalInt(env, 'CSA2_DECODE_BATCH_SEQUENCES', { min: 1, max: 4096 }),
    maxStepTokens: envOptionalInt(env, 'CSA2_MAX_STEP_TOKENS', { min: 1, max: 1 << 20 }),
    prefillChunkTokens: envOptionalInt(env, 'CSA2_PREFILL_CHUNK_TOKENS', { min: 1, max: 1 << 20 }),
    kvBudgetBytes: envOptionalInt(env, 'CSA2_KV_BUDGET_BYTES', { min: 1 << 20 }),
    decodeLatencyFactor: envOptionalNumber(env, 'CSA2_DECODE_LATENCY_FACTOR', { min: 1 }),
    prefillIdleCreditMs: envOptionalInt(env, 'CSA2_PREFILL_IDLE_CREDIT_MS', { min: 0, max: 3_600_000 }),
  };
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(fields)) if (v !== undefined) out[k] = v;
  return out as EngineSchedulerSettings;
}

/**
 * Default CSA2_WORKER_HTTP_PORT per role: different, so that an encoder and a decoder on one host
 * (`npm start`) do not collide; in containers (compose, Kubernetes) each has its own. Next to the
 * gateway's 8080 and clear of the common exporters' 9100-9250.
 */
export const WORKER_HTTP_PORTS = { encoder: 9301, decoder: 9302 } as const;

/**
 * How BullMQ recovers the job of a dead worker (its stalled-job check, moveStalledJobsToWait): the
 * job's lock was last renewed at most lockRenew before the death, so it expires at most lockDuration
 * after it; every check first moves the jobs it marked at the previous check whose lock is gone back
 * to the queue, then marks the active ones again (a renewal unmarks a live job; a marked job whose
 * lock still exists stays). A job is therefore back in the queue within lockDuration +
 * stalledInterval of the death, provided stalledInterval ≤ lockDuration / 2 (so that a check has
 * marked it before its lock expires). With BullMQ's own default (stalledInterval = lockDuration =
 * 30 s) it took up to three periods: 61–94 s measured.
 *
 * The defaults (a 6 s lock renewed every second, a check every second) put a dead worker's job back
 * within 7 s, and a live worker keeps its jobs through an event-loop stall of up to 5 s (the lock is
 * renewed from the worker's event loop, which inference never blocks: it runs in the engine
 * thread). Should a live job's lock lapse anyway, its second run is safe (stream appends refuse
 * duplicates, chunks are content-addressed). With the earlier 30 s lock renewed every 15 s, 20
 * streams whose decoder was killed finished 43 s after the kill; `npm run bench --
 * recovery` measures it.
 */
export const DEFAULT_STALLED_INTERVAL_MS = 1000;

/** CSA2_LOCK_DURATION_MS unset (see DEFAULT_STALLED_INTERVAL_MS). */
export const DEFAULT_LOCK_DURATION_MS = 6000;

/** CSA2_LOCK_RENEW_MS unset: min(this, lock / 2). */
export const DEFAULT_LOCK_RENEW_MS = 1000;

/** CSA2_LOCK_RENEW_MS against the lock duration: at least 100, at most half of it. */
export function envLockRenewMs(env: Env, name: string, lockDurationMs: number): number {
  const max = Math.floor(lockDurationMs / 2);
  const v = envInt(env, name, Math.min(DEFAULT_LOCK_RENEW_MS, max), { min: 100 });
  if (v > max)
    throw new EnvConfigError(name, `must be at most half of CSA2_LOCK_DURATION_MS (${max}), got ${v}: a lock renewed less often lapses at the first delay`);
  return v;
}

/** CSA2_LOCK_DURATION_MS: at least 1000 ms. @defaultValue DEFAULT_LOCK_DURATION_MS */
export function envLockDurationMs(env: Env, name: string): number {
  return envInt(env, name, DEFAULT_LOCK_DURATION_MS, { min: 1000 });
}

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
  if (v > max)
    throw new EnvConfigError(
      name,
      `must be at most half of CSA2_LOCK_DURATION_MS (${max}), got ${v}: a dead worker's job is then picked up again within their sum`,
    );
  return v;
}

/** A thread count: unset, blank or 'auto' → 'auto'; otherwise an integer in [1, 1024]. */
/** A scan-thread count: 0–64 or 'auto' (unset → 'auto'). */
export function envScanThreads(env: Env, name: string): number | 'auto' {
  const v = envOptionalString(env, name);
  return v === undefined || v === 'auto' ? 'auto' : envInt(env, name, 0, { min: 0, max: 64 });
}

export function envThreads(env: Env, name: string): number | 'auto' {
  const v = envOptionalString(env, name);
  return v === undefined || v === 'auto' ? 'auto' : envInt(env, name, 1, { min: 1, max: 1024 });
}
