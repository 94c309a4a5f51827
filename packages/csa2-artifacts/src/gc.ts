/**
 * @module gc
 * Garbage collection of chunk objects that no manifest references, safe against ingests that are
 * writing chunks or about to adopt them. `csa2 gc` runs it (by hand, or from the Kubernetes CronJob
 * in infra/k8s); it only ever deletes, per tenant, chunk objects (`chunks/`), abandoned ingest markers
 * (`ingests/`) and expired prompt manifests (`documents/prompt-…/manifest.json`); nothing else in
 * the store is looked at.
 *
 * ## The rule
 * For each tenant T, in this order: list T's chunks (with last-modified times), list T's ingest
 * markers, list and read T's manifests. A chunk C is deleted only if
 *   (1) no manifest read in that last step names C, and
 *   (2) C's last-modified time is before the cutoff, checked again at the deletion itself
 *       (`store.deleteIfUnmodifiedSince`), where
 *         cutoff = min(now, start of the oldest LIVE ingest marker of T) − graceMs
 *       and a marker is live while its last-modified time is within markerTtlMs of now.
 * A manifest that cannot be read or parsed (corrupt, a newer format) stops all deletions in T: what
 * it references is unknown. Markers older than markerTtlMs are deleted (again checked at deletion).
 *
 * ## The invariant writers rely on
 * A chunk is never deleted while a manifest that names it exists; and a chunk an ingest relies on is
 * either kept or found missing by that ingest before its manifest counts on it. The writer's side
 * (writer): it puts its marker before its first store operation and deletes it after its manifest;
 * it touches every stored chunk it relies on (`existingChunkPrefix`, adoption, skipped puts), so each
 * chunk of its manifest was written or touched by it after its marker's start; after writing the
 * manifest it checks every chunk and writes missing ones again from its Sequence.
 *
 * Why the races are covered (tk, tL: when gc listed markers, manifests; M a manifest naming C, written
 * at tm by writer W whose marker started at ts; C last written or touched by W at tc ≥ ts):
 * - tm < tL: gc read M, (1) keeps C.
 * - tm > tL, gc's final check of C after tc: C's time is tc ≥ ts. If W's marker was live at tk, the
 *   cutoff is ≤ ts − grace < tc; if W started after tk, the cutoff is ≤ tk − grace < tc. (2) keeps C.
 *   This is the case "a chunk written just before (or while) gc runs survives" and also covers
 *   ingests longer than the grace period, as long as their marker is renewed.
 * - tm > tL, final check before tc: the filesystem store checks and deletes atomically, so W's touch at
 *   tc finds no object: existingChunkPrefix reports a shorter prefix (W encodes the chunk), a skipped
 *   put becomes a write, an adoption fails (the job is retried). On S3 the check (HEAD) and DELETE are
 *   two requests: a touch landing between them is lost; W's check after its manifest then finds C
 *   missing and writes it again (stats.chunksRestored). What remains is a DELETE that reaches S3
 *   later than W takes from its touch of C to that check (model compute lies in between), after which
 *   a reader of M fails on the missing chunk (a storage error) until M is ingested again.
 * - W stalled longer than markerTtlMs (no write renewed its marker): chunks older than the grace
 *   period may go; W's check after its manifest restores them.
 * Clocks: last-modified times are the store's clock, `now` is gc's. The grace period must exceed the
 * skew between them and the longest time an ingest takes from `existingChunkPrefix` to adopting.
 *
 * ## Prompt artifacts
 * A long prompt is ingested as document `prompt-<requestId>` (@csa2/jobs promptDocumentId); the
 * gateway deletes its manifest when the request ends. Its chunks are then unreferenced like any
 * other and go after the grace period (those it shares with documents stay). A prompt manifest that
 * was never deleted (a crashed gateway) is deleted by gc once older than promptTtlMs, and its
 * references do not count.
 */
