/**
 * @module ingest-marker
 * The "ingest in progress" marker a writer keeps while it writes a document, so garbage collection
 * (gc) leaves the chunks of a long ingest alone even after they are older than its grace period.
 *
 * - Key: `tenants/<tenant>/ingests/<documentId>.<startedAtMs>.<nonce>` (format/keys); the start
 *   time is in the key, so a collector needs only a listing to use it. Body: a small JSON object
 *   (document, start, host, pid) for people looking at the store.
 * - Life: put before the writer's first store operation; renewed (touched) by the writer's later
 *   operations when the last renewal is older than `renewMs`; deleted when the manifest is written
 *   and checked (or when the writer fails). A marker whose last-modified time is older than the
 *   collector's TTL counts as abandoned (a crashed or cancelled ingest) and is deleted by gc.
 * - Renewal happens on writer activity only, never on a timer: a writer abandoned without `finish`
 *   stops renewing, and its marker expires instead of protecting the tenant's garbage for ever.
 *   (An encoder reports progress, and so writes, at least once per model chunk; the TTL must exceed
 *   the longest gap between two writes.)
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { ObjectStore } from './store/object-store.js';
import { ingestMarkerKey } from './format/keys.js';

/** Default renewal interval of a writer's marker. */
export const DEFAULT_INGEST_MARKER_RENEW_MS = 60_000;
/** Default age after which gc takes a marker for abandoned (15 renewal intervals). */
export const DEFAULT_INGEST_MARKER_TTL_MS = 15 * 60_000;

export interface IngestMarkerOptions {
  /** Clock (ms) for the start time in the key. @defaultValue Date.now */
  readonly now?: () => number;
  /** Renew when the last renewal is at least this old. @defaultValue 60000 */
  readonly renewMs?: number;
}

/**
 * One writer's marker. Not for concurrent use: the writer calls it from its serialized tasks.
 *
 * @example
 * const marker = new IngestMarker(store, tenant, documentId);
 * await marker.keepAlive(); // before every batch of writes
 * await marker.end();       // after the manifest
 */
export class IngestMarker {
  readonly key: string;
  readonly startedAtMs: number;
  private readonly now: () => number;
  private readonly renewMs: number;
  private renewedAtMs: number | null = null;
  private ended = false;

  constructor(
    private readonly store: ObjectStore,
    readonly tenant: string,
    readonly documentId: string,
    options: IngestMarkerOptions = {},
  ) {
    this.now = options.now ?? (() => Date.now());
    this.renewMs = options.renewMs ?? DEFAULT_INGEST_MARKER_RENEW_MS;
    this.startedAtMs = Math.floor(this.now());
    this.key = ingestMarkerKey(tenant, documentId, this.startedAtMs, randomBytes(8).toString('hex'));
  }

  /** Puts the marker the first time, renews it when due afterwards (puts it again if gc took it for abandoned). */
  async keepAlive(): Promise<void> {
    if (this.ended) return;
    const now = this.now();
    if (this.renewedAtMs !== null && now - this.renewedAtMs < this.renewMs) return;
    if (this.renewedAtMs === null || (await this.store.touch(this.key)) === null) {
      const body = {
        tenant: this.tenant,
        documentId: this.documentId,
        startedAt: new Date(this.startedAtMs).toISOString(),
        host: hostname(),
        pid: process.pid,
      };
      await this.store.put(this.key, new TextEncoder().encode(`${JSON.stringify(body)}\n`));
    }
    this.renewedAtMs = now;
  }

  /** Deletes the marker (idempotent; a failure is left to expiry). */
  async end(): Promise<void> {
    if (this.ended) return;
    this.ended = true;
    if (this.renewedAtMs === null) return;
    await this.store.delete(this.key).catch(() => undefined);
  }
}
