/**
 * @module slots
 * How many prefill jobs an encoder takes at once, and which ones may take a slot past its base
 * concurrency (issue 31, items 3 and 4).
 *
 * The worker takes up to `baseSlots` jobs (CSA2_PREFILL_CONCURRENCY) as before; their chunks share
 * the engine's steps, round-robin across tenants and, within a tenant, a prompt before a document
 * (the engine request's priority). A document runs for minutes, so without more, jobs that arrive
 * while documents hold every slot wait for a whole document: a long prompt behind documents, or a
 * tenant's small document behind another tenant's flood (measured: 62–180 s, 17× its time alone).
 *
 * So the worker also has `reservedSlots`, taken only by the job at the head of the queue (the one
 * BullMQ hands out next) when it is
 *
 * - an interactive prompt (not a batch line), or
 * - a document of a tenant that runs no document on this worker,
 *
 * whatever the base slots hold. Once such a job runs, its chunks interleave with the documents'
 * (the documents yield between two chunks) and it gets its share of every step. The head is looked
 * at every `pollMs` while the base slots are full; a reserved slot is opened by raising the BullMQ
 * worker's concurrency by one (and waking its fetch loop), and closed again as soon as the job came
 * in (or after `openTimeoutMs` if another worker took it). The worker's concurrency is therefore
 * `max(baseSlots, running jobs)` at rest, never more than `baseSlots + reservedSlots`, and a job
 * that finishes never pulls a replacement while more than `baseSlots` run.
 *
 * The queue order puts these jobs at the head: a tenant's documents are a fair-share flow of their
 * own (`<tenant>/documents`, fair-priority documentFlow), so neither the tenant's prompts nor another
 * tenant's first document queue behind a flood of documents. One exception is BullMQ's: the jobs of
 * a dead worker come back at the head of the `wait` list, ahead of every prioritized job and whatever
 * their priority, so after an encoder was killed a document of the flood would stand before the
 * prompts; when the head is such a job, the jobs in `wait` are put back among the prioritized ones
 * with their own priority (Job.changePriority), and the head is looked at again.
 */
import { Job, errorFields, silentLogger, type Logger, type Queue, type Redis, type Worker } from '@csa2/jobs';

/** What the slot policy knows of a prefill job (from its payload). */
export interface SlotJob {
  readonly kind: 'document' | 'prompt';
  readonly tenant: string;
  /** A batch line (it never takes a reserved slot). */
  readonly batch: boolean;
}

export interface SlotLimits {
  /** Jobs taken at once whatever they are (CSA2_PREFILL_CONCURRENCY). */
  readonly baseSlots: number;
  /** More jobs taken only for the jobs `mayTakeReservedSlot` admits (CSA2_PREFILL_RESERVED_SLOTS). */
  readonly reservedSlots: number;
}

/**
 * Whether `head` (the job the queue hands out next) may start now, with `running` on this worker:
 * always while a base slot is free; in a reserved slot when it is an interactive prompt, or a
 * document of a tenant that runs no document here.
 */
export function mayTakeReservedSlot(head: SlotJob, running: readonly SlotJob[], limits: SlotLimits): boolean {
  if (running.length < limits.baseSlots) return true;
  if (running.length >= limits.baseSlots + limits.reservedSlots) return false;
  if (head.batch) return false;
  if (head.kind === 'prompt') return true;
  return !running.some((r) => r.kind === 'document' && r.tenant === head.tenant);
}

/** The slot fields of a job payload (BullMQ's `data`, JSON), or null when it does not have them. */
export function slotJobOf(data: unknown): SlotJob | null {
  if (typeof data !== 'object' || data === null) return null;
  const d = data as { kind?: unknown; tenant?: unknown; batch?: unknown };
  if ((d.kind !== 'document' && d.kind !== 'prompt') || typeof d.tenant !== 'string' || d.tenant.length === 0) return null;
  return { kind: d.kind, tenant: d.tenant, batch: d.batch === true };
}

/**
 * The job BullMQ hands out next on `queueName` (moveToActive: the oldest of `wait` first, then the
 * lowest of `prioritized`) and its slot fields; null when nothing waits or its payload is unreadable.
 */
export async function peekNextJob(redis: Redis, queueName: string, prefix = 'bull'): Promise<{ id: string; job: SlotJob; inWait: boolean } | null> {
  const key = (k: string) => `${prefix}:${queueName}:${k}`;
  const r = await redis.multi().lindex(key('wait'), -1).zrange(key('prioritized'), '0', '0').exec();
  const waitHead = r?.[0]?.[1];
  const prioritizedHead = (r?.[1]?.[1] as string[] | undefined)?.[0];
  const id = typeof waitHead === 'string' ? waitHead : prioritizedHead;
  if (id === undefined) return null;
  const raw = await redis.hget(key(id), 'data');
  if (raw === null) return null;
  let data: unknown;
  try {
    data = JSON.parse(raw);
  } catch {
    return null;
  }
  const job = slotJobOf(data);
  return job === null ? null : { id, job, inWait: typeof waitHead === 'string' };
}

/**
 * Puts the jobs of `queue`'s wait list that have a priority back among its prioritized jobs, each with
 * its own priority (at most `limit` of them); returns how many moved. Jobs added without a priority stay.
 */
export async function requeueWaitingByPriority(queue: Queue, redis: Redis, limit = 100, prefix = 'bull'): Promise<number> {
  const ids = await redis.lrange(`${prefix}:${queue.name}:wait`, -limit, -1);
  let moved = 0;
  for (const id of ids) {
    const job = await Job.fromId(queue, id);
    if (job === undefined || !(job.priority > 0)) continue;
    try {
      await job.changePriority({ priority: job.priority });
      moved++;
    } catch {
      // taken meanwhile (active), or gone: nothing to move
    }
  }
  return moved;
}

