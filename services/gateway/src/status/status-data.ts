/**
 * @module status/status-data
 * What the status page shows, collected for one viewer's scope:
 *
 * - operator (CSA2_OPERATOR_KEYS): every tenant (those of the API keys and any with jobs), the
 *   queues and their backlog, the workers alive on each queue, this gateway's recent traffic;
 * - tenant (an API key): its own documents and batches only — queues, workers and traffic are
 *   aggregates over every tenant, so a tenant does not see them.
 *
 * Documents: ready ones from the tenant's manifests in the store (their count, and the first
 * STATUS_LIST_LIMIT with their size), queued / encoding (with progress) / failed ones from the
 * prefill queue's document jobs. Batches: the tenant's newest STATUS_LIST_LIMIT. A part that cannot
 * be read (Redis or the store down) is reported as unavailable instead of failing the page.
 */
import { parseManifest, manifestObjectKey, tenantPrefix } from '@csa2/artifacts';
import { parseFailure, type Job, type PrefillJob, type PrefillResult } from '@csa2/jobs';
import type { GatewayDeps } from '../capabilities.js';
import { RESERVED_DOCUMENT_PREFIX } from '../documents.js';
import { batchObject, type BatchObject } from '../batch/batch-object.js';
import type { TrafficSummary, TrafficWindow } from './traffic-window.js';

/** The capabilities this module takes. */
export type StatusDeps = Pick<GatewayDeps, 'apiKeys' | 'backlog' | 'batches' | 'config' | 'model' | 'queues' | 'redis' | 'store'>;

/** Rows listed per tenant and kind. */
export const STATUS_LIST_LIMIT = 10;
/** Prefill jobs read per state. */
const JOB_SCAN = 500;

export type StatusScope = { readonly kind: 'operator' } | { readonly kind: 'tenant'; readonly tenant: string };

export interface DocumentRow {
  readonly id: string;
  readonly tokens: number | null;
  readonly tokensDone?: number;
  readonly bytes?: number;
  readonly reason?: string;
}

export interface TenantStatus {
  readonly tenant: string;
  readonly readyCount: number;
  readonly ready: readonly DocumentRow[];
  readonly encoding: readonly DocumentRow[];
  readonly queued: readonly DocumentRow[];
  readonly failed: readonly DocumentRow[];
  readonly batches: readonly BatchObject[];
}

export interface QueueStatus {
  readonly queue: string;
  readonly waiting: number;
  /** Jobs waiting in fair-share order (every job the gateways and encoders add has a fair-queuing priority). */
  readonly prioritized: number;
  readonly delayed: number;
  readonly active: number;
  readonly failed: number;
  readonly workers: number;
  readonly backlogTokens?: number;
}

export interface WorkerRow {
  readonly queue: string;
  readonly addr: string;
  readonly ageS: number;
  readonly idleS: number;
}

export interface StatusData {
  readonly generatedAtMs: number;
  readonly scope: StatusScope;
  readonly model: string;
  readonly uptimeS: number;
  readonly checks: { readonly redis: boolean; readonly store: boolean };
  readonly tenants: readonly TenantStatus[];
  /** Operator scope only. */
  readonly queues: readonly QueueStatus[] | null;
  readonly workers: readonly WorkerRow[] | null;
  readonly traffic: TrafficSummary | null;
  /** Parts that could not be read, with why. */
  readonly unavailable: readonly string[];
}

async function attempt<T>(unavailable: string[], what: string, read: () => Promise<T>, fallback: T): Promise<T> {
  try {
    return await read();
  } catch (err) {
    unavailable.push(`${what}: ${err instanceof Error ? err.message : String(err)}`);
    return fallback;
  }
}

function documentJob(job: Job<PrefillJob, PrefillResult> | undefined): { tenant: string; documentId: string; tokens: number | null } | null {
  const data = job?.data as Partial<PrefillJob> | undefined;
  if (data?.kind !== 'document' || typeof data.tenant !== 'string' || typeof data.documentId !== 'string') return null;
  const input = data.input as { tokenIds?: unknown } | undefined;
  return { tenant: data.tenant, documentId: data.documentId, tokens: Array.isArray(input?.tokenIds) ? input.tokenIds.length : null };
}

interface JobDocs {
  readonly encoding: Map<string, DocumentRow[]>;
  readonly queued: Map<string, DocumentRow[]>;
  readonly failed: Map<string, DocumentRow[]>;
}

async function documentJobs(deps: StatusDeps): Promise<JobDocs> {
  const q = deps.queues.prefill;
  const group = async (
    states: ('active' | 'waiting' | 'prioritized' | 'delayed' | 'failed')[],
    row: (job: Job<PrefillJob, PrefillResult>, d: NonNullable<ReturnType<typeof documentJob>>) => DocumentRow,
  ): Promise<Map<string, DocumentRow[]>> => {
    const out = new Map<string, DocumentRow[]>();
    for (const job of await q.getJobs(states, 0, JOB_SCAN - 1)) {
      const d = documentJob(job);
      if (d === null) continue;
      out.set(d.tenant, [...(out.get(d.tenant) ?? []), row(job, d)]);
    }
    return out;
  };
  return {
    encoding: await group(['active'], (job, d) => {
      const p = job.progress as { tokensDone?: unknown; tokensTotal?: unknown } | undefined;
      const total = typeof p?.tokensTotal === 'number' ? p.tokensTotal : d.tokens;
      return { id: d.documentId, tokens: total, tokensDone: typeof p?.tokensDone === 'number' ? p.tokensDone : 0 };
    }),
    queued: await group(['waiting', 'prioritized', 'delayed'], (_job, d) => ({ id: d.documentId, tokens: d.tokens })),
    failed: await group(['failed'], (job, d) => ({ id: d.documentId, tokens: d.tokens, reason: parseFailure(job.failedReason ?? '').message })),
  };
}

