/**
 * @module documents
 * Documents: ingest, status, delete, all tenant-scoped. A document's status is derived, never
 * stored twice:
 *
 * - `ready`    — its manifest exists in the object store (written last by the encoder, so a manifest
 *                means a complete artifact): tokens and bytes come from the manifest;
 * - `queued`   — its prefill job (`doc.<tenant>.<id>`) is waiting, prioritized, delayed or retrying;
 * - `encoding` — the job is active; progress is the job's PrefillProgress (tokensDone / tokensTotal);
 * - `failed`   — the job failed for good (its failedReason's `[code]`, with the code's public
 *                message: the worker's own message stays in its log), or it completed but no
 *                manifest is there (deleted meanwhile), or a reader found its stored artifact
 *                damaged: a chunk missing (`artifact-missing`, storage loss) or failing
 *                verification (`artifact-corrupt`). Completions that read a document report such a
 *                failure here (`markDocumentDamaged`, a Redis flag tied to the manifest's createdAt),
 *                so the status says what the completions say (a 5xx storage error, not `ready`);
 * - unknown (404) — neither a manifest nor a job.
 *
 * Ids are immutable: posting an id that is queued, encoding or ready returns its status and changes
 * nothing (delete it first to replace it); posting a failed id enqueues it again (a damaged one
 * loses its manifest first, so it reads as queued until the encoder wrote it again). Deleting removes
 * the manifest and the job record; chunk objects are content-addressed and may be shared with
 * other documents of the tenant, so they stay (garbage collection of unreferenced chunks is a
 * separate, offline concern). A document being encoded cannot be deleted (409).
 */
import {
  DEFAULT_PREFILL_JOB_OPTIONS,
  MAX_INLINE_TOKEN_IDS,
  PREFILL_JOB_NAME,
  PREFILL_QUEUE,
  documentDamageKey,
  documentFlow,
  fairPriority,
  documentJobId,
  parseFailure,
  parsePrefillJob,
  type Job,
  type PrefillJob,
  type PrefillProgress,
  type PrefillResult,
} from '@csa2/jobs';
import { deleteTokenList, manifestObjectKey, parseManifest, putTokenList, type DocumentManifest } from '@csa2/artifacts';
import { ApiError, publicMessage } from './errors.js';
import type { GatewayDeps } from './capabilities.js';

/** The capabilities this module takes. */
export type DocumentDeps = Pick<GatewayDeps, 'logger' | 'metrics' | 'model' | 'once' | 'queues' | 'redis' | 'store'>;

export type DocumentState =
  | { readonly status: 'queued'; readonly createdS: number; readonly tokensTotal: number | null }
  | { readonly status: 'encoding'; readonly createdS: number; readonly tokensDone: number; readonly tokensTotal: number | null }
  | { readonly status: 'ready'; readonly createdS: number; readonly tokens: number; readonly bytes: number; readonly manifest: DocumentManifest }
  | {
      readonly status: 'failed';
      readonly createdS: number;
      readonly reason: string;
      readonly code: string;
      /** The manifest of a damaged artifact (a STORAGE_FAILURE_CODES code). */
      readonly manifest?: DocumentManifest;
    };

/** Failure codes of a damaged stored artifact (storage loss or corruption): server-side, 5xx. */
export const STORAGE_FAILURE_CODES: ReadonlySet<string> = new Set(['artifact-missing', 'artifact-corrupt']);

const DAMAGE_REASON: Readonly<Record<string, string>> = {
  'artifact-missing': 'part of the stored artifact is missing from the object store (storage loss); post the document again (or delete it) to re-encode it',
  'artifact-corrupt': 'part of the stored artifact failed verification (a corrupt object); post the document again (or delete it) to re-encode it',
};

/** Damage flags outlive a forgotten document this long at most. */
const DAMAGE_TTL_SECONDS = 30 * 24 * 3600;

/**
 * Records that a reader found the document's artifact damaged (`code` is a STORAGE_FAILURE_CODES
 * member): its status turns `failed` with that code until it is posted again or deleted. The flag
 * names the manifest (its createdAt), so a document ingested anew after it is not affected.
 * Best-effort: a Redis failure is logged, not thrown.
 */