import { ArtifactCorruptError } from './errors.js';
import type { ObjectInfo, ObjectStore } from './store/object-store.js';
import { Semaphore } from './format/bounded-concurrency.js';
import {
  chunksPrefix,
  documentsPrefix,
  ingestMarkersPrefix,
  parseChunkObjectKey,
  parseIngestMarkerKey,
  parseManifestObjectKey,
  tenantOfKey,
  validateTenant,
} from './format/keys.js';
import { parseManifest } from './format/manifest.js';
import { DEFAULT_INGEST_MARKER_TTL_MS } from './ingest-marker.js';

/** Default grace period: chunks modified within it are never deleted. */
export const DEFAULT_GC_GRACE_MS = 60 * 60_000;
/** Default age after which a prompt artifact's manifest (`prompt-…`) is deleted. */
export const DEFAULT_PROMPT_TTL_MS = 24 * 60 * 60_000;
/** Document ids of prompt artifacts start with this (@csa2/jobs promptDocumentId). */
export const PROMPT_DOCUMENT_PREFIX = 'prompt-';

export interface GcOptions {
  readonly store: ObjectStore;
  /** Chunks modified within this many ms (store clock) are kept. @defaultValue 3600000 (1 h) */
  readonly graceMs?: number;
  /** Ingest markers not renewed for this long are abandoned. @defaultValue 900000 (15 min) */
  readonly markerTtlMs?: number;
  /** Prompt artifact manifests older than this are deleted; null keeps them. @defaultValue 86400000 (24 h) */
  readonly promptTtlMs?: number | null;
  /** Report what would be deleted, delete nothing. @defaultValue false */
  readonly dryRun?: boolean;
  /** Only these tenants. @defaultValue every tenant in the store */
  readonly tenants?: readonly string[];
  /** gc's clock, ms since the epoch. @defaultValue Date.now */
  readonly now?: () => number;
  /** Store requests in flight at most (manifest reads, deletes). @defaultValue 8 */
  readonly concurrency?: number;
  /** One line per tenant as it is done, for progress output. @defaultValue none */
  readonly onTenant?: (report: GcTenantReport) => void;
}

/** What gc found and did in one tenant. */
export interface GcTenantReport {
  readonly tenant: string;
  readonly chunks: number;
  readonly chunkBytes: number;
  readonly manifests: number;
  /** Distinct chunks named by the manifests read (expired prompt manifests excluded). */
  readonly referencedChunks: number;
  readonly liveMarkers: number;
  /** The cutoff used (ms since the epoch): chunks modified at or after it were kept. */
  readonly cutoffMs: number;
  /** Unreferenced chunks kept because they are younger than the cutoff (in their grace period, or an ingest's). */
  readonly unreferencedKept: number;
  /** Unreferenced, older than the cutoff when listed, but modified before the deletion (an ingest touched them). */
  readonly keptTouched: number;
  readonly chunksDeleted: number;
  readonly chunkBytesDeleted: number;
  readonly markersDeleted: number;
  readonly promptManifestsDeleted: number;
  /** All objects deleted (chunks, markers, prompt manifests) and their bytes; in a dry run, what would be. */
  readonly objectsReclaimed: number;
  readonly bytesReclaimed: number;
  /** Why nothing was deleted in this tenant, when so (an unreadable manifest). */
  readonly skipped: string | null;
}

export interface GcReport {
  readonly dryRun: boolean;
  readonly graceMs: number;
  readonly startedAtMs: number;
  readonly tenants: readonly GcTenantReport[];
  readonly objectsReclaimed: number;
  readonly bytesReclaimed: number;
}

function nonNegativeInt(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(`gc ${name} must be a non-negative integer (ms), got ${value}`);
  return value;
}

/**
 * Collects garbage in every tenant of the store (or `options.tenants`), tenant after tenant.
 *
 * @example
 * const report = await collectGarbage({ store, graceMs: 3_600_000 });
 * console.log(`${report.objectsReclaimed} objects, ${report.bytesReclaimed} bytes reclaimed`);
 */
