/**
 * @module backlog
 * The work waiting for each worker role, read from Redis, as numbers an autoscaler can use, and its
 * Prometheus text rendering (the gateway serves it on /metrics; KEDA reads it through Prometheus).
 *
 * Why not KEDA's redis-list trigger: it reads `LLEN bull:<queue>:wait` only, and BullMQ keeps
 * prioritized jobs in `bull:<queue>:prioritized` and delayed ones (including retries waiting out
 * their backoff) in `bull:<queue>:delayed`, so it under-counts whenever the gateway sets a priority
 * or a job is retried.
 *
 * What counts, per queue (one MULTI/EXEC, so the states are one consistent snapshot):
 *
 * | field | Redis key (prefix `bull`) | meaning |
 * |---|---|---|
 * | waitJobs | `bull:<q>:wait` (list) | ready to run; a paused queue keeps its jobs here (BullMQ ≥ 5) |
 * | prioritizedJobs | `bull:<q>:prioritized` (zset) | ready to run, added with a priority |
 * | delayedJobs | `bull:<q>:delayed` (zset) | due later: `delay` option, or a retry's backoff |
 * | backlogJobs | the three above | accepted, not yet running |
 * | activeJobs | `bull:<q>:active` (list) | running on a worker now (not backlog) |
 * | paused | `bull:<q>:meta` field `paused` | Queue.pause(): its waiting jobs still count as backlog |
 *
 * Completed, failed and waiting-children jobs never count (the pipeline uses no flows).
 *
 * Prefill tokens (the prefill queue's unit of work): the sum over its backlog jobs of the tokens the
 * encoder will encode — a document's `input.tokenIds.length` (or `input.tokensRef.count` when the list
 * is in the object store), or for a document given as
 * `input.text` its UTF-8 byte length + 1 (an upper bound: a byte-level BPE token covers at least one
 * byte, +1 for a BOS token the tokenizer may add; the gateway always enqueues token ids, so this
 * only applies to other producers), and a long prompt's `tokenIds.length` or `tokensRef.count` (its `decode.promptIds`
 * are the decoder's work, not the encoder's). Active prefill tokens are what the running jobs still
 * have to encode: tokens − `progress.tokensDone` when the job reported PrefillProgress.
 *
 * Cost: job ids are read every collection; a job's payload is read once per (job id, timestamp)
 * and its token count cached by the collector (a re-added job with the same id has a new
 * timestamp, so it is read again).
 */
import type { Redis } from 'ioredis';
import { DECODE_QUEUE, PREFILL_QUEUE } from './queues.js';

export type BacklogQueueLabel = 'prefill' | 'decode';

/** Job counts of one queue. */
export interface QueueBacklog {
  /** The metrics' `queue` label. */
  readonly queue: BacklogQueueLabel;
  /** The BullMQ queue name. */
  readonly queueName: string;
  readonly waitJobs: number;
  readonly prioritizedJobs: number;
  readonly delayedJobs: number;
  /** waitJobs + prioritizedJobs + delayedJobs. */
  readonly backlogJobs: number;
  readonly activeJobs: number;
  readonly paused: boolean;
}

/** The prefill queue's counts plus its tokens. */
export interface PrefillBacklog extends QueueBacklog {
  /** Tokens of the backlog jobs (see the module header for how each payload is counted). */
  readonly backlogTokens: number;
  /** Tokens the running jobs still have to encode. */
  readonly activeTokens: number;
  /** Backlog or active jobs whose payload is not a prefill job (counted as jobs, 0 tokens). */
  readonly unrecognizedJobs: number;
}

export interface Backlog {
  readonly prefill: PrefillBacklog;
  readonly decode: QueueBacklog;
  /** When the snapshot was taken (ms since epoch). */
  readonly collectedAtMs: number;
}

export interface BacklogOptions {
  /** BullMQ key prefix. @defaultValue 'bull' */
  readonly prefix?: string;
  /** @defaultValue PREFILL_QUEUE ('csa2-prefill') */
  readonly prefillQueue?: string;
  /** @defaultValue DECODE_QUEUE ('csa2-decode') */
  readonly decodeQueue?: string;
}

