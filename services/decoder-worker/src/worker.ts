/**
 * @module worker
 * `startDecoderWorker(config)`: the engine thread plus a BullMQ Worker on the decode queue, in this
 * process. Used by main.ts, by tests and by any single-process launcher.
 *
 * @example
 *   const w = await startDecoderWorker(loadDecoderConfig());
 *   process.once('SIGTERM', () => void w.close());
 */
import { EngineHost, type EngineOptions } from '@csa2/engine';
import {
  DECODE_QUEUE,
  Restartable,
  StartFailedError,
  Worker,
  connectRedis,
  errorFields,
  jsonLogger,
  type DecodeResult,
  type Logger,
} from '@csa2/jobs';
import type { DecoderConfig } from './config.js';
import { createDecodeProcessor } from './processor.js';

export interface DecoderWorker {
  readonly worker: Worker<unknown, DecodeResult>;
  /** The live engine (started again when its thread died). */
  engine(): Promise<EngineHost>;
  /** Engine (re)starts so far: 1 after start, +1 per restart after the thread died. */
  engineStarts(): number;
  /**
   * Stops taking jobs and lets the running ones finish; after `shutdownGraceMs` the ones still
   * running are aborted and handed back to the queue (another worker picks them up). Then closes
   * the engine and the Redis connections. Idempotent.
   */
  close(): Promise<void>;
}

export interface DecoderWorkerOptions {
  /** @defaultValue a JSON-lines logger on stderr at config.logLevel */
  readonly log?: Logger;
}

export function decoderEngineOptions(config: DecoderConfig): EngineOptions {
  return {
    modelDir: config.modelDir,
    runtime: { intraOpThreads: config.threads, executionProvider: config.provider },
    ...(config.storeUrl !== undefined ? { store: config.storeUrl } : {}),
    ...(config.chunkCacheBytes !== undefined ? { chunkCacheBytes: config.chunkCacheBytes } : {}),
  };
}

export async function startDecoderWorker(config: DecoderConfig, options: DecoderWorkerOptions = {}): Promise<DecoderWorker> {
  const log = options.log ?? jsonLogger('decoder-worker', config.logLevel);
  const engine = new Restartable(
    () => EngineHost.start(decoderEngineOptions(config)),
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

  const processor = createDecodeProcessor({
    redis,
    engine: () => engine.get(),
    cancelPollMs: config.cancelPollMs,
    log,
    ...(config.replayTokens !== undefined ? { replayTokens: config.replayTokens } : {}),
  });
  const worker = new Worker<unknown, DecodeResult>(DECODE_QUEUE, processor, {
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
  log('info', 'decoder worker started', { queue: DECODE_QUEUE, concurrency: config.concurrency, modelDir: config.modelDir });

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
          await engine.close().catch((err: unknown) => log('error', 'engine close failed', errorFields(err)));
          await redis.quit().catch(() => redis.disconnect());
          await workerConnection.quit().catch(() => workerConnection.disconnect());
          log('info', 'decoder worker closed');
        }
      })();
      return closing;
    },
  };
}
