/**
 * @module fair-priority
 * Tenants share the prefill and the decode queue fairly, with the open-source BullMQ: every job is
 * added with a priority that is its start tag in start-time fair queuing (SFQ; Goyal et al. 1996),
 * computed by one Lua script per add, so workers that take the lowest priority first serve tenants
 * in proportion to their weights, whatever each tenant has queued.
 *
 * Per queue, Redis keeps a virtual time V and, per tenant, the finish tag F of its last job
 * (`csa2:fair:<queue>`, a hash). A job of cost c (tokens of work) from a tenant of weight w gets
 *
 *     S = max(V, F_tenant),   F_tenant = S + c / w,   priority = 1 + ⌊S / unit⌋
 *
 * and V follows service: the smallest start tag still waiting (read from BullMQ's `prioritized`
 * zset, whose scores are priority · 2³² + counter), or, when nothing waits, the largest one
 * assigned. A tenant that queued 768 documents has start tags far ahead of V; another tenant's
 * next job starts at V and is taken right after the jobs already running. Equal priorities are
 * FIFO (BullMQ's counter), so a tenant alone gets plain FIFO. When the queue is empty (nothing
 * waiting, prioritized or delayed), every tag starts again from 0, which keeps priorities far
 * below BullMQ's limit (2²¹ − 1, where they are clamped: FIFO past it).
 *
 * Costs: a prefill job, the tokens it encodes; a decode job, its prompt tokens plus max_tokens. The
 * unit (`FAIR_UNIT_TOKENS`) makes one priority step a few hundred tokens of work.
 *
 * @example
 * const priority = await fairPriority(redis, DECODE_QUEUE, { tenant, costTokens: 16 + 256, weight: 1 });
 * await queue.add(DECODE_JOB_NAME, job, { ...DEFAULT_DECODE_JOB_OPTIONS, jobId, priority });
 */
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';

/** Tokens of work per priority step. */
export const FAIR_UNIT_TOKENS = 256;
/** BullMQ's largest priority. */
export const MAX_JOB_PRIORITY = 2 ** 21 - 1;
/** Weights a tenant may have (relative shares). */
export const MIN_FAIR_WEIGHT = 0.001;
export const MAX_FAIR_WEIGHT = 1000;

/**
 * The flow a job is fair-queued in: a tenant's interactive requests, or its batch lines
 * (`<tenant>/batch`, a flow of its own with a small weight, so batch work fills what interactive
 * work leaves and takes only its weight's share of a contended queue). Tenant ids have no '/'.
 */
export function fairFlow(tenant: string, batch: boolean): string {
  return batch ? `${tenant}/batch` : tenant;
}

/**
 * The flow a document (ingestion) is fair-queued in on the prefill queue: the tenant's documents
 * (`<tenant>/documents`), apart from its long prompts, so that neither the tenant's own prompts nor
 * another tenant's first document start behind a flood of queued documents (each flow's start tag
 * starts at the virtual time); a batch line's document stays in the tenant's batch flow.
 */
export function documentFlow(tenant: string, batch: boolean): string {
  return batch ? `${tenant}/batch` : `${tenant}/documents`;
}

/** The Redis hash of a queue's fair-share state. */
export const fairStateKey = (queueName: string): string => `csa2:fair:${queueName}`;

/**
 * KEYS[1] fair state hash, KEYS[2] bull:<q>:prioritized, KEYS[3] bull:<q>:wait, KEYS[4] bull:<q>:delayed
 * ARGV[1] tenant, ARGV[2] cost in units, ARGV[3] weight, ARGV[4] max priority
 */
const SCRIPT = `
local state = KEYS[1]
local v = tonumber(redis.call('HGET', state, 'v') or '0')
local top = tonumber(redis.call('HGET', state, 'top') or '0')
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if #first > 0 then
  local waitingStart = math.floor(tonumber(first[2]) / 4294967296) - 1
  if waitingStart > v then v = waitingStart end
elseif redis.call('LLEN', KEYS[3]) == 0 then
  if redis.call('ZCARD', KEYS[4]) == 0 then
    -- nothing waits (every job is running or done): every tenant starts again from 0
    redis.call('DEL', state)
    v = 0
    top = 0
  elseif top > v then
    v = top
  end
end
local fkey = 'f:' .. ARGV[1]
local f = tonumber(redis.call('HGET', state, fkey) or '0')
local start = v
if f > start then start = f end
redis.call('HSET', state, 'v', v, fkey, start + tonumber(ARGV[2]) / tonumber(ARGV[3]))
if start > top then top = start end
redis.call('HSET', state, 'top', top)
local priority = math.floor(start) + 1
local cap = tonumber(ARGV[4])
if priority > cap then priority = cap end
return priority
`;
const SHA = createHash('sha1').update(SCRIPT).digest('hex');

export interface FairShare {
  readonly tenant: string;
  /** Tokens of work the job brings (see the module header). */
  readonly costTokens: number;
  /** The tenant's share relative to others. @defaultValue 1 */
  readonly weight?: number;
}

export interface FairPriorityOptions {
  /** BullMQ key prefix. @defaultValue 'bull' */
  readonly prefix?: string;
}

/** The priority to add the tenant's next job with on `queueName` (updates the queue's fair-share state). */
export async function fairPriority(redis: Redis, queueName: string, share: FairShare, options: FairPriorityOptions = {}): Promise<number> {
  const prefix = options.prefix ?? 'bull';
  const weight = Math.min(MAX_FAIR_WEIGHT, Math.max(MIN_FAIR_WEIGHT, share.weight ?? 1));
  const units = Math.max(0, share.costTokens) / FAIR_UNIT_TOKENS;
  const keys = [fairStateKey(queueName), `${prefix}:${queueName}:prioritized`, `${prefix}:${queueName}:wait`, `${prefix}:${queueName}:delayed`];
  const args = [share.tenant, String(units), String(weight), String(MAX_JOB_PRIORITY)];
  let r: unknown;
  try {
    r = await redis.evalsha(SHA, keys.length, ...keys, ...args);
  } catch (err) {
    if (!(err instanceof Error && err.message.startsWith('NOSCRIPT'))) throw err;
    r = await redis.eval(SCRIPT, keys.length, ...keys, ...args);
  }
  const priority = Number(r);
  return Number.isSafeInteger(priority) && priority >= 1 ? priority : 1;
}

/** The fair-share cost of a decode job: its prompt tokens plus the tokens its choices may generate. */
export function decodeCostTokens(job: { readonly promptIds: readonly unknown[]; readonly maxTokens: number; readonly n?: number | undefined }): number {
  return job.promptIds.length + (job.n ?? 1) * job.maxTokens;
}
