/**
 * @module document-list
 * GET /v1/documents: a tenant's documents, one page at a time (OpenAI's list shape: `data`,
 * `first_id`, `last_id`, `has_more`; `limit` and the `after` cursor).
 *
 * A document exists as its manifest (ready) or its prefill job (queued, encoding, failed), so the
 * listing merges the two: manifest ids come from one listing of the tenant's documents prefix in the
 * object store (paged there with startAfter, so a page costs about its size however many documents
 * there are), job ids from the prefill queue's job-id sets (ids only, never payloads; bounded by the
 * queue's depth limit and job retention). Each listed id's object is exactly what GET
 * /v1/documents/:id answers (documentStatus / documentObject).
 *
 * Order: by id in the byte order of `id + '/'` (the store's key order of `documents/<id>/…`): plain
 * byte order, except that an id is listed after the ids that extend it with '-' ('a-b' before 'a').
 * The order is stable, so `after` (any id, listed or not) resumes exactly after it. Prompt artifacts
 * (`prompt-…`) are not the tenant's documents and are never listed.
 */
import { documentJobId } from '@csa2/jobs';
import { documentsPrefix, parseManifestObjectKey } from '@csa2/artifacts';
import type { GatewayDeps } from './capabilities.js';
import { RESERVED_DOCUMENT_PREFIX, documentObject, documentStatus, type DocumentDeps } from './documents.js';

/** The capabilities this module takes. */
export type DocumentListDeps = Pick<GatewayDeps, 'queues' | 'store'> & DocumentDeps;

/** Prefill job states in which a document's job can exist (all of them: a GET of the id would find it). */
const JOB_STATES: Parameters<GatewayDeps['queues']['prefill']['getRanges']>[0] = [
  'active',
  'wait',
  'prioritized',
  'delayed',
  'waiting-children',
  'failed',
  'completed',
];
/** Documents whose status is read at once. */
const STATUS_CONCURRENCY = 8;

export interface DocumentListQuery {
  /** 1..MAX_DOCUMENT_LIST_LIMIT. */
  readonly limit: number;
  /** List the ids after this one (the previous page's last_id). */
  readonly after?: string;
}

export interface DocumentList {
  readonly object: 'list';
  readonly data: Record<string, unknown>[];
  readonly first_id: string | null;
  readonly last_id: string | null;
  readonly has_more: boolean;
}

/** The listing order's sort key of an id. */
function orderKey(id: string): string {
  return `${id}/`;
}

const byOrder = (a: string, b: string): number => {
  const ka = orderKey(a);
  const kb = orderKey(b);
  return ka < kb ? -1 : ka > kb ? 1 : 0;
};

/** Up to `count` ids that have a manifest, after `after`, in order (prompt artifacts skipped). */
async function manifestIds(deps: DocumentListDeps, tenant: string, after: string | undefined, count: number): Promise<{ ids: string[]; exhausted: boolean }> {
  const prefix = documentsPrefix(tenant);
  const ids: string[] = [];
  // '~' sorts after every key character: past every key of the `after` document
  let startAfter = after === undefined ? undefined : `${prefix}${after}/~`;
  for (;;) {
    const page = await deps.store.list(prefix, { limit: count + 1, ...(startAfter !== undefined ? { startAfter } : {}) });
    for (const info of page) {
      const id = parseManifestObjectKey(info.key)?.documentId;
      if (id !== undefined && !id.startsWith(RESERVED_DOCUMENT_PREFIX)) ids.push(id);
    }
    const last = page.at(-1);
    if (page.length < count + 1 || last === undefined) return { ids, exhausted: true };
    if (ids.length >= count) return { ids: ids.slice(0, count), exhausted: false };
    startAfter = last.key; // a page of prompt artifacts (or other objects): read on
  }
}

/** Ids of the tenant's documents that have a prefill job, after `after`, in order. */
async function jobIds(deps: DocumentListDeps, tenant: string, after: string | undefined): Promise<string[]> {
  const prefix = documentJobId(tenant, '');
  const all = await deps.queues.prefill.getRanges(JOB_STATES, 0, -1);
  const ids = all.filter((j) => j.startsWith(prefix)).map((j) => j.slice(prefix.length));
  return ids.filter((id) => !id.startsWith(RESERVED_DOCUMENT_PREFIX) && (after === undefined || byOrder(id, after) > 0)).sort(byOrder);
}

/**
 * One page of the tenant's documents.
 *
 * @example
 * await listDocuments(deps, 'acme', { limit: 20 });                 // the first page
 * await listDocuments(deps, 'acme', { limit: 20, after: 'doc-41' }); // the next one
 */
export async function listDocuments(deps: DocumentListDeps, tenant: string, query: DocumentListQuery): Promise<DocumentList> {
  const [stored, queued] = await Promise.all([manifestIds(deps, tenant, query.after, query.limit + 1), jobIds(deps, tenant, query.after)]);
  // The first limit + 1 of the merge are among the stored ids fetched and the job ids.
  const merged = Array.from(new Set(stored.ids.concat(queued))).sort(byOrder);
  const page = merged.slice(0, query.limit);
  const hasMore = merged.length > query.limit;
  const objects: (Record<string, unknown> | null)[] = new Array<Record<string, unknown> | null>(page.length).fill(null);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(STATUS_CONCURRENCY, page.length) }, async () => {
      for (let i = next++; i < page.length; i = next++) {
        const id = page[i] as string;
        const found = await documentStatus(deps, tenant, id);
        objects[i] = found === null ? null : documentObject(id, found.state); // null: deleted since the listing
      }
    }),
  );
  const data = objects.filter((o): o is Record<string, unknown> => o !== null);
  return { object: 'list', data, first_id: page[0] ?? null, last_id: page.at(-1) ?? null, has_more: hasMore };
}