export interface BacklogCollector {
  /** One snapshot of both queues. Rejects when Redis does (callers add their own timeout). */
  collect(): Promise<Backlog>;
}

/**
 * Tokens an encoder will encode for this prefill payload, or null when it is not one.
 * Structural and cheap (no schema parse): see the module header for the rules.
 *
 * @example estimatePrefillTokens({ kind: 'document', input: { tokenIds: [1, 2, 3] } }) // 3
 */
export function estimatePrefillTokens(data: unknown): number | null {
  if (typeof data !== 'object' || data === null) return null;
  const d = data as { kind?: unknown; input?: unknown; tokenIds?: unknown; tokensRef?: unknown };
  const refCount = (ref: unknown): number | null => {
    const count = typeof ref === 'object' && ref !== null ? (ref as { count?: unknown }).count : undefined;
    return typeof count === 'number' && Number.isSafeInteger(count) && count >= 0 ? count : null;
  };
  if (d.kind === 'prompt') return Array.isArray(d.tokenIds) ? d.tokenIds.length : refCount(d.tokensRef);
  if (d.kind === 'document' && typeof d.input === 'object' && d.input !== null) {
    const input = d.input as { tokenIds?: unknown; text?: unknown; tokensRef?: unknown };
    if (Array.isArray(input.tokenIds)) return input.tokenIds.length;
    if (typeof input.text === 'string') return Buffer.byteLength(input.text, 'utf8') + 1;
    if (input.tokensRef !== undefined) return refCount(input.tokensRef);
  }
  return null;
}

interface StateSnapshot {
  readonly wait: string[];
  readonly prioritized: string[];
  readonly delayed: string[];
  readonly active: string[];
  readonly paused: boolean;
}

interface StateCounts {
  readonly wait: number;
  readonly prioritized: number;
  readonly delayed: number;
  readonly active: number;
  readonly paused: boolean;
}

function execResults(results: [Error | null, unknown][] | null, what: string): unknown[] {
  if (results === null) throw new Error(`backlog: the ${what} transaction was aborted`);
  return results.map(([err, value]) => {
    if (err !== null) throw err;
    return value;
  });
}

const stringList = (v: unknown): string[] => (Array.isArray(v) ? v.map(String) : []);
const count = (v: unknown): number => (typeof v === 'number' ? v : Number(v));

/** Ids of the backlog and active jobs of one queue, in one MULTI. */
async function readStateIds(redis: Redis, key: (s: string) => string): Promise<StateSnapshot> {
  const r = execResults(
    await redis
      .multi()
      .lrange(key('wait'), 0, -1)
      .zrange(key('prioritized'), '0', '-1')
      .zrange(key('delayed'), '0', '-1')
      .lrange(key('active'), 0, -1)
      .hget(key('meta'), 'paused')
      .exec(),
    'backlog ids',
  );
  return { wait: stringList(r[0]), prioritized: stringList(r[1]), delayed: stringList(r[2]), active: stringList(r[3]), paused: r[4] === '1' };
}

/** Counts of one queue's states, in one MULTI. */
async function readStateCounts(redis: Redis, key: (s: string) => string): Promise<StateCounts> {
  const r = execResults(
    await redis.multi().llen(key('wait')).zcard(key('prioritized')).zcard(key('delayed')).llen(key('active')).hget(key('meta'), 'paused').exec(),
    'backlog counts',
  );
  return { wait: count(r[0]), prioritized: count(r[1]), delayed: count(r[2]), active: count(r[3]), paused: r[4] === '1' };
}

function tokensDoneOf(progressJson: string | null): number {
  if (progressJson === null) return 0;
  try {
    const p: unknown = JSON.parse(progressJson);
    if (typeof p === 'object' && p !== null && 'tokensDone' in p) {
      const done = (p as { tokensDone: unknown }).tokensDone;
      if (typeof done === 'number' && Number.isFinite(done) && done > 0) return done;
    }
  } catch {
    // a progress value that is not JSON: nothing done as far as we can tell
  }
  return 0;
}

