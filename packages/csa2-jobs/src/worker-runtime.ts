/**
 * @module worker-runtime
 * The scaffolding both engine workers (encoder, decoder) share. Each service keeps only its queue,
 * its engine options, its processor and its names.
 *
 * - `startEngineWorker(spec)`: the engine (kept in a Restartable, so it is started again when its
 *   thread died; a model that cannot load fails start with its own error, not the first job), two
 *   Redis connections (one for the processor, one for the BullMQ Worker), and a BullMQ Worker on
 *   `spec.queue` with concurrency and locking from the config. `close()` stops taking jobs, lets the
 *   running ones finish within `shutdownGraceMs`, then aborts the rest (the processors hand them back
 *   to the queue), and closes the service's own resources, the engine and Redis, in that order.
 * - Every worker also serves /healthz (liveness), /readyz (engine loaded, Redis answering, taking
 *   jobs) and /metrics (worker-metrics) on CSA2_HOST:CSA2_WORKER_HTTP_PORT (worker-http), from before
 *   the engine loads until it closed; and every job runs inside a log context (log-line
 *   `withLogFields`) with its `reqId` (the x-request-id the gateway got), `requestId` and `jobId`, so
 *   every line logged for it names the request.
 * - `runWorkerProcess(spec)`: the process entry (`main.ts`): config from the environment (a bad value
 *   exits 2), start, and on SIGTERM/SIGINT `close()` and exit 0. A second signal exits at once (130);
 *   the queue's stalled-job recovery then re-runs whatever was interrupted. Any other error exits 1.
 */
import { DelayedError, Worker, type Job, type Processor } from 'bullmq';
import type { Redis } from 'ioredis';
import { EnvConfigError } from './env-config.js';
import { errorFields, withLogFields, type LogFields, type Logger } from './log-line.js';
import { ID_PATTERN, REQ_ID_PATTERN } from './payloads.js';
import { connectRedis } from './redis.js';
import { Restartable, StartFailedError, type Closable } from './restartable.js';
import type { WorkerConfig } from './worker-config.js';
import { startWorkerHttp, type ReadinessChecks, type WorkerHttpServer } from './worker-http.js';
import { createWorkerMetrics, type JobOutcome, type WorkerMetrics } from './worker-metrics.js';
import { registerEngineMetrics, type EngineSchedulerStats } from './engine-metrics.js';

/** What a worker's processor works with; `startEngineWorker` hands it to `spec.setup`. */
export interface EngineJobDeps<E> {
  /** A non-blocking connection for request streams and cancel keys. */
  readonly redis: Redis;
  /** The live engine (restarted when its thread died). */
  readonly engine: () => Promise<E>;
  /** @defaultValue silentLogger */
  readonly log?: Logger;
}

export interface EngineWorkerSpec<E extends Closable, R> {
  /** The worker in its log lines: '<name> started', '<name> closed' (e.g. 'decoder worker'). */
  readonly name: string;
  /** The BullMQ queue it takes jobs from. */
  readonly queue: string;
  readonly config: Pick<
    WorkerConfig,
    | 'redisUrl'
    | 'modelDir'
    | 'concurrency'
    | 'lockDurationMs'
    | 'lockRenewMs'
    | 'stalledIntervalMs'
    | 'shutdownGraceMs'
    | 'httpHost'
    | 'httpPort'
    | 'readyTimeoutMs'
  >;
  /** The `service` label of its metrics (e.g. 'decoder-worker'). @defaultValue `name` with '-' for spaces */
  readonly service?: string;
  readonly log: Logger;
  /** Starts an engine; called again whenever the last one's thread died. */
  readonly startEngine: () => Promise<E>;
  /** Fields for the 'engine ready' line logged after every engine (re)start (e.g. its warm-up time). */
  readonly describeEngine?: (engine: E) => Readonly<Record<string, unknown>>;
  /** Jobs taken at once when the config leaves the concurrency unset, from the started engine. @defaultValue 1 */
  readonly defaultConcurrency?: (engine: E) => number;
  /** The engine scheduler's stats, for the csa2_engine_* metrics (engine-metrics); none when absent. */
  readonly engineStats?: (engine: E) => Promise<EngineSchedulerStats>;
  /**
   * Builds the processor once the engine is up. `close`, when given, releases what `setup` opened:
   * it runs after the BullMQ Worker closed and before the engine closes; its failure is ignored.
   */
  readonly setup: (deps: Required<EngineJobDeps<E>>) => { readonly processor: Processor<unknown, R>; readonly close?: () => Promise<unknown> };
  /** More fields for the '<name> started' line, after queue, concurrency and modelDir. */
  readonly startedFields?: Readonly<Record<string, unknown>>;
}