/** The part of a BullMQ Worker the slots drive (its concurrency, and pause/resume to wake its fetch loop). */
export type SlotWorker = Pick<Worker, 'concurrency' | 'pause' | 'resume' | 'isRunning'>;

export interface PrefillSlotsOptions {
  /** The prefill queue (its wait list is put back in priority order, see the module header); none: left as it is. */
  readonly queue?: Queue;
  /** More jobs taken only for the jobs `mayTakeReservedSlot` admits (CSA2_PREFILL_RESERVED_SLOTS). */
  readonly reservedSlots: number;
  /** Commands on the prefill queue's Redis (the head look-ups). */
  readonly redis: Redis;
  readonly queueName: string;
  /** How often the head is looked at while the base slots are full. @defaultValue 100 */
  readonly pollMs?: number;
  /** A reserved slot left open this long without a job coming in is closed. @defaultValue 2000 */
  readonly openTimeoutMs?: number;
  readonly log?: Logger;
}

/** The running jobs of one encoder and its reserved slots (see the module header). */
export class PrefillSlots {
  private readonly running = new Map<string, SlotJob>();
  private worker: SlotWorker | null = null;
  private timer: NodeJS.Timeout | null = null;
  private openedAtMs: number | null = null;
  private ticking = false;
  private closed = false;
  private opened = 0;
  private readonly pollMs: number;
  private readonly openTimeoutMs: number;
  private readonly log: Logger;

  private baseSlots = 1;

  constructor(private readonly opts: PrefillSlotsOptions) {
    if (!(Number.isInteger(opts.reservedSlots) && opts.reservedSlots >= 0)) throw new RangeError(`reservedSlots must be a non-negative integer, got ${opts.reservedSlots}`);
    this.pollMs = opts.pollMs ?? 100;
    this.openTimeoutMs = opts.openTimeoutMs ?? 2000;
    this.log = opts.log ?? silentLogger;
  }

  get limits(): SlotLimits {
    return { baseSlots: this.baseSlots, reservedSlots: this.opts.reservedSlots };
  }

  /** Jobs running now, and reserved slots opened so far. */
  stats(): { running: number; reservedOpened: number } {
    return { running: this.running.size, reservedOpened: this.opened };
  }

  /** Starts looking at the queue's head for `worker`, whose concurrency now is the base slots. */
  attach(worker: SlotWorker): void {
    this.worker = worker;
    this.baseSlots = worker.concurrency;
    if (this.opts.reservedSlots > 0 && this.timer === null && !this.closed) {
      this.timer = setInterval(() => void this.tick(), this.pollMs);
      this.timer.unref();
    }
  }

  /** A job started (its payload parsed). */
  enter(jobId: string, job: SlotJob): void {
    this.running.set(jobId, job);
    if (this.openedAtMs !== null) this.openedAtMs = null;
    this.settle();
  }

  /** A job ended (before BullMQ moves it on, so that its end fetches a replacement only into a base slot). */
  leave(jobId: string): void {
    this.running.delete(jobId);
    this.settle();
  }

  /** Stops looking at the queue (the worker is closing). */
  close(): void {
    this.closed = true;
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  /** The worker's concurrency at rest: the base slots, or the jobs running when more run. */
  private settle(): void {
    if (this.worker === null || this.openedAtMs !== null) return;
    this.worker.concurrency = Math.max(this.baseSlots, this.running.size);
  }

  private async tick(): Promise<void> {
    const worker = this.worker;
    if (worker === null || this.ticking || this.closed) return;
    if (this.openedAtMs !== null) {
      if (Date.now() - this.openedAtMs < this.openTimeoutMs) return;
      this.openedAtMs = null; // another worker took it: close the slot again
      this.settle();
    }
    const running = [...this.running.values()];
    if (running.length < this.baseSlots || running.length >= this.baseSlots + this.opts.reservedSlots) return;
    this.ticking = true;
    try {
      let head = await this.peek();
      if (head !== null && head.inWait && this.opts.queue !== undefined && !mayTakeReservedSlot(head.job, running, this.limits)) {
        const moved = await requeueWaitingByPriority(this.opts.queue, this.opts.redis);
        if (moved > 0) {
          this.log('info', 'prefill jobs back from a dead worker put in priority order', { moved });
          head = await this.peek();
        }
      }
      if (head === null || this.closed || !mayTakeReservedSlot(head.job, running, this.limits)) return;
      this.openedAtMs = Date.now();
      this.opened++;
      worker.concurrency = Math.min(this.baseSlots + this.opts.reservedSlots, this.running.size + 1);
      this.log('debug', 'reserved prefill slot opened', { next: head.id, kind: head.job.kind, tenant: head.job.tenant, running: this.running.size });
      // BullMQ's fetch loop waits for a running job to end before it looks at its concurrency again;
      // a pause (not waiting for the running jobs) and resume wakes it
      if (worker.isRunning()) {
        await worker.pause(true);
        await worker.resume();
      }
    } catch (err) {
      this.log('warn', 'prefill slots: could not look at the queue', errorFields(err));
    } finally {
      this.ticking = false;
    }
  }

  private peek(): Promise<{ id: string; job: SlotJob; inWait: boolean } | null> {
    return peekNextJob(this.opts.redis, this.opts.queueName);
  }
}
