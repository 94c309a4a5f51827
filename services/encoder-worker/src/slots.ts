/**
 * @module slots
 * How many prefill jobs an encoder takes at once, and which ones may take a slot past its base
 * concurrency.
 *
 * The worker takes up to `baseSlots` jobs (CSA2_PREFILL_CONCURRENCY) as before; their chunks share
 * the engine's steps, time-fairly across tenants (each step's prefill rows are the tenant's that has
 * had the least prefill time) and, within a tenant, a prompt before a document (the engine request's
 * priority). A document runs for minutes, so without more, jobs that arrive
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
 * Such a job is usually next already: a tenant's documents are a fair-share flow of their own
 * (`<tenant>/documents`, fair-priority documentFlow), so neither the tenant's prompts nor another
 * tenant's first document queue behind a flood of documents. Not always: the jobs of a dead worker
 * come back at the head of BullMQ's `wait` list, ahead of every prioritized job, and documents that
 * were queued first keep their earlier start tags. So the slots look at the first `scanJobs` jobs in
 * the order BullMQ hands them out, and the first that may take a reserved slot is moved to the head
 * of the queue (one Lua script: out of `prioritized` or `wait`, onto the popping end of `wait`) before
 * the slot is opened. Payloads are read once per job id (they never change).
 */
import { createHash } from 'node:crypto';
import { errorFields, silentLogger, type Logger, type Redis, type Worker } from '@csa2/jobs';

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

/** Job ids of `queueName` in the order BullMQ hands them out (moveToActive: `wait` from its popping end, then `prioritized`), at most `limit`. */
export async function waitingJobIds(redis: Redis, queueName: string, limit: number, prefix = 'bull'): Promise<string[]> {
  const key = (k: string) => `${prefix}:${queueName}:${k}`;
  const r = await redis
    .multi()
    .lrange(key('wait'), -limit, -1)
    .zrange(key('prioritized'), '0', String(limit - 1))
    .exec();
  const wait = (r?.[0]?.[1] as string[] | undefined) ?? [];
  const prioritized = (r?.[1]?.[1] as string[] | undefined) ?? [];
  return [...wait.reverse(), ...prioritized].slice(0, limit);
}

/** The slot fields of job `id` of `queueName` (its payload), or null when it is gone or unreadable. */
export async function readSlotJob(redis: Redis, queueName: string, id: string, prefix = 'bull'): Promise<SlotJob | null> {
  const raw = await redis.hget(`${prefix}:${queueName}:${id}`, 'data');
  if (raw === null) return null;
  try {
    return slotJobOf(JSON.parse(raw));
  } catch {
    return null;
  }
}

/**
 * KEYS[1] wait, KEYS[2] prioritized, KEYS[3] marker, KEYS[4] the job's hash; ARGV[1] job id. Moves a
 * waiting job to the popping end of `wait` (BullMQ hands it out next) and sets the queue's marker
 * (BullMQ's, so that a worker blocked on it wakes); 1 if moved, 0 when it no longer waits.
 */
const TO_HEAD_SCRIPT = `
if redis.call('EXISTS', KEYS[4]) == 0 then return 0 end
local removed = redis.call('ZREM', KEYS[2], ARGV[1])
if removed == 0 then removed = redis.call('LREM', KEYS[1], -1, ARGV[1]) end
if removed == 0 then return 0 end
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[3], 0, '0')
return 1
`;
const TO_HEAD_SHA = createHash('sha1').update(TO_HEAD_SCRIPT).digest('hex');

/** Moves waiting job `id` to the head of `queueName` (see TO_HEAD_SCRIPT); false when it no longer waits. */
export async function moveToHead(redis: Redis, queueName: string, id: string, prefix = 'bull'): Promise<boolean> {
  const key = (k: string) => `${prefix}:${queueName}:${k}`;
  const keys = [key('wait'), key('prioritized'), key('marker'), key(id)];
  let r: unknown;
  try {
    r = await redis.evalsha(TO_HEAD_SHA, keys.length, ...keys, id);
  } catch (err) {
    if (!(err instanceof Error && err.message.startsWith('NOSCRIPT'))) throw err;
    r = await redis.eval(TO_HEAD_SCRIPT, keys.length, ...keys, id);
  }
  return Number(r) === 1;
}