/**
 * A collector that reads both queues on each `collect()` and caches prefill token counts per job.
 * Give it its own connection or a shared non-blocking one (it issues MULTI and pipelines only).
 *
 * @example
 * const collector = createBacklogCollector(redis);
 * const text = renderBacklogMetrics(await collector.collect());
 */
export function createBacklogCollector(redis: Redis, options: BacklogOptions = {}): BacklogCollector {
  const prefix = options.prefix ?? 'bull';
  const prefillQueue = options.prefillQueue ?? PREFILL_QUEUE;
  const decodeQueue = options.decodeQueue ?? DECODE_QUEUE;
  const prefillKey = (s: string): string => `${prefix}:${prefillQueue}:${s}`;
  const decodeKey = (s: string): string => `${prefix}:${decodeQueue}:${s}`;
  /** job id → its timestamp and token estimate (null: not a prefill payload) */
  const tokenCache = new Map<string, { readonly timestamp: string; readonly tokens: number | null }>();

  /** Token estimates and progress of the given jobs; jobs gone since the snapshot map to undefined. */
  async function tokensOf(ids: readonly string[]): Promise<Map<string, { tokens: number | null; tokensDone: number }>> {
    const out = new Map<string, { tokens: number | null; tokensDone: number }>();
    if (ids.length === 0) return out;
    const pipe = redis.pipeline();
    for (const id of ids) pipe.hmget(prefillKey(id), 'timestamp', 'progress');
    const heads = execResults(await pipe.exec(), 'job heads') as (string | null)[][];
    const missing: { id: string; timestamp: string }[] = [];
    ids.forEach((id, i) => {
      const timestamp = heads[i]?.[0] ?? null;
      if (timestamp === null) return; // removed since the snapshot
      if (tokenCache.get(id)?.timestamp !== timestamp) missing.push({ id, timestamp });
    });
    if (missing.length > 0) {
      const dataPipe = redis.pipeline();
      for (const m of missing) dataPipe.hget(prefillKey(m.id), 'data');
      const datas = execResults(await dataPipe.exec(), 'job payloads');
      missing.forEach((m, i) => {
        const raw = datas[i];
        let tokens: number | null = null;
        if (typeof raw === 'string') {
          try {
            tokens = estimatePrefillTokens(JSON.parse(raw));
          } catch {
            tokens = null;
          }
        }
        tokenCache.set(m.id, { timestamp: m.timestamp, tokens });
      });
    }
    ids.forEach((id, i) => {
      const cached = tokenCache.get(id);
      const head = heads[i];
      if (cached === undefined || head === undefined || (head[0] ?? null) === null) return;
      out.set(id, { tokens: cached.tokens, tokensDone: tokensDoneOf(head[1] ?? null) });
    });
    return out;
  }

  return {
    async collect() {
      const collectedAtMs = Date.now();
      const [p, d] = await Promise.all([readStateIds(redis, prefillKey), readStateCounts(redis, decodeKey)]);
      const backlogIds = [...p.wait, ...p.prioritized, ...p.delayed];
      const tokens = await tokensOf([...backlogIds, ...p.active]);
      // forget jobs that left the queue's backlog and active states
      const live = new Set([...backlogIds, ...p.active]);
      for (const id of tokenCache.keys()) if (!live.has(id)) tokenCache.delete(id);

      let backlogTokens = 0;
      let activeTokens = 0;
      let unrecognizedJobs = 0;
      for (const id of backlogIds) {
        const t = tokens.get(id);
        if (t === undefined) continue;
        if (t.tokens === null) unrecognizedJobs++;
        else backlogTokens += t.tokens;
      }
      for (const id of p.active) {
        const t = tokens.get(id);
        if (t === undefined) continue;
        if (t.tokens === null) unrecognizedJobs++;
        else activeTokens += Math.max(0, t.tokens - t.tokensDone);
      }
      return {
        prefill: {
          queue: 'prefill',
          queueName: prefillQueue,
          waitJobs: p.wait.length,
          prioritizedJobs: p.prioritized.length,
          delayedJobs: p.delayed.length,
          backlogJobs: backlogIds.length,
          activeJobs: p.active.length,
          paused: p.paused,
          backlogTokens,
          activeTokens,
          unrecognizedJobs,
        },
        decode: {
          queue: 'decode',
          queueName: decodeQueue,
          waitJobs: d.wait,
          prioritizedJobs: d.prioritized,
          delayedJobs: d.delayed,
          backlogJobs: d.wait + d.prioritized + d.delayed,
          activeJobs: d.active,
          paused: d.paused,
        },
        collectedAtMs,
      };
    },
  };
}