export async function markDocumentDamaged(deps: DocumentDeps, tenant: string, documentId: string, manifestCreatedAt: string, code: string): Promise<void> {
  if (!STORAGE_FAILURE_CODES.has(code)) return;
  try {
    await deps.redis.set(documentDamageKey(tenant, documentId), JSON.stringify({ code, manifestCreatedAt }), 'EX', DAMAGE_TTL_SECONDS);
  } catch (err) {
    deps.logger.warn({ tenant, documentId, code, err: err instanceof Error ? err.message : String(err) }, 'could not flag the document as damaged');
  }
}

/** The damage recorded for this manifest, or null (also when Redis cannot say: the manifest is then all we know). */
async function damageOf(deps: DocumentDeps, manifest: DocumentManifest): Promise<string | null> {
  let raw: string | null;
  try {
    raw = await deps.redis.get(documentDamageKey(manifest.tenant, manifest.documentId));
  } catch {
    return null;
  }
  if (raw === null) return null;
  try {
    const flag = JSON.parse(raw) as { code?: unknown; manifestCreatedAt?: unknown };
    return flag.manifestCreatedAt === manifest.createdAt && typeof flag.code === 'string' && STORAGE_FAILURE_CODES.has(flag.code) ? flag.code : null;
  } catch {
    return null;
  }
}

/** Ids starting with this are the artifacts of long prompts (promptDocumentId); clients cannot take them. */
export const RESERVED_DOCUMENT_PREFIX = 'prompt-';

function isNotFound(err: unknown): boolean {
  return typeof err === 'object' && err !== null && 'code' in err && err.code === 'not-found';
}

/** The document's manifest, or null when there is none. Throws on a store failure or a manifest that does not belong here. */
export async function readManifest(deps: DocumentDeps, tenant: string, documentId: string): Promise<DocumentManifest | null> {
  const key = manifestObjectKey(tenant, documentId);
  let bytes: Uint8Array;
  try {
    bytes = await deps.store.get(key);
  } catch (err) {
    if (isNotFound(err)) return null;
    throw err;
  }
  const manifest = parseManifest(key, bytes);
  if (manifest.tenant !== tenant || manifest.documentId !== documentId) {
    throw new ApiError(500, `the manifest stored for document ${documentId} names another document`, { code: 'artifact_corrupt' });
  }
  return manifest;
}

/** What the document holds in the store: its chunks and its stored encoder tail. */
function manifestBytes(manifest: DocumentManifest): number {
  return manifest.chunks.reduce((sum, c) => sum + c.sizeBytes, 0) + (manifest.tail?.sizeBytes ?? 0);
}

/** `ready` from the manifest, or `failed` when a reader found the artifact damaged. */
async function readyState(deps: DocumentDeps, manifest: DocumentManifest): Promise<DocumentState> {
  const createdS = Math.floor(Date.parse(manifest.createdAt) / 1000);
  const damage = await damageOf(deps, manifest);
  if (damage !== null) return { status: 'failed', createdS, reason: DAMAGE_REASON[damage] ?? 'the stored artifact is damaged', code: damage, manifest };
  const bytes = manifestBytes(manifest);
  await deps.once.run(`artifact:${manifest.tenant}/${manifest.documentId}/${manifest.createdAt}`, async () => {
    deps.metrics.artifactBytes.inc({ kind: 'document' }, bytes);
    // A job that ran between two status reads was never seen active: its queue wait is observed now.
    const job = await deps.queues.prefill.getJob(documentJobId(manifest.tenant, manifest.documentId)).catch(() => undefined);
    if (job !== undefined) await observeQueueWait(deps, job);
  });
  return { status: 'ready', createdS, tokens: manifest.tokenCount, bytes, manifest };
}

function tokensOf(job: Job<PrefillJob, PrefillResult>): number | null {
  const input: unknown = (job.data as { input?: unknown } | undefined)?.input;
  if (typeof input === 'object' && input !== null && 'tokenIds' in input && Array.isArray(input.tokenIds)) return input.tokenIds.length;
  return tokensRefOf(job)?.count ?? null;
}

/** The stored token list of a document job's input, or null (inline, or not a document job). */
function tokensRefOf(job: Job<PrefillJob, PrefillResult>): { key: string; count: number } | null {
  const input: unknown = (job.data as { input?: unknown } | undefined)?.input;
  if (typeof input !== 'object' || input === null || !('tokensRef' in input)) return null;
  const ref = input.tokensRef as { key?: unknown; count?: unknown } | null;
  return typeof ref?.key === 'string' && typeof ref.count === 'number' ? { key: ref.key, count: ref.count } : null;
}

