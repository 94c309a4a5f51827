/**
 * @module middleware/body-budget
 * Bounds the memory that request bodies take while they are read, parsed and tokenized: each POST
 * reserves its size (Content-Length, or CSA2_MAX_BODY_BYTES when unknown) from one byte budget
 * (CSA2_MAX_INFLIGHT_BODY_BYTES) before its body is read, and waits its turn (first come, first
 * served) while the budget is taken. A body costs several times its size until it is tokenized (the
 * bytes, the text, the parsed JSON, the ids), so without the budget 32 concurrent 16 MiB bodies,
 * refused anyway for their length, took the gateway to 3.5 GB. Waiting bodies stay in the client's
 * socket (TCP flow control), not in memory.
 *
 * The reservation ends when the route says it is done with the body (`releaseBody(c.req.raw)`, after
 * tokenizing: a completion then waits for its tokens without holding the budget) or when the request
 * ends, whichever comes first. A client that leaves while waiting gives up its place. A body larger
 * than the whole budget still runs, alone.
 *
 * Small bodies (at most CSA2_SMALL_BODY_BYTES declared, a usual prompt) take a budget of their own,
 * so they never wait behind large ones: with one first-come-first-served budget, a 4-token completion
 * sent after 32 bodies of 16 MiB waited until 28 of them had been read and parsed (5.8–10 s).
 * The small lane's budget, SMALL_BODY_LANE_BODIES bodies at its size, bounds its memory too.
 */
import type { MiddlewareHandler } from 'hono';

/** A first-come-first-served budget of bytes. */
export class ByteBudget {
  private used = 0;
  private readonly waiters: { bytes: number; grant: () => void }[] = [];

  constructor(readonly capacityBytes: number) {
    if (!Number.isSafeInteger(capacityBytes) || capacityBytes < 1) throw new RangeError(`capacityBytes must be a positive integer, got ${capacityBytes}`);
  }

  get usedBytes(): number {
    return this.used;
  }

  get waiting(): number {
    return this.waiters.length;
  }

  /**
   * Resolves with the release function once `bytes` fit (alone, when more than the capacity);
   * rejects when `signal` aborts first. Releasing twice is a no-op.
   */
  acquire(bytes: number, signal?: AbortSignal): Promise<() => void> {
    return new Promise((resolve, reject) => {
      let released = false;
      const release = (): void => {
        if (released) return;
        released = true;
        this.used -= bytes;
        this.grantWaiters();
      };
      const waiter = {
        bytes,
        grant: () => {
          signal?.removeEventListener('abort', onAbort);
          this.used += bytes;
          resolve(release);
        },
      };
      const onAbort = (): void => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
        this.grantWaiters();
        reject(signal?.reason instanceof Error ? signal.reason : new Error('aborted while waiting for the body budget'));
      };
      if (signal?.aborted === true) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(waiter);
      this.grantWaiters();
    });
  }

  private grantWaiters(): void {
    for (;;) {
      const next = this.waiters[0];
      if (next === undefined || (this.used > 0 && this.used + next.bytes > this.capacityBytes)) return;
      this.waiters.shift();
      next.grant();
    }
  }
}

const releases = new WeakMap<Request, () => void>();

/** Ends the request's body reservation (the route has its tokens); a no-op when it has none. */
export function releaseBody(request: Request): void {
  releases.get(request)?.();
}

/** Bodies of the small lane that fit at once (its budget is this × CSA2_SMALL_BODY_BYTES). */
export const SMALL_BODY_LANE_BODIES = 64;

export interface BodyBudgetOptions {
  readonly budget: ByteBudget;
  /** Reserved for a body without a Content-Length (and the most any body reserves). */
  readonly maxBodyBytes: number;
  /** The lane of bodies that declare at most `maxBodyBytes` (a body without a Content-Length is not small). */
  readonly small?: { readonly budget: ByteBudget; readonly maxBodyBytes: number };
}

/** @example app.use('/v1/*', bodyBudget({ budget: new ByteBudget(64 << 20), maxBodyBytes: 16 << 20 })); */
export function bodyBudget(options: BodyBudgetOptions): MiddlewareHandler {
  return async function bodyBudget(c, next) {
    if (c.req.method === 'GET' || c.req.method === 'HEAD' || c.req.method === 'DELETE') return next();
    const declared = Number(c.req.header('content-length'));
    const bytes = Number.isSafeInteger(declared) && declared >= 0 ? Math.min(declared, options.maxBodyBytes) : options.maxBodyBytes;
    if (bytes === 0) return next();
    let release: () => void;
    try {
      const small = options.small !== undefined && Number.isSafeInteger(declared) && bytes <= options.small.maxBodyBytes;
      release = await (small ? (options.small as { budget: ByteBudget }).budget : options.budget).acquire(bytes, c.req.raw.signal);
    } catch {
      return new Response(null, { status: 499 }); // the client left while its body waited
    }
    releases.set(c.req.raw, release);
    try {
      await next();
    } finally {
      release();
    }
  };
}