export async function collectGarbage(options: GcOptions): Promise<GcReport> {
  const graceMs = nonNegativeInt('graceMs', options.graceMs ?? DEFAULT_GC_GRACE_MS);
  const markerTtlMs = nonNegativeInt('markerTtlMs', options.markerTtlMs ?? DEFAULT_INGEST_MARKER_TTL_MS);
  const promptTtlMs = options.promptTtlMs === null ? null : nonNegativeInt('promptTtlMs', options.promptTtlMs ?? DEFAULT_PROMPT_TTL_MS);
  const concurrency = options.concurrency ?? 8;
  if (!Number.isSafeInteger(concurrency) || concurrency < 1) throw new RangeError(`gc concurrency must be a positive integer, got ${concurrency}`);
  const now = options.now ?? (() => Date.now());
  const settings: TenantSettings = {
    store: options.store,
    graceMs,
    markerTtlMs,
    promptTtlMs,
    dryRun: options.dryRun === true,
    now,
    gate: new Semaphore(concurrency),
  };
  const startedAtMs = now();
  const reports: GcTenantReport[] = [];
  const tenants = options.tenants !== undefined ? options.tenants.map((t) => validateTenant(t)) : null;
  for await (const tenant of tenants ?? storeTenants(options.store)) {
    const report = await collectTenant(settings, tenant);
    reports.push(report);
    options.onTenant?.(report);
  }
  return {
    dryRun: settings.dryRun,
    graceMs,
    startedAtMs,
    tenants: reports,
    objectsReclaimed: reports.reduce((n, r) => n + r.objectsReclaimed, 0),
    bytesReclaimed: reports.reduce((n, r) => n + r.bytesReclaimed, 0),
  };
}

/** The tenants that have objects, one listing request each (`tenants/<t>/` blocks are contiguous in key order). */
async function* storeTenants(store: ObjectStore): AsyncGenerator<string> {
  let after = '';
  for (;;) {
    const [first] = await store.list('tenants/', { limit: 1, ...(after !== '' ? { startAfter: after } : {}) });
    if (first === undefined) return;
    const tenant = tenantOfKey(first.key);
    if (tenant === null) {
      after = first.key; // not a tenant's object: step over it
      continue;
    }
    yield tenant;
    after = `tenants/${tenant}/~`; // '~' sorts after every key character
  }
}

interface TenantSettings {
  readonly store: ObjectStore;
  readonly graceMs: number;
  readonly markerTtlMs: number;
  readonly promptTtlMs: number | null;
  readonly dryRun: boolean;
  readonly now: () => number;
  readonly gate: Semaphore;
}