/**
 * When the document was accepted: the payload's acceptedAtMs, which the encoder also writes into the
 * manifest (createdAt), so `created_at` is the same while queued, encoding and once ready. A job
 * without one (another producer) falls back to its BullMQ timestamp.
 */
function acceptedAtMsOf(job: Job<PrefillJob, PrefillResult>): number {
  const at: unknown = (job.data as { acceptedAtMs?: unknown } | undefined)?.acceptedAtMs;
  return typeof at === 'number' && Number.isFinite(at) && at >= 0 ? at : job.timestamp;
}

function progressOf(job: Job<PrefillJob, PrefillResult>): PrefillProgress | null {
  const p: unknown = job.progress;
  if (typeof p !== 'object' || p === null) return null;
  const { tokensDone, tokensTotal } = p as Record<string, unknown>;
  if (typeof tokensDone !== 'number' || typeof tokensTotal !== 'number') return null;
  return { tokensDone, tokensTotal };
}

async function observeQueueWait(deps: DocumentDeps, job: Job<PrefillJob, PrefillResult>): Promise<void> {
  const { processedOn, timestamp } = job;
  if (processedOn === undefined || processedOn < timestamp) return;
  await deps.once.run(`wait:${job.id ?? '?'}:${timestamp}`, () => deps.metrics.queueWait.observe({ queue: 'prefill' }, (processedOn - timestamp) / 1000));
}

/** The document's job and state, or null when neither a manifest nor a job exists. */
export async function documentStatus(
  deps: DocumentDeps,
  tenant: string,
  documentId: string,
): Promise<{ state: DocumentState; job: Job<PrefillJob, PrefillResult> | null } | null> {
  const manifest = await readManifest(deps, tenant, documentId);
  if (manifest !== null) return { state: await readyState(deps, manifest), job: null };
  // State first, then the job: the job read is then at least as new as the state (a failed job
  // already has its failedReason, an active one its latest progress).
  const jobId = documentJobId(tenant, documentId);
  const state = await deps.queues.prefill.getJobState(jobId);
  const job = state === 'unknown' ? undefined : await deps.queues.prefill.getJob(jobId);
  if (job === undefined) return null;
  const createdS = Math.floor(acceptedAtMsOf(job) / 1000);
  switch (state) {
    case 'active': {
      await observeQueueWait(deps, job);
      const p = progressOf(job);
      return { state: { status: 'encoding', createdS, tokensDone: p?.tokensDone ?? 0, tokensTotal: p?.tokensTotal ?? tokensOf(job) }, job };
    }
    case 'completed': {
      await observeQueueWait(deps, job);
      const late = await readManifest(deps, tenant, documentId);
      if (late !== null) return { state: await readyState(deps, late), job };
      return { state: { status: 'failed', createdS, reason: 'the document was encoded but its manifest is gone (deleted?)', code: 'not-found' }, job };
    }
    case 'failed': {
      await observeQueueWait(deps, job);
      // the worker's message (keys, offsets, checksums) stays in the worker's log: the client gets the code's
      const { code } = parseFailure(job.failedReason ?? '');
      return { state: { status: 'failed', createdS, reason: publicMessage(code), code }, job };
    }
    case 'unknown':
      return null;
    default:
      // waiting, prioritized, delayed (a retry's backoff), waiting-children
      return { state: { status: 'queued', createdS, tokensTotal: tokensOf(job) }, job };
  }
}

/** The JSON object of a document. */
export function documentObject(id: string, state: DocumentState): Record<string, unknown> {
  const base = { id, object: 'document', status: state.status, created_at: state.createdS };
  switch (state.status) {
    case 'queued':
      return { ...base, tokens: state.tokensTotal };
    case 'encoding':
      return { ...base, tokens: state.tokensTotal, progress: { tokens_done: state.tokensDone, tokens_total: state.tokensTotal } };
    case 'ready':
      return { ...base, tokens: state.tokens, bytes: state.bytes };
    case 'failed':
      return { ...base, reason: state.reason, error_code: state.code.replaceAll('-', '_') };
  }
}