async function readyDocuments(deps: StatusDeps, tenant: string): Promise<{ count: number; rows: DocumentRow[] }> {
  const prefix = `${tenantPrefix(tenant)}documents/`;
  const ids = (await deps.store.list(prefix))
    .map((o) => o.key.slice(prefix.length))
    .filter((rest) => rest.endsWith('/manifest.json'))
    .map((rest) => rest.slice(0, -'/manifest.json'.length))
    .filter((id) => !id.startsWith(RESERVED_DOCUMENT_PREFIX));
  const rows: DocumentRow[] = [];
  for (const id of ids.slice(0, STATUS_LIST_LIMIT)) {
    try {
      const key = manifestObjectKey(tenant, id);
      const m = parseManifest(key, await deps.store.get(key));
      rows.push({ id, tokens: m.tokenCount, bytes: m.chunks.reduce((a, c) => a + c.sizeBytes, 0) });
    } catch {
      rows.push({ id, tokens: null }); // deleted meanwhile, or unreadable: listed without size
    }
  }
  return { count: ids.length, rows };
}

async function queueStatus(deps: StatusDeps, unavailable: string[]): Promise<{ queues: QueueStatus[]; workers: WorkerRow[] }> {
  const backlog = await deps.backlog.collect();
  const sources = [
    { queue: 'prefill', q: deps.queues.prefill, b: backlog.prefill },
    { queue: 'decode', q: deps.queues.decode, b: backlog.decode },
    { queue: 'batch', q: deps.batches.queue, b: null },
  ] as const;
  const queues: QueueStatus[] = [];
  const workers: WorkerRow[] = [];
  for (const { queue, q, b } of sources) {
    const counts = await q.getJobCounts('wait', 'prioritized', 'delayed', 'active', 'failed');
    const list = await attempt(unavailable, `${queue} workers`, () => q.getWorkers(), []);
    for (const w of list) workers.push({ queue, addr: w['addr'] ?? '?', ageS: Number(w['age'] ?? 0), idleS: Number(w['idle'] ?? 0) });
    queues.push({
      queue,
      waiting: b?.waitJobs ?? counts['wait'] ?? 0,
      prioritized: b?.prioritizedJobs ?? counts['prioritized'] ?? 0,
      delayed: b?.delayedJobs ?? counts['delayed'] ?? 0,
      active: b?.activeJobs ?? counts['active'] ?? 0,
      failed: counts['failed'] ?? 0,
      workers: list.length,
      ...(queue === 'prefill' ? { backlogTokens: backlog.prefill.backlogTokens } : {}),
    });
  }
  return { queues, workers };
}

export async function collectStatus(deps: StatusDeps, scope: StatusScope, traffic: TrafficWindow): Promise<StatusData> {
  const unavailable: string[] = [];
  const timeoutMs = deps.config.readyTimeoutMs;
  const ping = async (check: () => Promise<unknown>): Promise<boolean> => {
    try {
      await Promise.race([check(), new Promise((_, reject) => setTimeout(() => reject(new Error('timeout')), timeoutMs).unref())]);
      return true;
    } catch {
      return false;
    }
  };
  const checks = { redis: await ping(() => deps.redis.ping()), store: await ping(() => deps.store.ping()) };
  const jobs = checks.redis ? await attempt(unavailable, 'document jobs', () => documentJobs(deps), null) : null;
  if (!checks.redis) unavailable.push('Redis: not reachable (queues, jobs and batches unknown)');
  if (!checks.store) unavailable.push('object store: not reachable (ready documents unknown)');
  let tenants: string[];
  if (scope.kind === 'tenant') tenants = [scope.tenant];
  else {
    const seen = new Set(deps.apiKeys.values());
    for (const m of [jobs?.encoding, jobs?.queued, jobs?.failed]) for (const t of m?.keys() ?? []) seen.add(t);
    tenants = [...seen].sort();
  }
  const rows: TenantStatus[] = [];
  for (const tenant of tenants) {
    const ready = checks.store
      ? await attempt(unavailable, `documents of ${tenant}`, () => readyDocuments(deps, tenant), { count: 0, rows: [] })
      : { count: 0, rows: [] };
    const batches = checks.redis
      ? await attempt(unavailable, `batches of ${tenant}`, () => deps.batches.store.list(tenant, { limit: STATUS_LIST_LIMIT }), { data: [], hasMore: false })
      : { data: [], hasMore: false };
    rows.push({
      tenant,
      readyCount: ready.count,
      ready: ready.rows,
      encoding: (jobs?.encoding.get(tenant) ?? []).slice(0, STATUS_LIST_LIMIT),
      queued: jobs?.queued.get(tenant) ?? [],
      failed: (jobs?.failed.get(tenant) ?? []).slice(0, STATUS_LIST_LIMIT),
      batches: batches.data.map(batchObject),
    });
  }
  const operator = scope.kind === 'operator';
  const q = operator && checks.redis ? await attempt(unavailable, 'queues', () => queueStatus(deps, unavailable), null) : null;
  return {
    generatedAtMs: Date.now(),
    scope,
    model: deps.model.name,
    uptimeS: Math.max(0, Math.floor(Date.now() / 1000) - deps.model.createdS),
    checks,
    tenants: rows,
    queues: q?.queues ?? null,
    workers: q?.workers ?? null,
    traffic: operator ? await traffic.summary() : null,
    unavailable,
  };
}