export interface EngineWorker<E, R> {
  readonly worker: Worker<unknown, R>;
  /** The /healthz, /readyz, /metrics server (its port when CSA2_WORKER_HTTP_PORT is 0). */
  readonly http: WorkerHttpServer;
  readonly metrics: WorkerMetrics;
  /** The live engine (started again when its thread died). */
  engine(): Promise<E>;
  /** Engine (re)starts so far: 1 after start, +1 per restart after the thread died. */
  engineStarts(): number;
  /**
   * Stops taking jobs and lets the running ones finish; after `shutdownGraceMs` the ones still
   * running are aborted and handed back to the queue (another worker picks them up). Then closes
   * the engine and the Redis connections. Idempotent.
   */
  close(): Promise<void>;
}

/**
 * The log fields of a job (read from its raw payload, so a malformed one still gets them): `reqId`
 * (the x-request-id of the HTTP request behind it), `requestId` (the completion) and `jobId`.
 */
export function jobLogFields(job: Pick<Job<unknown, unknown>, 'id' | 'data'>): LogFields {
  const d = (typeof job.data === 'object' && job.data !== null ? job.data : {}) as { reqId?: unknown; requestId?: unknown };
  return {
    ...(typeof d.reqId === 'string' && REQ_ID_PATTERN.test(d.reqId) ? { reqId: d.reqId } : {}),
    ...(typeof d.requestId === 'string' && ID_PATTERN.test(d.requestId) ? { requestId: d.requestId } : {}),
    ...(job.id !== undefined ? { jobId: job.id } : {}),
  };
}

/** `bull:csa2-decode` → 'decode' (the queue label of the metrics, as the gateway's). */
const queueLabel = (queue: string): string => queue.replace(/^csa2-/, '');

/** The engine, the Redis connections and a BullMQ Worker on `spec.queue`, in this process. */
export async function startEngineWorker<E extends Closable, R>(spec: EngineWorkerSpec<E, R>): Promise<EngineWorker<E, R>> {
  const { config, log } = spec;
  const queue = queueLabel(spec.queue);
  const startEngine = async (): Promise<E> => {
    const e = await spec.startEngine();
    log('info', 'engine ready', { ...spec.describeEngine?.(e) });
    return e;
  };
  const engine = new Restartable(startEngine, (n) => log('warn', 'engine thread restarted', { starts: n }));
  const metrics = createWorkerMetrics({ service: spec.service ?? spec.name.replaceAll(' ', '-'), engineStarts: () => engine.starts });
  const engineStats = spec.engineStats;
  if (engineStats !== undefined) registerEngineMetrics(metrics.registry, async () => (engine.live !== null ? engineStats(engine.live) : null));
  let redis: Redis | null = null;
  let worker: Worker<unknown, R> | null = null;
  let closingStarted = false;
  const pingRedis = async (): Promise<string> => {
    if (redis === null) return 'starting';
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        redis.ping(),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error(`no answer within ${config.readyTimeoutMs} ms`)), config.readyTimeoutMs);
        }),
      ]);
      return 'ok';
    } catch (err) {
      return `unavailable: ${err instanceof Error ? err.message : String(err)}`;
    } finally {
      clearTimeout(timer);
    }
  };
  const readiness = async (): Promise<ReadinessChecks> => ({
    engine: engine.live !== null ? 'ok' : 'starting',
    redis: await pingRedis(),
    worker: closingStarted ? 'closing' : worker?.isRunning() === true ? 'ok' : 'starting',
  });
  // up before the engine loads: liveness answers during a long load, readiness says why not yet
  const http = await startWorkerHttp({ host: config.httpHost, port: config.httpPort, registry: metrics.registry, readiness });
  log('info', 'serving /healthz, /readyz and /metrics', { url: http.url });
  // a model that cannot load fails start (with its own error), not the first job
  try {
    await engine.get();
  } catch (err) {
    await http.close();
    throw err instanceof StartFailedError ? err.cause : err;
  }
  redis = connectRedis(config.redisUrl);
  const workerConnection = connectRedis(config.redisUrl);
  redis.on('error', (err) => log('warn', 'redis', errorFields(err)));
  workerConnection.on('error', (err) => log('warn', 'redis (worker)', errorFields(err)));

  const own = spec.setup({ redis, engine: () => engine.get(), log });
  const concurrency = config.concurrency ?? spec.defaultConcurrency?.(await engine.get()) ?? 1;
  const processor: Processor<unknown, R> = (job, token, signal) =>
    withLogFields(jobLogFields(job), async () => {
      const t0 = performance.now();
      let outcome: JobOutcome = 'failed';
      metrics.activeJobs.inc({ queue });
      try {
        const result = await own.processor(job, token, signal);
        outcome = 'completed';
        return result;
      } catch (err) {
        if (err instanceof DelayedError) outcome = 'handed_back';
        throw err;
      } finally {
        metrics.activeJobs.dec({ queue });
        metrics.jobs.inc({ queue, outcome });
        metrics.jobDuration.observe({ queue, outcome }, (performance.now() - t0) / 1000);
      }
    });
  const bullWorker = new Worker<unknown, R>(spec.queue, processor, {
    connection: workerConnection,
    concurrency,
    lockDuration: config.lockDurationMs,
    lockRenewTime: config.lockRenewMs,
    stalledInterval: config.stalledIntervalMs,
    // a worker killed mid-job (OOM, SIGKILL, node loss) makes its job stall; allow two such losses
    maxStalledCount: 2,
  });
  worker = bullWorker;
  bullWorker.on('error', (err) => log('error', 'worker error', errorFields(err)));
  bullWorker.on('failed', (job, err) => log('debug', 'job failed', { ...(job !== undefined ? jobLogFields(job) : {}), ...errorFields(err) }));
  await bullWorker.waitUntilReady();
  log('info', `${spec.name} started`, { queue: spec.queue, concurrency, modelDir: config.modelDir, http: http.url, ...spec.startedFields });

  const ownRedis = redis;
  let closing: Promise<void> | null = null;
  return {
    worker: bullWorker,
    http,
    metrics,
    engine: () => engine.get(),
    engineStarts: () => engine.starts,
    close() {
      closingStarted = true;
      closing ??= (async () => {
        log('info', 'closing: no new jobs; waiting for running ones', { graceMs: config.shutdownGraceMs });
        const grace = setTimeout(() => {
          log('warn', 'grace period over: handing running jobs back');
          bullWorker.cancelAllJobs('shutdown');
        }, config.shutdownGraceMs);
        try {
          await bullWorker.close();
        } finally {
          clearTimeout(grace);
          if (own.close !== undefined) await own.close().catch(() => undefined);
          await engine.close().catch((err: unknown) => log('error', 'engine close failed', errorFields(err)));
          await ownRedis.quit().catch(() => ownRedis.disconnect());
          await workerConnection.quit().catch(() => workerConnection.disconnect());
          await http.close();
          log('info', `${spec.name} closed`);
        }
      })();
      return closing;
    },
  };
}

