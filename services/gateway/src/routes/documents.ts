/**
 * @module routes/documents
 * POST /v1/documents (one `{text}` / `{token_ids}` with an optional `id`, or `{documents: […]}`)
 * → 202 with each document's id and status; GET /v1/documents → the tenant's documents, a page at a
 * time (document-list); GET /v1/documents/:id → its status; DELETE
 * /v1/documents/:id → removes it. Every id is the caller's tenant's (documents.ts has the rules).
 */
import { Hono } from 'hono';
import { ID_PATTERN } from '@csa2/jobs';
import type { GatewayDeps } from '../capabilities.js';
import { ApiError, invalidRequest, isRedisUnavailable, redisUnavailable, waiting } from '../errors.js';
import { deleteDocument, documentObject, documentStatus, ingestDocument, type DocumentDeps } from '../documents.js';
import { listDocuments, type DocumentListDeps, type DocumentListQuery } from '../document-list.js';
import { isPromptArtifactId } from '../prompt-artifacts.js';
import type { TenantVariables } from '../middleware/api-key-auth.js';
import type { RequestIdVariables } from '../middleware/request-id.js';
import { readJson } from '../middleware/json-body.js';
import { prepareDocument, type DocumentRequestDeps, type PreparedDocument } from '../requests/documents.js';
import { DEFAULT_DOCUMENT_LIST_LIMIT, DocumentInputSchema, DocumentListQuerySchema, DocumentsRequestSchema } from '../schemas/documents.js';
import { parseRequest } from '../schemas/parse.js';

/** The capabilities this module takes. */
export type DocumentsRouteDeps = Pick<GatewayDeps, 'inflight' | 'keyLimiter' | 'keyLimits' | 'limits' | 'model' | 'queues'> &
  DocumentDeps &
  DocumentListDeps &
  DocumentRequestDeps;

function parseListQuery(q: Record<string, string>): DocumentListQuery {
  const parsed = parseRequest(DocumentListQuerySchema, q);
  return { limit: parsed.limit ?? DEFAULT_DOCUMENT_LIST_LIMIT, ...(parsed.after !== undefined ? { after: parsed.after } : {}) };
}

function mapRedis(err: unknown): never {
  if (isRedisUnavailable(err)) throw redisUnavailable(err);
  throw err;
}

export function documentsRoutes(deps: DocumentsRouteDeps): Hono<{ Variables: TenantVariables & RequestIdVariables }> {
  const app = new Hono<{ Variables: TenantVariables & RequestIdVariables }>();

  app.post('/documents', async (c) => {
    const tenant = c.get('tenant');
    const raw = await readJson(c);
    const batch = typeof raw === 'object' && raw !== null && 'documents' in raw;
    let docs: PreparedDocument[];
    if (batch) {
      const body = parseRequest(DocumentsRequestSchema, raw);
      docs = [];
      for (const [i, d] of body.documents.entries()) {
        docs.push(
          await prepareDocument(
            deps,
            { ...d, ...(d.model === undefined && body.model !== undefined ? { model: body.model } : {}) },
            (f) => `documents[${i}].${f}`,
          ),
        );
      }
      const seen = new Set<string>();
      for (const [i, d] of docs.entries()) {
        if (seen.has(d.id))
          throw invalidRequest(`Invalid value for 'documents[${i}].id': the id '${d.id}' appears twice`, `documents[${i}].id`, 'invalid_value');
        seen.add(d.id);
      }
    } else {
      docs = [await prepareDocument(deps, parseRequest(DocumentInputSchema, raw), (f) => f)];
    }
    if (!deps.inflight.isAccepting) throw new ApiError(503, 'the server is shutting down', { code: 'shutting_down', headers: { 'retry-after': '1' } });
    const acceptedAtMs = Date.now();
    const results: Record<string, unknown>[] = [];
    const keyId = c.get('keyId');
    const limits = deps.keyLimits(keyId);
    const enqueued: string[] = [];
    let headers: Readonly<Record<string, string>> = {};
    try {
      // the key's limits: one request, the documents' tokens, and its queued documents
      headers = (await deps.keyLimiter.admitDocuments(keyId, limits, { count: docs.length, tokens: docs.reduce((n, d) => n + d.tokenIds.length, 0) })).headers;
      const counts = await deps.queues.prefill.getJobCounts('wait', 'prioritized', 'delayed');
      const backlog = Object.values(counts).reduce((a, b) => a + b, 0);
      if (backlog + docs.length > deps.limits.maxQueueDepth) {
        throw new ApiError(429, `The server is overloaded: ${waiting(backlog, 'job')} for the prefill workers. Please retry shortly.`, {
          code: 'queue_full',
          headers: { 'retry-after': '1' },
        });
      }
      for (const d of docs) {
        results.push(
          documentObject(
            d.id,
            await ingestDocument(deps, tenant, d.id, d.tokenIds, acceptedAtMs, {
              weight: limits.weight,
              reqId: c.get('reqId'),
              onEnqueued: (id) => enqueued.push(id),
            }),
          ),
        );
      }
    } catch (err) {
      mapRedis(err);
    } finally {
      await deps.keyLimiter.countDocumentJobs(keyId, limits, enqueued).catch(() => undefined);
    }
    return c.json(batch ? { object: 'list', data: results } : results[0], 202, { ...headers });
  });

  app.get('/documents', async (c) => {
    const query = parseListQuery(c.req.query());
    return c.json(await listDocuments(deps, c.get('tenant'), query).catch(mapRedis));
  });

  app.get('/documents/:id', async (c) => {
    const id = c.req.param('id');
    const notFound = new ApiError(404, `No document found with id '${id}'`, { param: 'id', code: 'document_not_found' });
    // a long prompt's artifact is not a document of the tenant's
    if (!ID_PATTERN.test(id) || isPromptArtifactId(id)) throw notFound;
    const found = await documentStatus(deps, c.get('tenant'), id).catch(mapRedis);
    if (found === null) throw notFound;
    return c.json(documentObject(id, found.state));
  });

  app.delete('/documents/:id', async (c) => {
    const id = c.req.param('id');
    const notFound = new ApiError(404, `No document found with id '${id}'`, { param: 'id', code: 'document_not_found' });
    if (!ID_PATTERN.test(id) || isPromptArtifactId(id)) throw notFound;
    const existed = await deleteDocument(deps, c.get('tenant'), id).catch(mapRedis);
    if (!existed) throw notFound;
    return c.json({ id, object: 'document.deleted', deleted: true });
  });

  return app;
}
