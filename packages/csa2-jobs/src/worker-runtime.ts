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
 * - `runWorkerProcess(spec)`: the process entry (`main.ts`): config from the environment (a bad value
 *   exits 2), start, and on SIGTERM/SIGINT `close()` and exit 0. A second signal exits at once (130);
 *   the queue's stalled-job recovery then re-runs whatever was interrupted. Any other error exits 1.
 */
import { Worker, type Processor } from 'bullmq';
import type { Redis } from 'ioredis';
import { EnvConfigError } from './env-config.js';
import { errorFields, type Logger } from './log-line.js';
import { connectRedis } from './redis.js';
import { Restartable, StartFailedError, type Closable } from './restartable.js';
import type { WorkerConfig } from './worker-config.js';

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
  readonly config: Pick<WorkerConfig, 'redisUrl' | 'modelDir' | 'concurrency' | 'lockDurationMs' | 'stalledIntervalMs' | 'shutdownGraceMs'>;
  readonly log: Logger;
  /** Starts an engine; called again whenever the last one's thread died. */
  readonly startEngine: () => Promise<E>;
  /** Fields for the 'engine ready' line logged after every engine (re)start (e.g. its warm-up time). */
  readonly describeEngine?: (engine: E) => Readonly<Record<string, unknown>>;
  /** Jobs taken at once when the config leaves the concurrency unset, from the started engine. @defaultValue 1 */
  readonly defaultConcurrency?: (engine: E) => number;
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

/** The engine, the Redis connections and a BullMQ Worker on `spec.queue`, in this process. */
export async function startEngineWorker<E extends Closable, R>(spec: EngineWorkerSpec<E, R>): Promise<EngineWorker<E, R>> {
  const { config, log } = spec;
  const startEngine = async (): Promise<E> => {
    const e = await spec.startEngine();
    log('info', 'engine ready', { ...spec.describeEngine?.(e) });
    return e;
  };
  const engine = new Restartable(startEngine, (n) => log('warn', 'engine thread restarted', { starts: n }));
  // a model that cannot load fails start (with its own error), not the first job
  await engine.get().catch((err: unknown) => {
    throw err instanceof StartFailedError ? err.cause : err;
  });
  const redis = connectRedis(config.redisUrl);
  const workerConnection = connectRedis(config.redisUrl);
  redis.on('error', (err) => log('warn', 'redis', errorFields(err)));
  workerConnection.on('error', (err) => log('warn', 'redis (worker)', errorFields(err)));

  const own = spec.setup({ redis, engine: () => engine.get(), log });
  const concurrency = config.concurrency ?? spec.defaultConcurrency?.(await engine.get()) ?? 1;
  const worker = new Worker<unknown, R>(spec.queue, own.processor, {
    connection: workerConnection,
    concurrency,
    lockDuration: config.lockDurationMs,
    stalledInterval: config.stalledIntervalMs,
    // a worker killed mid-job (OOM, SIGKILL, node loss) makes its job stall; allow two such losses
    maxStalledCount: 2,
  });
  worker.on('error', (err) => log('error', 'worker error', errorFields(err)));
  worker.on('failed', (job, err) => log('debug', 'job failed', { jobId: job?.id, ...errorFields(err) }));
  await worker.waitUntilReady();
  log('info', `${spec.name} started`, { queue: spec.queue, concurrency, modelDir: config.modelDir, ...spec.startedFields });

  let closing: Promise<void> | null = null;
  return {
    worker,
    engine: () => engine.get(),
    engineStarts: () => engine.starts,
    close() {
      closing ??= (async () => {
        log('info', 'closing: no new jobs; waiting for running ones', { graceMs: config.shutdownGraceMs });
        const grace = setTimeout(() => {
          log('warn', 'grace period over: handing running jobs back');
          worker.cancelAllJobs('shutdown');
        }, config.shutdownGraceMs);
        try {
          await worker.close();
        } finally {
          clearTimeout(grace);
          if (own.close !== undefined) await own.close().catch(() => undefined);
          await engine.close().catch((err: unknown) => log('error', 'engine close failed', errorFields(err)));
          await redis.quit().catch(() => redis.disconnect());
          await workerConnection.quit().catch(() => workerConnection.disconnect());
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

/** Runs a worker process (see the module doc) and exits with its code. */
export function runWorkerProcess<C>(spec: WorkerProcessSpec<C>): void {
  workerProcess(spec).then(
    (code) => process.exit(code),
    (err: unknown) => {
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