export interface WorkerProcessSpec<C> {
  /** Prefix of the process's own stderr lines ('decoder-worker: SIGTERM: shutting down'). */
  readonly name: string;
  /** Reads the config from the environment; an EnvConfigError is a bad configuration (exit 2). */
  readonly loadConfig: () => C;
  readonly start: (config: C) => Promise<{ close(): Promise<void> }>;
}

/**
 * Codes (@csa2/core's Csa2Error) of a start that no retry fixes — a missing execution provider, a
 * checkpoint or config the model refuses: reported by their message alone, exit code 2 as a bad
 * configuration.
 */
const CANNOT_START: ReadonlySet<string> = new Set(['config-invalid', 'unsupported-feature', 'checkpoint-invalid']);

/** Runs a worker process (see the module doc) and exits with its code. */
export function runWorkerProcess<C>(spec: WorkerProcessSpec<C>): void {
  workerProcess(spec).then(
    (code) => process.exit(code),
    (err: unknown) => {
      // a deployment that cannot work (a missing execution provider, a bad checkpoint): its message, no stack
      const code = err instanceof Error ? (err as Error & { code?: unknown }).code : undefined;
      if (err instanceof Error && typeof code === 'string' && CANNOT_START.has(code)) {
        process.stderr.write(`${spec.name}: cannot start: ${err.message}\n`);
        process.exit(2);
      }
      process.stderr.write(`${spec.name}: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exit(1);
    },
  );
}

async function workerProcess<C>(spec: WorkerProcessSpec<C>): Promise<number> {
  let config: C;
  try {
    config = spec.loadConfig();
  } catch (err) {
    if (err instanceof EnvConfigError) {
      process.stderr.write(`${spec.name}: bad configuration: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  const worker = await spec.start(config);
  await new Promise<void>((resolve) => {
    const onSignal = (sig: NodeJS.Signals) => {
      process.stderr.write(`${spec.name}: ${sig}: shutting down\n`);
      process.once(sig, () => process.exit(130));
      resolve();
    };
    process.once('SIGTERM', onSignal);
    process.once('SIGINT', onSignal);
  });
  await worker.close();
  return 0;
}
