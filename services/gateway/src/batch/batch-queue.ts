/**
 * @module batch/batch-queue
 * The `csa2-batch` queue of batch driver jobs, one per batch (`batch.<batchId>`): its payload, how
 * a batch's job is added (routes/batches) and the queue itself (the composition root opens it).
 * The drivers that take these jobs are batch/batch-worker.ts.
 */
import { Queue, type JobsOptions, type Redis } from '@csa2/jobs';
import { BATCH_JOB_NAME, BATCH_QUEUE, batchJobId } from './keys.js';

/** The driver job's payload. */
export interface BatchRunJob {
  readonly v: 1;
  readonly batchId: string;
  readonly tenant: string;
}

/** Options of a driver job: retried (every 5 s) for as long as infrastructure failures last; the batch's own expiry bounds it. */
export const BATCH_JOB_OPTIONS = {
  attempts: 100_000,
  backoff: { type: 'fixed', delay: 5000 },
  removeOnComplete: true,
  removeOnFail: { age: 7 * 24 * 3600 },
} as const satisfies JobsOptions;

/** Adds the batch's driver job (a no-op when it exists). */
export async function enqueueBatchRun(queue: Queue<BatchRunJob>, batchId: string, tenant: string): Promise<void> {
  await queue.add(BATCH_JOB_NAME, { v: 1, batchId, tenant }, { ...BATCH_JOB_OPTIONS, jobId: batchJobId(batchId) });
}

export function createBatchQueue(redis: Redis): Queue<BatchRunJob> {
  const queue = new Queue<BatchRunJob>(BATCH_QUEUE, { connection: redis });
  queue.on('error', () => undefined); // the connection's own listener logs
  return queue;
}