/**
 * Enqueues a document's prefill job unless the id is already queued, encoding or ready (then its
 * status is returned unchanged). The caller checked the ids, token limits and queue capacity.
 */
export interface IngestOptions {
  /** The flow's fair-share weight (the key's; a batch line's: times CSA2_BATCH_WEIGHT). @defaultValue 1 */
  readonly weight?: number;
  /** A batch line: the job goes to the tenant's batch flow (fairFlow), not its interactive one. */
  readonly batch?: boolean;
  /** The HTTP request's x-request-id, for the worker's logs. */
  readonly reqId?: string;
  /** Called with the job id when a prefill job was enqueued (not when the id was queued, encoding or ready already). */
  readonly onEnqueued?: (jobId: string) => void;
}

export async function ingestDocument(
  deps: DocumentDeps,
  tenant: string,
  documentId: string,
  tokenIds: readonly number[],
  acceptedAtMs: number,
  options: IngestOptions = {},
): Promise<DocumentState> {
  const existing = await documentStatus(deps, tenant, documentId);
  if (existing !== null && existing.state.status !== 'failed') return existing.state;
  if (existing?.job !== null && existing?.job !== undefined) await existing.job.remove();
  if (existing?.state.status === 'failed' && existing.state.manifest !== undefined) {
    // a damaged artifact: without its manifest the document reads as queued until it is encoded again
    // (the encoder re-uses the chunks that are intact and writes the missing or corrupt ones)
    await deps.store.delete(manifestObjectKey(tenant, documentId));
    await deps.redis.del(documentDamageKey(tenant, documentId));
  }
  // a long document travels through the object store, not the payload Redis keeps (the encoder deletes it)
  const jobId = documentJobId(tenant, documentId);
  const input = tokenIds.length > MAX_INLINE_TOKEN_IDS ? { tokensRef: await putTokenList(deps.store, tenant, jobId, tokenIds) } : { tokenIds: [...tokenIds] };
  const reqId = options.reqId !== undefined ? { reqId: options.reqId } : {};
  const data = parsePrefillJob({ v: 1, kind: 'document', ...reqId, tenant, documentId, model: deps.model.name, input, acceptedAtMs } satisfies PrefillJob);
  // fair shares between tenants (a tenant's documents and its batch lines are flows of their own,
  // apart from its long prompts): the job's priority is its start tag (fair-priority)
  const priority = await fairPriority(deps.redis, PREFILL_QUEUE, {
    tenant: documentFlow(tenant, options.batch === true),
    costTokens: tokenIds.length,
    ...(options.weight !== undefined ? { weight: options.weight } : {}),
  });
  await deps.queues.prefill.add(PREFILL_JOB_NAME, data, { ...DEFAULT_PREFILL_JOB_OPTIONS, jobId, priority });
  options.onEnqueued?.(jobId);
  deps.metrics.prefillTokens.inc({ kind: 'document' }, tokenIds.length);
  return { status: 'queued', createdS: Math.floor(acceptedAtMs / 1000), tokensTotal: tokenIds.length };
}

/** Removes the document's job record and manifest; false when neither existed. 409 while it is being encoded. */
export async function deleteDocument(deps: DocumentDeps, tenant: string, documentId: string): Promise<boolean> {
  const job = await deps.queues.prefill.getJob(documentJobId(tenant, documentId));
  let existed = false;
  if (job !== undefined) {
    const state = await job.getState();
    const busy = (): ApiError =>
      new ApiError(409, `document ${documentId} is being encoded; delete it once it is ready or failed`, { param: 'id', code: 'document_busy' });
    if (state === 'active') throw busy();
    try {
      await job.remove();
    } catch (err) {
      // A worker took the job between getState and remove (it is locked now).
      if (err instanceof Error && /locked|could not remove/i.test(err.message)) throw busy();
      throw err;
    }
    existed = state !== 'unknown';
    // a job removed before it ran leaves its stored input behind: nobody else deletes it
    const ref = tokensRefOf(job);
    if (ref !== null) await deleteTokenList(deps.store, ref);
  }
  const key = manifestObjectKey(tenant, documentId);
  if ((await deps.store.head(key)) !== null) {
    await deps.store.delete(key);
    existed = true;
  }
  await deps.redis.del(documentDamageKey(tenant, documentId));
  return existed;
}
