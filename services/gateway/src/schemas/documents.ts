/**
 * @module schemas/documents
 * Requests of the documents API: one document to ingest (`{text}` or `{token_ids}`, optional `id`
 * and `model`; also the body of a documents batch line), many at once (`{documents: […]}`), and the
 * query of GET /v1/documents.
 */
import { z } from 'zod';
import { ID_PATTERN } from '@csa2/jobs';

/** Default and largest page size (OpenAI's list endpoints use 20 and 100). */
export const DEFAULT_DOCUMENT_LIST_LIMIT = 20;
export const MAX_DOCUMENT_LIST_LIMIT = 100;

/** Documents per POST at most. */
export const MAX_DOCUMENTS_PER_REQUEST = 256;

export const DocumentInputSchema = z.object({
  id: z.string().regex(ID_PATTERN, 'must match [A-Za-z0-9_-]{1,64}').optional(),
  text: z.string().optional(),
  token_ids: z.array(z.number().int().nonnegative()).optional(),
  model: z.string().optional(),
});
/** POST /v1/documents with many documents (`{documents: […]}`). */
export const DocumentsRequestSchema = z.object({
  documents: z
    .array(DocumentInputSchema)
    .min(1, 'must list at least one document')
    .max(MAX_DOCUMENTS_PER_REQUEST, `at most ${MAX_DOCUMENTS_PER_REQUEST} documents per request`),
  model: z.string().optional(),
});
export type DocumentInput = z.infer<typeof DocumentInputSchema>;

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