async function collectTenant(s: TenantSettings, tenant: string): Promise<GcTenantReport> {
  const { store, gate } = s;
  // The order matters (module header): chunks, then markers, then manifests.
  const chunks = (await store.list(chunksPrefix(tenant))).filter((o) => parseChunkObjectKey(o.key)?.tenant === tenant);
  const nowMs = s.now();
  const markers = (await store.list(ingestMarkersPrefix(tenant))).flatMap((o) => {
    const parsed = parseIngestMarkerKey(o.key);
    return parsed === null || parsed.tenant !== tenant ? [] : [{ info: o, startedAtMs: parsed.startedAtMs }];
  });
  const live = markers.filter((m) => m.info.lastModifiedMs >= nowMs - s.markerTtlMs);
  const expiredMarkers = markers.filter((m) => m.info.lastModifiedMs < nowMs - s.markerTtlMs).map((m) => m.info);
  const oldestLiveStartMs = live.reduce((oldest, m) => Math.min(oldest, m.startedAtMs), nowMs);
  const cutoffMs = Math.min(nowMs, oldestLiveStartMs) - s.graceMs;

  const manifestInfos = (await store.list(documentsPrefix(tenant))).filter((o) => parseManifestObjectKey(o.key)?.tenant === tenant);
  const promptCutoffMs = s.promptTtlMs === null ? null : nowMs - s.promptTtlMs;
  const expiredPrompts: ObjectInfo[] = [];
  const referenced = new Set<string>();
  let skipped: string | null = null;
  await Promise.all(
    manifestInfos.map((info) =>
      gate.run(async () => {
        const documentId = parseManifestObjectKey(info.key)?.documentId ?? '';
        if (promptCutoffMs !== null && documentId.startsWith(PROMPT_DOCUMENT_PREFIX) && info.lastModifiedMs < promptCutoffMs) {
          expiredPrompts.push(info); // its references do not count (deleted below)
          return;
        }
        let bytes: Uint8Array;
        try {
          bytes = await store.get(info.key);
        } catch (error) {
          if (isNotFound(error)) return; // deleted since the listing: it references nothing any more
          throw error;
        }
        try {
          const m = parseManifest(info.key, bytes);
          for (const c of m.chunks) referenced.add(c.key);
          if (m.tail !== undefined) referenced.add(m.tail.key); // the stored encoder tail lives among the chunks
        } catch (error) {
          skipped ??= `manifest ${info.key} cannot be read (${error instanceof Error ? error.message : String(error)}); nothing is deleted in tenant ${tenant}`;
        }
      }),
    ),
  );

  let unreferencedKept = 0;
  const candidates: ObjectInfo[] = [];
  for (const c of chunks) {
    const key = parseChunkObjectKey(c.key)?.chunkKey ?? '';
    if (referenced.has(key)) continue;
    if (c.lastModifiedMs >= cutoffMs) unreferencedKept++;
    else candidates.push(c);
  }

  const tally = { chunksDeleted: 0, chunkBytesDeleted: 0, keptTouched: 0, markersDeleted: 0, promptManifestsDeleted: 0, objects: 0, bytes: 0 };
  if (skipped === null) {
    const remove = async (info: ObjectInfo, sinceMs: number, kind: 'chunk' | 'marker' | 'prompt'): Promise<void> => {
      let sizeBytes = info.sizeBytes;
      if (!s.dryRun) {
        const result = await store.deleteIfUnmodifiedSince(info.key, sinceMs);
        if (result.outcome === 'modified') {
          if (kind === 'chunk') tally.keptTouched++;
          return;
        }
        if (result.outcome === 'absent') return;
        sizeBytes = result.sizeBytes;
      }
      tally.objects++;
      tally.bytes += sizeBytes;
      if (kind === 'chunk') {
        tally.chunksDeleted++;
        tally.chunkBytesDeleted += sizeBytes;
      } else if (kind === 'marker') tally.markersDeleted++;
      else tally.promptManifestsDeleted++;
    };
    // Prompt manifests first: once they are gone, nothing can be loaded through them.
    await Promise.all(expiredPrompts.map((info) => gate.run(() => remove(info, promptCutoffMs ?? 0, 'prompt'))));
    await Promise.all(candidates.map((info) => gate.run(() => remove(info, cutoffMs, 'chunk'))));
    await Promise.all(expiredMarkers.map((info) => gate.run(() => remove(info, nowMs - s.markerTtlMs, 'marker'))));
  }
  return {
    tenant,
    chunks: chunks.length,
    chunkBytes: chunks.reduce((n, c) => n + c.sizeBytes, 0),
    manifests: manifestInfos.length,
    referencedChunks: referenced.size,
    liveMarkers: live.length,
    cutoffMs,
    unreferencedKept,
    keptTouched: tally.keptTouched,
    chunksDeleted: tally.chunksDeleted,
    chunkBytesDeleted: tally.chunkBytesDeleted,
    markersDeleted: tally.markersDeleted,
    promptManifestsDeleted: tally.promptManifestsDeleted,
    objectsReclaimed: tally.objects,
    bytesReclaimed: tally.bytes,
    skipped,
  };
}

function isNotFound(error: unknown): boolean {
  return (
    typeof error === 'object' &&
    error !== null &&
    'code' in error &&
    (error as { code: unknown }).code === 'not-found' &&
    !(error instanceof ArtifactCorruptError)
  );
}