/** One snapshot without a token cache (reads every prefill payload): tests, one-off tools. */
export async function collectBacklog(redis: Redis, options: BacklogOptions = {}): Promise<Backlog> {
  return createBacklogCollector(redis, options).collect();
}

/** The metric names `renderBacklogMetrics` writes (KEDA's queries in infra/k8s use them). */
export const BACKLOG_METRIC_NAMES = {
  backlogJobs: 'csa2_queue_backlog_jobs',
  backlogJobsByState: 'csa2_queue_backlog_jobs_by_state',
  activeJobs: 'csa2_queue_active_jobs',
  paused: 'csa2_queue_paused',
  prefillBacklogTokens: 'csa2_prefill_backlog_tokens',
  prefillActiveTokens: 'csa2_prefill_active_tokens',
} as const;

/**
 * Prometheus text exposition (format 0.0.4) of a snapshot: gauges, one sample per queue.
 *
 * | metric | labels | value |
 * |---|---|---|
 * | csa2_queue_backlog_jobs | queue | wait + prioritized + delayed jobs |
 * | csa2_queue_backlog_jobs_by_state | queue, state (wait, prioritized, delayed) | the three parts |
 * | csa2_queue_active_jobs | queue | jobs running now |
 * | csa2_queue_paused | queue | 1 when the queue is paused (its backlog still counts) |
 * | csa2_prefill_backlog_tokens | – | tokens of the prefill backlog jobs |
 * | csa2_prefill_active_tokens | – | tokens the running prefill jobs still have to encode |
 *
 * Every gateway replica reports the same numbers (they come from Redis): aggregate with `max`,
 * not `sum`.
 */
export function renderBacklogMetrics(backlog: Backlog): string {
  const n = BACKLOG_METRIC_NAMES;
  const queues = [backlog.prefill, backlog.decode];
  const lines: string[] = [];
  const gauge = (name: string, help: string, samples: readonly [labels: string, value: number][]): void => {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} gauge`);
    for (const [labels, value] of samples) lines.push(`${name}${labels} ${value}`);
  };
  gauge(
    n.backlogJobs,
    'Jobs accepted and not yet running (wait + prioritized + delayed), read from Redis',
    queues.map((q) => [`{queue="${q.queue}"}`, q.backlogJobs]),
  );
  gauge(
    n.backlogJobsByState,
    'Backlog jobs per BullMQ state',
    queues.flatMap((q) => [
      [`{queue="${q.queue}",state="wait"}`, q.waitJobs],
      [`{queue="${q.queue}",state="prioritized"}`, q.prioritizedJobs],
      [`{queue="${q.queue}",state="delayed"}`, q.delayedJobs],
    ]),
  );
  gauge(
    n.activeJobs,
    'Jobs running on a worker now',
    queues.map((q) => [`{queue="${q.queue}"}`, q.activeJobs]),
  );
  gauge(
    n.paused,
    '1 when the queue is paused (its backlog still counts)',
    queues.map((q) => [`{queue="${q.queue}"}`, q.paused ? 1 : 0]),
  );
  gauge(n.prefillBacklogTokens, 'Tokens waiting to be encoded by encoder workers (prefill backlog jobs)', [['', backlog.prefill.backlogTokens]]);
  gauge(n.prefillActiveTokens, 'Tokens the running prefill jobs still have to encode', [['', backlog.prefill.activeTokens]]);
  return `${lines.join('\n')}\n`;
}
