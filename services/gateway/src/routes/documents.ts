/**
 * @module routes/documents
 * POST /v1/documents (one `{text}` / `{token_ids}` with an optional `id`, or `{documents: […]}`)
 * → 202 with each document's id and status; GET /v1/documents → the tenant's documents, a page at a
 * time (document-list); GET /v1/documents/:id → its status; DELETE
 * /v1/documents/:id → removes it. Every id is the caller's tenant's (documents.ts has the rules).
 */
import { randomBytes } from 'node:crypto';
import { Hono } from 'hono';
import { z } from 'zod';
import { validateTokenIds } from '@csa2/core';
import { ID_PATTERN } from '@csa2/jobs';
import { ApiError, invalidRequest, isRedisUnavailable, modelNotFound, redisUnavailable, waiting } from '../errors.js';
import { RESERVED_DOCUMENT_PREFIX, deleteDocument, documentObject, documentStatus, ingestDocument } from '../documents.js';
import type { GatewayDeps } from '../deps.js';
import { DEFAULT_DOCUMENT_LIST_LIMIT, MAX_DOCUMENT_LIST_LIMIT, listDocuments, type DocumentListQuery } from '../document-list.js';
import { isPromptArtifactId } from '../prompt-artifacts.js';
import type { TenantVariables } from '../middleware/api-key-auth.js';
import type { RequestIdVariables } from '../middleware/request-id.js';
import { readJson } from '../middleware/json-body.js';
import { TokenLimitError } from '../tokenize-pool.js';
import { parseRequest } from '../openai/schemas.js';

/** Documents per POST at most. */
export const MAX_DOCUMENTS_PER_REQUEST = 256;

export const DocumentInputSchema = z.object({
  id: z.string().regex(ID_PATTERN, 'must match [A-Za-z0-9_-]{1,64}').optional(),
  text: z.string().optional(),
  token_ids: z.array(z.number().int().nonnegative()).optional(),
  model: z.string().optional(),
});
export const BatchSchema = z.object({
  documents: z
    .array(DocumentInputSchema)
    .min(1, 'must list at least one document')
    .max(MAX_DOCUMENTS_PER_REQUEST, `at most ${MAX_DOCUMENTS_PER_REQUEST} documents per request`),
  model: z.string().optional(),
});
type DocumentInput = z.infer<typeof DocumentInputSchema>;

export interface PreparedDocument {
  readonly id: string;
  readonly tokenIds: number[];
}

/** Checks and tokenizes one document of a POST /v1/documents (also a batch line's body); throws ApiError 400s. */
export async function prepareDocument(deps: GatewayDeps, input: DocumentInput, param: (field: string) => string): Promise<PreparedDocument> {
  const { tokenizer, limits } = deps;
  if (input.model !== undefined && input.model !== deps.model.name) throw modelNotFound(input.model, deps.model.name, param('model'));
  if ((input.text === undefined) === (input.token_ids === undefined)) {
    throw invalidRequest(`A document needs exactly one of 'text' and 'token_ids'`, param(input.text === undefined ? 'text' : 'token_ids'), 'invalid_value');
  }
  if (input.id?.startsWith(RESERVED_DOCUMENT_PREFIX) === true) {
    throw invalidRequest(`Invalid value for '${param('id')}': ids starting with '${RESERVED_DOCUMENT_PREFIX}' are reserved`, param('id'), 'invalid_value');
  }
  let tokenIds: number[];
  const field = param(input.text !== undefined ? 'text' : 'token_ids');
  const tooMany = (n: string): ApiError =>
    invalidRequest(
      `The document has ${n} tokens; this server accepts at most ${limits.maxDocumentTokens} (CSA2_MAX_DOCUMENT_TOKENS)`,
      field,
      'context_length_exceeded',
    );
  if (input.text !== undefined) {
    // refused before (or while) it is tokenized when it cannot fit: the BOS takes one token
    const bos = tokenizer.bosId !== null ? 1 : 0;
    try {
      tokenIds = await deps.tokenize.encode(input.text, limits.maxDocumentTokens - bos);
    } catch (err) {
      if (err instanceof TokenLimitError) throw tooMany(`at least ${err.tokensAtLeast + bos}`);
      throw err;
    }
    if (tokenizer.bosId !== null) tokenIds.unshift(tokenizer.bosId);
  } else {
    tokenIds = input.token_ids ?? [];
    try {
      validateTokenIds(tokenIds, deps.model.vocabSize);
    } catch (err) {
      throw invalidRequest(
        `Invalid value for '${param('token_ids')}': ${err instanceof Error ? err.message : String(err)}`,
        param('token_ids'),
        'invalid_value',
      );
    }
  }
  if (tokenIds.length === 0) throw invalidRequest(`Invalid value for '${field}': the document is empty`, field, 'invalid_value');
  if (tokenIds.length > limits.maxDocumentTokens) throw tooMany(String(tokenIds.length));
  return { id: input.id ?? `doc-${randomBytes(12).toString('base64url')}`, tokenIds };
}

/** `limit` (1..100, default 20), `after` (an id) and `order` (only asc) of GET /v1/documents; 400 naming the parameter otherwise. */
/** GET /v1/documents query parameters (the OpenAPI document shows this schema). */
export const DocumentListQuerySchema = z.object({
  limit: z
    .string()
    .regex(/^[0-9]+$/, `expected an integer from 1 to ${MAX_DOCUMENT_LIST_LIMIT}`)
    .transform(Number)
    .refine((n) => n >= 1 && n <= MAX_DOCUMENT_LIST_LIMIT, `expected an integer from 1 to ${MAX_DOCUMENT_LIST_LIMIT}`)
    .optional()
    .meta({ description: `page size, 1 to ${MAX_DOCUMENT_LIST_LIMIT} (default ${DEFAULT_DOCUMENT_LIST_LIMIT})` }),
  after: z
    .string()
    .regex(ID_PATTERN, 'a document id matches [A-Za-z0-9_-]{1,64}')
    .optional()
    .meta({ description: "list the ids after this one (the last page's last_id)" }),
  order: z.literal('asc', { error: "documents are listed by id in ascending order only ('asc')" }).optional(),
});

function parseListQuery(q: Record<string, string>): DocumentListQuery {
  const parsed = parseRequest(DocumentListQuerySchema, q);
  return { limit: parsed.limit ?? DEFAULT_DOCUMENT_LIST_LIMIT, ...(parsed.after !== undefined ? { after: parsed.after } : {}) };
}

function mapRedis(err: unknown): never {
  if (isRedisUnavailable(err)) throw redisUnavailable(err);
  throw err;
}

export function documentsRoutes(deps: GatewayDeps): Hono<{ Variables: TenantVariables & RequestIdVariables }> {
  const app = new Hono<{ Variables: TenantVariables & RequestIdVariables }>();

  app.post('/documents', async (c) => {
    const tenant = c.get('tenant');
    const raw = await readJson(c);
    const batch = typeof raw === 'object' && raw !== null && 'documents' in raw;
    let docs: PreparedDocument[];
    if (batch) {
      const body = parseRequest(BatchSchema, raw);
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
