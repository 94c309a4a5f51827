/**
 * @module batch/batch-store
 * Batch records in Redis (keys in batch/keys.ts). Every change that must not race is one Lua script:
 *
 * - `transition(from, to)`: the status moves only from one of `from` (cancel against finalize, two
 *   drivers finalizing at once: exactly one wins, the other sees 0);
 * - `markLineDone`: HSETNX of the line's outcome and, only when it was not done yet, the counters and
 *   token usage — a line is counted once however many drivers or restarts report it.
 */
import type { Redis } from '@csa2/jobs';
import { parseBatchRecord, type BatchRecord, type BatchStatus } from './batch-object.js';
import { batchAttemptsKey, batchDoneKey, batchKey, fileRefsKey, tenantBatchesKey } from './keys.js';

/** KEYS[1] batch hash; ARGV[1] allowed statuses (comma-separated), ARGV[2] new status, ARGV[3..] field/value pairs. */
const TRANSITION_SCRIPT = `
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return 0 end
local ok = false
for s in string.gmatch(ARGV[1], '[^,]+') do if s == status then ok = true end end
if not ok then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[2])
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
`;

/** KEYS[1] done hash, KEYS[2] batch hash; ARGV index, 'ok'|'err', prompt, completion, cached tokens. */
const MARK_DONE_SCRIPT = `
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
if ARGV[2] == 'ok' then redis.call('HINCRBY', KEYS[2], 'completed', 1) else redis.call('HINCRBY', KEYS[2], 'failed', 1) end
redis.call('HINCRBY', KEYS[2], 'prompt_tokens', ARGV[3])
redis.call('HINCRBY', KEYS[2], 'completion_tokens', ARGV[4])
redis.call('HINCRBY', KEYS[2], 'cached_tokens', ARGV[5])
return 1
`;

export type LineOutcome = 'ok' | 'err';

export interface LineUsage {
  readonly promptTokens: number;
  readonly completionTokens: number;
  readonly cachedTokens: number;
}

export const NO_USAGE: LineUsage = { promptTokens: 0, completionTokens: 0, cachedTokens: 0 };

export class BatchStore {
  constructor(private readonly redis: Redis) {}

  /** Stores a new batch, lists it under its tenant and pins its input file. */
  async create(tenant: string, inputFileId: string, fields: Readonly<Record<string, string>>): Promise<void> {
    const id = fields['id'] as string;
    await this.redis.multi().hset(batchKey(id), fields).zadd(tenantBatchesKey(tenant), 0, id).sadd(fileRefsKey(tenant, inputFileId), id).exec();
  }

  async get(batchId: string): Promise<BatchRecord | null> {
    return parseBatchRecord(await this.redis.hgetall(batchKey(batchId)));
  }

  async status(batchId: string): Promise<BatchStatus | null> {
    return (await this.redis.hget(batchKey(batchId), 'status')) as BatchStatus | null;
  }

  /** The tenant's batches, newest first, after `after` (an id); `limit` + whether more follow. */
  async list(tenant: string, options: { after?: string | undefined; limit: number }): Promise<{ data: BatchRecord[]; hasMore: boolean }> {
    const ids = await this.redis.zrevrangebylex(
      tenantBatchesKey(tenant),
      options.after === undefined ? '+' : `(${options.after}`,
      '-',
      'LIMIT',
      0,
      options.limit + 1,
    );
    const page = ids.slice(0, options.limit);
    const pipeline = this.redis.pipeline();
    for (const id of page) pipeline.hgetall(batchKey(id));
    const replies = (await pipeline.exec()) ?? [];
    const data: BatchRecord[] = [];
    for (const [err, fields] of replies) {
      if (err !== null) throw err;
      const record = parseBatchRecord(fields as Record<string, string>);
      if (record !== null && record.tenant === tenant) data.push(record);
    }
    return { data, hasMore: ids.length > options.limit };
  }

  /** Moves the status from one of `from` to `to` and sets `fields`; false (nothing changed) when the status was not in `from`. */
  async transition(batchId: string, from: readonly BatchStatus[], to: BatchStatus, fields: Readonly<Record<string, string | number>> = {}): Promise<boolean> {
    const args = Object.entries(fields).flatMap(([k, v]) => [k, String(v)]);
    const r = await this.redis.eval(TRANSITION_SCRIPT, 1, batchKey(batchId), from.join(','), to, ...args);
    return r === 1;
  }

  /** Sets fields without a status change (the total once the input is read). */
  async setFields(batchId: string, fields: Readonly<Record<string, string | number>>): Promise<void> {
    await this.redis.hset(batchKey(batchId), Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, String(v)])));
  }

  /** Marks line `index` done; true when this call did (then counters and usage were added). */
  async markLineDone(batchId: string, index: number, outcome: LineOutcome, usage: LineUsage = NO_USAGE): Promise<boolean> {
    const r = await this.redis.eval(
      MARK_DONE_SCRIPT,
      2,
      batchDoneKey(batchId),
      batchKey(batchId),
      String(index),
      outcome,
      usage.promptTokens,
      usage.completionTokens,
      usage.cachedTokens,
    );
    return r === 1;
  }

  /** Done lines: index → outcome. */
  async doneLines(batchId: string): Promise<Map<number, LineOutcome>> {
    const raw = await this.redis.hgetall(batchDoneKey(batchId));
    return new Map(Object.entries(raw).map(([k, v]) => [Number(k), v === 'ok' ? 'ok' : 'err']));
  }

  /** Submitted lines: index → the attempt they were submitted under (1-based). */
  async attempts(batchId: string): Promise<Map<number, number>> {
    const raw = await this.redis.hgetall(batchAttemptsKey(batchId));
    return new Map(Object.entries(raw).map(([k, v]) => [Number(k), Number(v)]));
  }

  /** Records that line `index` is (about to be) submitted under `attempt`. */
  async setAttempt(batchId: string, index: number, attempt: number): Promise<void> {
    await this.redis.hset(batchAttemptsKey(batchId), String(index), String(attempt));
  }

  /** Drops the per-line bookkeeping and the input file's pin (after the batch ended). */
  async cleanup(batch: Pick<BatchRecord, 'id' | 'tenant' | 'inputFileId'>): Promise<void> {
    await this.redis.multi().del(batchDoneKey(batch.id), batchAttemptsKey(batch.id)).srem(fileRefsKey(batch.tenant, batch.inputFileId), batch.id).exec();
  }

  /** Batches (not ended) that read the file. */
  async fileRefs(tenant: string, fileId: string): Promise<string[]> {
    return this.redis.smembers(fileRefsKey(tenant, fileId));
  }
}