/** The part of a BullMQ Worker the slots drive (its concurrency, and pause/resume to wake its fetch loop). */
export type SlotWorker = Pick<Worker, 'concurrency' | 'pause' | 'resume' | 'isRunning'>;

export interface PrefillSlotsOptions {
  /** More jobs taken only for the jobs `mayTakeReservedSlot` admits (CSA2_PREFILL_RESERVED_SLOTS). */
  readonly reservedSlots: number;
  /** Commands on the prefill queue's Redis (the head look-ups). */
  readonly redis: Redis;
  readonly queueName: string;
  /** How often the head is looked at while the base slots are full. @defaultValue 100 */
  readonly pollMs?: number;
  /** A reserved slot left open this long without a job coming in is closed. @defaultValue 2000 */
  readonly openTimeoutMs?: number;
  /** Waiting jobs looked at for one that may take a reserved slot, in the order BullMQ hands them out. @defaultValue 32 */
  readonly scanJobs?: number;
  readonly log?: Logger;
}

/** The running jobs of one encoder and its reserved slots (see the module header). */
export class PrefillSlots {
  private readonly running = new Map<string, SlotJob>();
  /** Slot fields of waiting jobs already read (payloads never change), the newest last. */
  private readonly known = new Map<string, SlotJob | null>();
  private worker: SlotWorker | null = null;
  private timer: NodeJS.Timeout | null = null;
  private openedAtMs: number | null = null;
  private ticking = false;
  private closed = false;
  private opened = 0;
  private readonly pollMs: number;
  private readonly openTimeoutMs: number;
  private readonly scanJobs: number;
  private readonly log: Logger;

  private baseSlots = 1;

  constructor(private readonly opts: PrefillSlotsOptions) {
    if (!(Number.isInteger(opts.reservedSlots) && opts.reservedSlots >= 0))
      throw new RangeError(`reservedSlots must be a non-negative integer, got ${opts.reservedSlots}`);
    this.pollMs = opts.pollMs ?? 100;
    this.openTimeoutMs = opts.openTimeoutMs ?? 2000;
    this.scanJobs = opts.scanJobs ?? 32;
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

  /**
   * The worker's concurrency: the base slots, or the jobs running when more run, plus the one reserved
   * slot open now (if any), never past base + reserved. Set on every start and end of a job, before
   * BullMQ decides whether that end fetches a replacement.
   */
  private settle(): void {
    if (this.worker === null) return;
    const open = this.openedAtMs !== null ? 1 : 0;
    this.worker.concurrency = Math.min(this.baseSlots + this.opts.reservedSlots, Math.max(this.baseSlots, this.running.size + open));
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
      const next = await this.firstAdmissible(running);
      if (next === null || this.closed) return;
      if (!next.atHead && !(await moveToHead(this.opts.redis, this.opts.queueName, next.id))) return; // taken meanwhile
      this.openedAtMs = Date.now();
      this.opened++;
      this.settle();
      this.log('debug', 'reserved prefill slot opened', {
        next: next.id,
        kind: next.job.kind,
        tenant: next.job.tenant,
        movedToHead: !next.atHead,
        running: this.running.size,
      });
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

  /** The first waiting job (in BullMQ's order) that may take a reserved slot now, and whether it is next already. */
  private async firstAdmissible(running: readonly SlotJob[]): Promise<{ id: string; job: SlotJob; atHead: boolean } | null> {
    const ids = await waitingJobIds(this.opts.redis, this.opts.queueName, this.scanJobs);
    for (const [i, id] of ids.entries()) {
      let job = this.known.get(id);
      if (job === undefined) {
        job = await readSlotJob(this.opts.redis, this.opts.queueName, id);
        this.known.set(id, job);
        if (this.known.size > 4 * this.scanJobs + 256) this.known.delete(this.known.keys().next().value as string);
      }
      if (job !== null && mayTakeReservedSlot(job, running, this.limits)) return { id, job, atHead: i === 0 };
    }
    return null;
  }
}
