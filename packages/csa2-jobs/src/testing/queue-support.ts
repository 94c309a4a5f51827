/**
 * @module testing/queue-support
 * Helpers for tests that run real BullMQ on a real Redis: wait for a job to settle, read a request's
 * stream as entries, wait until a stream holds some entries.
 */
import type { Job, Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { streamKey } from '../queues.js';
import { decodeStreamEntry, type StreamEntry } from '../stream.js';
import { pollUntil } from './poll.js';

/** Polls until the job is completed or failed (for good); returns it with its state. */
export async function waitForJobSettled(queue: Queue, jobId: string, timeoutMs = 20_000): Promise<{ job: Job; state: 'completed' | 'failed' }> {
  return pollUntil(
    `job ${jobId} to settle`,
    async () => {
      const job = await queue.getJob(jobId);
      if (job === undefined) return undefined;
      const state = await job.getState();
      // read again: the job object was fetched before it settled
      return state === 'completed' || state === 'failed' ? { job: (await queue.getJob(jobId)) ?? job, state } : undefined;
    },
    { timeoutMs },
  );
}

/** The request's stream: each entry with its Redis id. */
export async function readStreamEntries(redis: Redis, requestId: string): Promise<{ id: string; entry: StreamEntry }[]> {
  const raw = await redis.xrange(streamKey(requestId), '-', '+');
  return raw.map(([id, fields]) => ({ id, entry: decodeStreamEntry(fields) }));
}

/** Polls until the stream holds at least `count` entries. */
export async function waitForStreamLength(redis: Redis, requestId: string, count: number, timeoutMs = 20_000): Promise<void> {
  await pollUntil(`the stream of ${requestId} to hold ${count} entries`, async () => ((await redis.xlen(streamKey(requestId))) >= count ? true : undefined), {
    timeoutMs,
    everyMs: 5,
  });
}
