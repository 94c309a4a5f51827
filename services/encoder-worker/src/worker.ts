/**
 * @module worker
 * `startEncoderWorker(config)`: the engine thread (with the artifact store) plus a BullMQ Worker on
 * the prefill queue, in this process (`startEngineWorker` of @csa2/jobs worker-runtime with the
 * encoder's engine options and processor; the processor's decode queue is the encoder's own extra,
 * closed with it). Used by main.ts, by tests and by any single-process launcher.
 *
 * @example
 *   const w = await startEncoderWorker(loadEncoderConfig());
 *   process.once('SIGTERM', () => void w.close());
 */
import { openStore } from '@csa2/artifacts';
import { EngineHost, type EngineOptions } from '@csa2/engine';
import { DECODE_QUEUE, PREFILL_QUEUE, Queue, jsonLogger, startEngineWorker, type EngineWorker, type Logger, type PrefillResult } from '@csa2/jobs';
import { DEFAULT_PREFILL_CONCURRENCY, type EncoderConfig } from './config.js';
import { createEncodeProcessor } from './processor.js';
import { PrefillSlots } from './slots.js';

/** The running worker: `worker`, `engine()`, `engineStarts()` and `close()` (see EngineWorker). */
export type EncoderWorker = EngineWorker<EngineHost, PrefillResult>;

export interface EncoderWorkerOptions {
  /** @defaultValue a JSON-lines logger on stderr at config.logLevel */
  readonly log?: Logger;
}

export function encoderEngineOptions(config: EncoderConfig): EngineOptions {
  return {
    modelDir: config.modelDir,
    runtime: {
      intraOpThreads: config.threads,
      executionProvider: config.provider,
      deviceId: config.cudaDeviceId ?? 0,
      tf32: config.cudaTf32 ?? false,
      cudaCpuFallback: config.cudaCpuFallback ?? 'refuse',
    },
    scanThreads: config.scanThreads,
    ...(config.encoder !== undefined ? { encoder: config.encoder } : {}),
    ...(config.encoderRows !== undefined ? { encoderRows: config.encoderRows } : {}),
    // one chunk through the model before taking jobs, so the first job does not pay for arena growth
    warmUp: true,
    store: config.storeUrl,
    ...(config.chunkTokens !== undefined ? { chunkTokens: config.chunkTokens } : {}),
    ...(config.chunkCacheBytes !== undefined ? { chunkCacheBytes: config.chunkCacheBytes } : {}),
    scheduler: config.scheduler,
  };
}

export async function startEncoderWorker(config: EncoderConfig, options: EncoderWorkerOptions = {}): Promise<EncoderWorker> {
  let slots: PrefillSlots | null = null;
  const w = await startEngineWorker({
    name: 'encoder worker',
    service: 'encoder-worker',
    queue: PREFILL_QUEUE,
    config,
    log: options.log ?? jsonLogger('encoder-worker', config.logLevel),
    startEngine: () => EngineHost.start(encoderEngineOptions(config)),
    describeEngine: (host) => ({
      warmUpMs: Math.round(host.info.warmUpMs ?? 0),
      batchCapacity: host.info.batchCapacity,
      kvBudgetBytes: host.info.scheduler.kvBudgetBytes,
      executionProvider: host.info.executionProvider,
      // graphs whose nodes partly run on the CPU (a host round trip each run), by name
      ...(host.info.cudaCpuFallbackGraphs.length > 0 ? { cudaCpuFallbackGraphs: host.info.cudaCpuFallbackGraphs } : {}),
    }),
    engineStats: (host) => host.stats(),
    defaultConcurrency: (host) => Math.min(DEFAULT_PREFILL_CONCURRENCY, host.info.batchCapacity),
    setup: (deps) => {
      const decodeQueue = new Queue(DECODE_QUEUE, { connection: deps.redis });
      // the engine thread has its own client of the same store; this one serves the processor
      const store = openStore(config.storeUrl);
      slots = new PrefillSlots({ redis: deps.redis, queueName: PREFILL_QUEUE, reservedSlots: config.reservedSlots, pollMs: config.slotPollMs, log: deps.log });
      const processor = createEncodeProcessor({
        ...deps,
        slots,
        decodeQueue,
        store,
        progressIntervalMs: config.progressIntervalMs,
        cancelPollMs: config.cancelPollMs,
        ...(config.chunkTokens !== undefined ? { chunkTokens: config.chunkTokens } : {}),
      });
      return { processor, close: () => Promise.allSettled([decodeQueue.close(), store.close()]) };
    },
    startedFields: { store: config.storeUrl, reservedSlots: config.reservedSlots },
  });
  const own = slots as PrefillSlots | null;
  if (own === null) return w;
  // the base slots are the worker's concurrency (CSA2_PREFILL_CONCURRENCY, or sized from the engine)
  own.attach(w.worker);
  return {
    ...w,
    close() {
      own.close();
      return w.close();
    },
  };
}
