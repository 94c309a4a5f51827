/**
 * @module queue-test-support
 * Helpers for tests that run real BullMQ on a real Redis: wait for a job to settle, read a request's
 * stream as entries, wait until a stream holds some entries.
 */
import type { Job, Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { streamKey } from './queues.js';
import { decodeStreamEntry, type StreamEntry } from './stream.js';

/** Polls until the job is completed or failed (for good); returns it with its state. */
export async function waitForJobSettled(queue: Queue, jobId: string, timeoutMs = 20_000): Promise<{ job: Job; state: 'completed' | 'failed' }> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const job = await queue.getJob(jobId);
    if (job !== undefined) {
      const state = await job.getState();
      // read again: the job object was fetched before it settled
      if (state === 'completed' || state === 'failed') return { job: (await queue.getJob(jobId)) ?? job, state };
    }
    if (Date.now() > deadline)
      throw new Error(`job ${jobId} did not settle within ${timeoutMs} ms (state ${job === undefined ? 'missing' : await job.getState()})`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The request's stream: each entry with its Redis id. */
export async function readStreamEntries(redis: Redis, requestId: string): Promise<{ id: string; entry: StreamEntry }[]> {
  const raw = await redis.xrange(streamKey(requestId), '-', '+');
  return raw.map(([id, fields]) => ({ id, entry: decodeStreamEntry(fields) }));
}

/** Polls until the stream holds at least `count` entries. */
export async function waitForStreamLength(redis: Redis, requestId: string, count: number, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while ((await redis.xlen(streamKey(requestId))) < count) {
    if (Date.now() > deadline) throw new Error(`stream of ${requestId} did not reach ${count} entries within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
