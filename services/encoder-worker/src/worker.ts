/**
 * @module worker
 * `startEncoderWorker(config)`: the engine thread (with the artifact store) plus a BullMQ Worker on
 * the prefill queue, in this process. Used by main.ts, by tests and by any single-process launcher.
 *
 * @example
 *   const w = await startEncoderWorker(loadEncoderConfig());
 *   process.once('SIGTERM', () => void w.close());
 */
import { EngineHost, type EngineOptions } from '@csa2/engine';
import {
  DECODE_QUEUE,
  PREFILL_QUEUE,
  Queue,
  Restartable,
  StartFailedError,
  Worker,
  connectRedis,
  errorFields,
  jsonLogger,
  type Logger,
  type PrefillResult,
} from '@csa2/jobs';
import type { EncoderConfig } from './config.js';
import { createEncodeProcessor } from './processor.js';

export interface EncoderWorker {
  readonly worker: Worker<unknown, PrefillResult>;
  /** The live engine (started again when its thread died). */
  engine(): Promise<EngineHost>;
  /** Engine (re)starts so far: 1 after start, +1 per restart after the thread died. */
  engineStarts(): number;
  /**
   * Stops taking jobs and lets the running ones finish; after `shutdownGraceMs` the ones still
   * running are aborted and handed back to the queue. Then closes the engine and the Redis
   * connections. Idempotent.
   */
  close(): Promise<void>;
}

export interface EncoderWorkerOptions {
  /** @defaultValue a JSON-lines logger on stderr at config.logLevel */
  readonly log?: Logger;
}

export function encoderEngineOptions(config: EncoderConfig): EngineOptions {
  return {
    modelDir: config.modelDir,
    runtime: { intraOpThreads: config.threads, executionProvider: config.provider },
    store: config.storeUrl,
    ...(config.chunkTokens !== undefined ? { chunkTokens: config.chunkTokens } : {}),
    ...(config.chunkCacheBytes !== undefined ? { chunkCacheBytes: config.chunkCacheBytes } : {}),
  };
}

export async function startEncoderWorker(config: EncoderConfig, options: EncoderWorkerOptions = {}): Promise<EncoderWorker> {
  const log = options.log ?? jsonLogger('encoder-worker', config.logLevel);
  const engine = new Restartable(
    () => EngineHost.start(encoderEngineOptions(config)),
    (n) => log('warn', 'engine thread restarted', { starts: n }),
  );
  // a model that cannot load fails start (with its own error), not the first job
  await engine.get().catch((err: unknown) => {
    throw err instanceof StartFailedError ? err.cause : err;
  });
  const redis = connectRedis(config.redisUrl);
  const workerConnection = connectRedis(config.redisUrl);
  redis.on('error', (err) => log('warn', 'redis', errorFields(err)));
  workerConnection.on('error', (err) => log('warn', 'redis (worker)', errorFields(err)));
  const decodeQueue = new Queue(DECODE_QUEUE, { connection: redis });

  const processor = createEncodeProcessor({
    redis,
    decodeQueue,
    engine: () => engine.get(),
    progressIntervalMs: config.progressIntervalMs,
    log,
    ...(config.chunkTokens !== undefined ? { chunkTokens: config.chunkTokens } : {}),
  });
  const worker = new Worker<unknown, PrefillResult>(PREFILL_QUEUE, processor, {
    connection: workerConnection,
    concurrency: config.concurrency,
    lockDuration: config.lockDurationMs,
    stalledInterval: config.stalledIntervalMs,
    // a worker killed mid-job (OOM, SIGKILL, node loss) makes its job stall; allow two such losses
    maxStalledCount: 2,
  });
  worker.on('error', (err) => log('error', 'worker error', errorFields(err)));
  worker.on('failed', (job, err) => log('debug', 'job failed', { jobId: job?.id, ...errorFields(err) }));
  await worker.waitUntilReady();
  log('info', 'encoder worker started', { queue: PREFILL_QUEUE, concurrency: config.concurrency, modelDir: config.modelDir, store: config.storeUrl });

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
          await decodeQueue.close().catch(() => undefined);
          await engine.close().catch((err: unknown) => log('error', 'engine close failed', errorFields(err)));
          await redis.quit().catch(() => redis.disconnect());
          await workerConnection.quit().catch(() => workerConnection.disconnect());
          log('info', 'encoder worker closed');
        }
      })();
      return closing;
    },
  };
}
