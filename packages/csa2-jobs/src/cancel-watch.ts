/**
 * @module cancel-watch
 * How a running job notices that its request was cancelled: the gateway sets `csa2:cancel:<requestId>`
 * (queues.ts) when the client goes away, when it answers the client with an error, on timeout and on
 * shutdown; a worker polls the key while it works and stops. One EXISTS in flight at a time; a Redis
 * error skips that poll (the job's own Redis writes surface an outage).
 *
 * @example
 * const stop = watchCancelKey(redis, requestId, 50, () => abort.abort());
 * try { await work(abort.signal); } finally { stop(); }
 */
import type { Redis } from 'ioredis';
import { cancelKey } from './queues.js';

/** Polls the request's cancel key every `everyMs` and calls `onCancel` once it is set; returns the function that stops polling. */
export function watchCancelKey(redis: Redis, requestId: string, everyMs: number, onCancel: () => void): () => void {
  let busy = false;
  let fired = false;
  const timer = setInterval(() => {
    if (busy || fired) return;
    busy = true;
    redis.exists(cancelKey(requestId)).then(
      (n) => {
        busy = false;
        if (n > 0 && !fired) {
          fired = true;
          onCancel();
        }
      },
      () => {
        busy = false;
      },
    );
  }, everyMs);
  return () => clearInterval(timer);
}

/** True when the request's cancel key is set. */
export async function isCancelled(redis: Redis, requestId: string): Promise<boolean> {
  return (await redis.exists(cancelKey(requestId))) > 0;
}
