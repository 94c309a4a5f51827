/**
 * @module batch/batch-worker
 * The batch drivers of one gateway: a BullMQ Worker on the `csa2-batch` queue, one job per batch
 * (`batch.<batchId>`), processed by runBatch. BullMQ's job lock makes one gateway the driver of a
 * batch at a time; when that gateway dies its job stalls and another gateway (or the same one,
 * restarted) takes it over within CSA2_BATCH_LOCK_DURATION_MS + CSA2_BATCH_STALLED_INTERVAL_MS and
 * continues from Redis and the store (batch/runner.ts). On a graceful shutdown the worker stops
 * taking jobs, the running batches are handed back to the queue (due again after
 * HAND_BACK_DELAY_MS, no attempt used) and their lines keep running on the workers. An
 * infrastructure failure (Redis, store) fails the attempt; it is retried every 5 s.
 */
import { DelayedError, Worker, connectRedis, type Job } from '@csa2/jobs';
import type { GatewayDeps } from '../capabilities.js';
import type { BatchRunJob } from './batch-queue.js';
import { BatchStore } from './batch-store.js';
import { BATCH_QUEUE } from './keys.js';
import { runBatch, type RunnerDeps } from './runner.js';

/** The capabilities this module takes. */
export type BatchDriverDeps = Pick<GatewayDeps, 'config' | 'logger' | 'redis'> & RunnerDeps;

/**
 * A batch handed back on shutdown is due again after this long, so that the closing gateway's worker
 * (still winding down) cannot take it again; another gateway, or this one restarted, does.
 */
export const HAND_BACK_DELAY_MS = 1000;

export interface BatchDrivers {
  /** null when CSA2_BATCH_CONCURRENCY is 0 (this gateway drives no batch). */
  readonly worker: Worker<BatchRunJob> | null;
  /** Hands running batches back to the queue and closes the worker; idempotent. */
  close(): Promise<void>;
}

/** Starts this gateway's batch drivers (CSA2_BATCH_CONCURRENCY at a time). */
export async function startBatchDrivers(deps: BatchDriverDeps): Promise<BatchDrivers> {
  const config = deps.config.batch;
  if (config.concurrency === 0) return { worker: null, close: async () => undefined };
  const connection = connectRedis(deps.config.redisUrl, { connectionName: 'csa2-gateway-batch' });
  connection.on('error', () => undefined); // the gateway's main connection logs Redis trouble
  const runner = { deps, batches: new BatchStore(deps.redis), config };
  let closing = false;
  const running = new Set<AbortController>();
  const worker = new Worker<BatchRunJob>(
    BATCH_QUEUE,
    async (job: Job<BatchRunJob>, token, signal) => {
      const controller = new AbortController();
      const onAbort = (): void => controller.abort();
      signal?.addEventListener('abort', onAbort, { once: true });
      running.add(controller);
      // a job taken while this gateway closes goes straight back
      if (closing) controller.abort();
      try {
        const result = await runBatch(runner, job.data.batchId, controller.signal);
        if (result === 'detached') {
          deps.logger.info({ batchId: job.data.batchId }, 'handing the batch back (shutting down)');
          await job.moveToDelayed(Date.now() + HAND_BACK_DELAY_MS, token);
          throw new DelayedError();
        }
      } finally {
        running.delete(controller);
        signal?.removeEventListener('abort', onAbort);
      }
    },
    {
      connection,
      concurrency: config.concurrency,
      lockDuration: config.lockDurationMs,
      stalledInterval: config.stalledIntervalMs,
      // a gateway that dies mid-batch stalls its job: never give a batch up for that
      maxStalledCount: 1_000_000,
    },
  );
  worker.on('error', (err) => deps.logger.warn({ err: err.message }, 'batch worker error'));
  worker.on('failed', (job, err) => deps.logger.warn({ batchId: job?.data.batchId, err: err.message }, 'batch driver attempt failed; retrying'));
  let closingDone: Promise<void> | null = null;
  return {
    worker,
    close() {
      closingDone ??= (async () => {
        closing = true;
        const closed = worker.close();
        for (const c of running) c.abort();
        await closed;
        connection.disconnect();
      })();
      return closingDone;
    },
  };
}
