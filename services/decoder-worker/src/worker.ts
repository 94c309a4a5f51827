/**
 * @module worker
 * `startDecoderWorker(config)`: the engine thread plus a BullMQ Worker on the decode queue, in this
 * process (`startEngineWorker` of @csa2/jobs worker-runtime with the decoder's engine options and
 * processor). Used by main.ts, by tests and by any single-process launcher.
 *
 * @example
 *   const w = await startDecoderWorker(loadDecoderConfig());
 *   process.once('SIGTERM', () => void w.close());
 */
import { DECODE_ATTENTION_ARENA_ROWS } from '@csa2/core';
import { EngineHost, type EngineOptions } from '@csa2/engine';
import { DECODE_QUEUE, jsonLogger, startEngineWorker, type DecodeResult, type EngineWorker, type Logger } from '@csa2/jobs';
import type { DecoderConfig } from './config.js';
import { createDecodeProcessor } from './processor.js';

/** The running worker: `worker`, `engine()`, `engineStarts()` and `close()` (see EngineWorker). */
export type DecoderWorker = EngineWorker<EngineHost, DecodeResult>;

export interface DecoderWorkerOptions {
  /** @defaultValue a JSON-lines logger on stderr at config.logLevel */
  readonly log?: Logger;
}

export function decoderEngineOptions(config: DecoderConfig): EngineOptions {
  return {
    modelDir: config.modelDir,
    // decode batches keep the attention arena; a document question's replay runs without (its peak stays no longer than the question)
    runtime: { intraOpThreads: config.threads, executionProvider: config.provider, attentionArenaMaxRows: DECODE_ATTENTION_ARENA_ROWS },
    scanThreads: config.scanThreads,
    // one chunk through the model before taking jobs, so the first job does not pay for arena growth
    warmUp: true,
    ...(config.storeUrl !== undefined ? { store: config.storeUrl } : {}),
    ...(config.chunkCacheBytes !== undefined ? { chunkCacheBytes: config.chunkCacheBytes } : {}),
    ...(config.documentCacheBytes !== undefined ? { documentCacheBytes: config.documentCacheBytes } : {}),
    ...(config.documentPrefaultBytes !== undefined ? { documentPrefaultBytes: config.documentPrefaultBytes } : {}),
    scheduler: config.scheduler,
  };
}

export async function startDecoderWorker(config: DecoderConfig, options: DecoderWorkerOptions = {}): Promise<DecoderWorker> {
  return startEngineWorker({
    name: 'decoder worker',
    service: 'decoder-worker',
    queue: DECODE_QUEUE,
    config,
    log: options.log ?? jsonLogger('decoder-worker', config.logLevel),
    startEngine: () => EngineHost.start(decoderEngineOptions(config)),
    describeEngine: (host) => ({
      warmUpMs: Math.round(host.info.warmUpMs ?? 0),
      ...(host.info.documentPrefaultMs !== null ? { documentPrefaultMs: Math.round(host.info.documentPrefaultMs) } : {}),
      batchCapacity: host.info.batchCapacity,
      kvBudgetBytes: host.info.scheduler.kvBudgetBytes,
    }),
    engineStats: (host) => host.stats(),
    defaultConcurrency: (host) => host.info.batchCapacity,
    setup: (deps) => ({
      processor: createDecodeProcessor({
        ...deps,
        cancelPollMs: config.cancelPollMs,
        ...(config.replayTokens !== undefined ? { replayTokens: config.replayTokens } : {}),
      }),
    }),
  });
}
