/**
 * @module openapi/spec
 * The OpenAPI 3.1 document of the gateway, built from the zod schemas the routes validate with (schemas/)
 * (zod 4's JSON Schema output, draft 2020-12 — the dialect of OpenAPI 3.1). Every schema with a
 * `.meta({ id })` becomes `components/schemas/<id>`, and references between them are `$ref`s.
 * The operations are listed once here (OPERATIONS); a test checks that the app serves exactly these.
 */
import { z } from 'zod';
import { ChatRequestSchema, CompletionRequestSchema } from '../schemas/completions.js';
import { DocumentInputSchema, DocumentListQuerySchema, DocumentsRequestSchema } from '../schemas/documents.js';
import { FileListQuerySchema, FileUploadFieldsSchema } from '../schemas/files.js';
import { BatchCreateRequestSchema, BatchInputLineSchema, BatchListQuerySchema } from '../schemas/batches.js';
import { DetokenizeRequestSchema, DetokenizeResponseSchema, TokenizeRequestSchema, TokenizeResponseSchema } from '../schemas/tokenize.js';
import { BatchListSchema, BatchObjectSchema } from '../batch/batch-object.js';
import { BatchOutputLineSchema } from '../batch/line-results.js';
import { FileDeletedSchema, FileListSchema, FileObjectSchema } from '../files/file-store.js';
import * as responses from './responses.js';

// Request schemas defined without an id (they predate the spec) get theirs here.
for (const [schema, id] of [
  [CompletionRequestSchema, 'CompletionRequest'],
  [ChatRequestSchema, 'ChatCompletionRequest'],
  [DocumentInputSchema, 'DocumentInput'],
  [DocumentsRequestSchema, 'DocumentsRequest'],
] as const) {
  if (!z.globalRegistry.has(schema)) z.globalRegistry.add(schema, { id });
}

/** Schemas the spec refers to by id (importing them registers them; listed so none is tree-shaken or forgotten). */
const REFERENCED = [
  BatchCreateRequestSchema,
  BatchListSchema,
  BatchObjectSchema,
  BatchInputLineSchema,
  BatchOutputLineSchema,
  FileDeletedSchema,
  FileListSchema,
  FileObjectSchema,
  FileUploadFieldsSchema,
  TokenizeRequestSchema,
  TokenizeResponseSchema,
  DetokenizeRequestSchema,
  DetokenizeResponseSchema,
  ...Object.values(responses),
];

type Auth = 'key' | 'status' | 'none';
type Media = 'json' | 'sse+json' | 'html' | 'text' | 'octet' | 'multipart';

export interface Operation {
  readonly method: 'get' | 'post' | 'delete';
  /** OpenAPI path (`{param}`). */
  readonly path: string;
  readonly operationId: string;
  readonly tag: string;
  readonly summary: string;
  readonly description?: string;
  readonly auth: Auth;
  readonly body?: { readonly schema: string; readonly media?: Media };
  readonly query?: z.ZodObject;
  /** status → description, schema id (or none), media. */
  readonly responses: Readonly<Record<string, { readonly description: string; readonly schema?: string; readonly media?: Media }>>;
}

const E400 = { description: 'Invalid request (the error names the parameter)', schema: 'Error' };
const E401 = { description: 'Missing or unknown API key', schema: 'Error' };
const E404 = { description: 'Not found (or another tenant’s)', schema: 'Error' };
const E409 = { description: 'Conflict with the current state', schema: 'Error' };
const E413 = { description: 'Body too large', schema: 'Error' };
const E429 = { description: 'Overloaded: retry after Retry-After', schema: 'Error' };
const E503 = { description: 'Redis or the store is unavailable, or the server is shutting down', schema: 'Error' };

export const OPERATIONS: readonly Operation[] = [
  {
    method: 'post',
    path: '/v1/completions',
    operationId: 'createCompletion',
    tag: 'Completions',
    summary: 'Complete a prompt',
    auth: 'key',
    description: 'OpenAI-compatible. `document_id` (extension) continues a stored document; `stream: true` answers SSE chunks ending with `data: [DONE]`.',
    body: { schema: 'CompletionRequest' },
    responses: {
      200: { description: 'The completion (JSON, or SSE when streamed)', schema: 'CompletionResponse', media: 'sse+json' },
      400: E400,
      401: E401,
      404: E404,
      409: E409,
      413: E413,
      429: E429,
      503: E503,
      504: { description: 'Did not finish within CSA2_REQUEST_TIMEOUT_MS', schema: 'Error' },
    },
  },
  {
    method: 'post',
    path: '/v1/chat/completions',
    operationId: 'createChatCompletion',
    tag: 'Completions',
    summary: 'Answer a conversation',
    auth: 'key',
    description: "OpenAI-compatible; the messages are rendered with the tokenizer's chat template.",
    body: { schema: 'ChatCompletionRequest' },
    responses: {
      200: { description: 'The chat completion (JSON, or SSE when streamed)', schema: 'ChatCompletionResponse', media: 'sse+json' },
      400: E400,
      401: E401,
      404: E404,
      409: E409,
      413: E413,
      429: E429,
      503: E503,
      504: { description: 'Timeout', schema: 'Error' },
    },
  },
  {
    method: 'get',
    path: '/v1/models',
    operationId: 'listModels',
    tag: 'Models',
    summary: 'The served model',
    auth: 'key',
    responses: { 200: { description: 'One model', schema: 'ModelList' }, 401: E401 },
  },
  {
    method: 'get',
    path: '/v1/models/{id}',
    operationId: 'retrieveModel',
    tag: 'Models',
    summary: 'A model by name',
    auth: 'key',
    responses: { 200: { description: 'The model', schema: 'Model' }, 401: E401, 404: E404 },
  },
  {
    method: 'post',
    path: '/v1/documents',
    operationId: 'createDocuments',
    tag: 'Documents',
    summary: 'Ingest one document (or many)',
    auth: 'key',
    description: 'Extension: encodes a document once into a stored artifact; completions then name it with `document_id`.',
    body: { schema: 'DocumentsRequest' },
    responses: { 202: { description: 'Queued (a list for many)', schema: 'Document' }, 400: E400, 401: E401, 413: E413, 429: E429, 503: E503 },
  },
  {
    method: 'get',
    path: '/v1/documents',
    operationId: 'listDocuments',
    tag: 'Documents',
    summary: 'The tenant’s documents, by id',
    auth: 'key',
    query: DocumentListQuerySchema,
    description: 'Extension: ready, queued, encoding and failed documents, each as GET /v1/documents/{id} shows it; pages of `limit` after the `after` cursor.',
    responses: { 200: { description: 'A page of documents', schema: 'DocumentPage' }, 400: E400, 401: E401, 503: E503 },
  },
  {
    method: 'get',
    path: '/v1/documents/{id}',
    operationId: 'retrieveDocument',
    tag: 'Documents',
    summary: 'A document’s status and progress',
    auth: 'key',
    responses: { 200: { description: 'The document', schema: 'Document' }, 401: E401, 404: E404, 503: E503 },
  },
  {
    method: 'delete',
    path: '/v1/documents/{id}',
    operationId: 'deleteDocument',
    tag: 'Documents',
    summary: 'Delete a document',
    auth: 'key',
    responses: { 200: { description: 'Deleted', schema: 'DocumentDeleted' }, 401: E401, 404: E404, 409: E409, 503: E503 },
  },
  {
    method: 'post',
    path: '/v1/files',
    operationId: 'createFile',
    tag: 'Files',
    summary: 'Upload a batch input file',
    auth: 'key',
    description: 'multipart/form-data with `file` (JSONL, one request per line) and `purpose: batch`; at most CSA2_MAX_FILE_BYTES and CSA2_BATCH_MAX_LINES.',
    body: { schema: 'FileUpload', media: 'multipart' },
    responses: { 200: { description: 'The file', schema: 'FileObject' }, 400: E400, 401: E401, 413: E413, 429: E429 },
  },
  {
    method: 'get',
    path: '/v1/files',
    operationId: 'listFiles',
    tag: 'Files',
    summary: 'The tenant’s files',
    auth: 'key',
    query: FileListQuerySchema,
    responses: { 200: { description: 'A page of files', schema: 'FileList' }, 400: E400, 401: E401 },
  },
  {
    method: 'get',
    path: '/v1/files/{file_id}',
    operationId: 'retrieveFile',
    tag: 'Files',
    summary: 'A file',
    auth: 'key',
    responses: { 200: { description: 'The file', schema: 'FileObject' }, 401: E401, 404: E404 },
  },
  {
    method: 'delete',
    path: '/v1/files/{file_id}',
    operationId: 'deleteFile',
    tag: 'Files',
    summary: 'Delete a file',
    auth: 'key',
    responses: {
      200: { description: 'Deleted', schema: 'FileDeleted' },
      401: E401,
      404: E404,
      409: { description: 'A batch that has not ended reads it', schema: 'Error' },
    },
  },
  {
    method: 'get',
    path: '/v1/files/{file_id}/content',
    operationId: 'downloadFile',
    tag: 'Files',
    summary: 'A file’s content',
    auth: 'key',
    description: 'Batch output and error files are JSONL of BatchOutputLine.',
    responses: { 200: { description: 'The bytes', media: 'octet' }, 401: E401, 404: E404 },
  },
  {
    method: 'post',
    path: '/v1/batches',
    operationId: 'createBatch',
    tag: 'Batches',
    summary: 'Run a file of requests as a batch',
    auth: 'key',
    description:
      'Each line (BatchInputLine) runs as a job on the prefill/decode queues in the tenant’s batch flow (fair queuing at CSA2_BATCH_WEIGHT), behind interactive traffic.',
    body: { schema: 'BatchCreateRequest' },
    responses: { 200: { description: 'The batch (validating)', schema: 'Batch' }, 400: E400, 401: E401, 404: E404, 503: E503 },
  },
  {
    method: 'get',
    path: '/v1/batches',
    operationId: 'listBatches',
    tag: 'Batches',
    summary: 'The tenant’s batches, newest first',
    auth: 'key',
    query: BatchListQuerySchema,
    responses: { 200: { description: 'A page of batches', schema: 'BatchList' }, 400: E400, 401: E401 },
  },
  {
    method: 'get',
    path: '/v1/batches/{batch_id}',
    operationId: 'retrieveBatch',
    tag: 'Batches',
    summary: 'A batch',
    auth: 'key',
    responses: { 200: { description: 'The batch', schema: 'Batch' }, 401: E401, 404: E404 },
  },
  {
    method: 'post',
    path: '/v1/batches/{batch_id}/cancel',
    operationId: 'cancelBatch',
    tag: 'Batches',
    summary: 'Cancel a batch',
    auth: 'key',
    responses: {
      200: { description: 'The batch (cancelling)', schema: 'Batch' },
      401: E401,
      404: E404,
      409: { description: 'The batch already ended', schema: 'Error' },
    },
  },
  {
    method: 'post',
    path: '/tokenize',
    operationId: 'tokenize',
    tag: 'Tokens',
    summary: 'Tokens of a prompt or conversation, as the model sees them',
    auth: 'key',
    description: "vLLM's shape. Messages are rendered with the chat template; `document_id` (extension) counts the document too.",
    body: { schema: 'TokenizeRequest' },
    responses: { 200: { description: 'The tokens', schema: 'TokenizeResponse' }, 400: E400, 401: E401, 404: E404, 409: E409 },
  },
  {
    method: 'post',
    path: '/detokenize',
    operationId: 'detokenize',
    tag: 'Tokens',
    summary: 'Text of token ids',
    auth: 'key',
    body: { schema: 'DetokenizeRequest' },
    responses: { 200: { description: 'The text', schema: 'DetokenizeResponse' }, 400: E400, 401: E401 },
  },
  {
    method: 'get',
    path: '/healthz',
    operationId: 'health',
    tag: 'Operations',
    summary: 'The process answers',
    auth: 'none',
    responses: { 200: { description: 'Alive', schema: 'Health' } },
  },
  {
    method: 'get',
    path: '/readyz',
    operationId: 'ready',
    tag: 'Operations',
    summary: 'Redis and the store are reachable',
    auth: 'none',
    responses: { 200: { description: 'Ready', schema: 'Readiness' }, 503: { description: 'Not ready (checks say why)', schema: 'Readiness' } },
  },
  {
    method: 'get',
    path: '/metrics',
    operationId: 'metrics',
    tag: 'Operations',
    summary: 'Prometheus metrics',
    auth: 'none',
    responses: { 200: { description: 'Prometheus text format', media: 'text' } },
  },
  {
    method: 'get',
    path: '/',
    operationId: 'statusPage',
    tag: 'Operations',
    summary: 'Status page for operators',
    auth: 'status',
    description:
      'HTML. An operator key (CSA2_OPERATOR_KEYS) sees every tenant, the queues, workers and metrics; a tenant key sees its own documents and batches only. Send the key as Bearer or as the Basic password.',
    responses: { 200: { description: 'The page', media: 'html' }, 401: { description: 'No key: asks for one (WWW-Authenticate: Basic)', media: 'html' } },
  },
  {
    method: 'get',
    path: '/status.json',
    operationId: 'status',
    tag: 'Operations',
    summary: 'What the status page shows, as JSON',
    auth: 'status',
    responses: { 200: { description: 'The status' }, 401: E401 },
  },
  {
    method: 'get',
    path: '/openapi.json',
    operationId: 'openapi',
    tag: 'Operations',
    summary: 'This document',
    auth: 'none',
    responses: { 200: { description: 'OpenAPI 3.1' } },
  },
  {
    method: 'get',
    path: '/docs',
    operationId: 'docs',
    tag: 'Operations',
    summary: 'API reference (HTML, works offline)',
    auth: 'none',
    responses: { 200: { description: 'The page', media: 'html' } },
  },
];

const MEDIA_TYPE: Record<Media, string> = {
  json: 'application/json',
  'sse+json': 'application/json',
  html: 'text/html',
  text: 'text/plain',
  octet: 'application/octet-stream',
  multipart: 'multipart/form-data',
};

type JsonSchema = Record<string, unknown>;

function strip(schema: JsonSchema): JsonSchema {
  const { $schema: _s, $id: _i, ...rest } = schema;
  return rest;
}

function componentSchemas(): Record<string, JsonSchema> {
  void REFERENCED;
  const out = z.toJSONSchema(z.globalRegistry, { target: 'draft-2020-12', io: 'input', unrepresentable: 'any', uri: (id) => `#/components/schemas/${id}` });
  return Object.fromEntries(Object.entries(out.schemas).map(([id, s]) => [id, strip(s as JsonSchema)]));
}

function content(media: Media, schemaId: string | undefined): Record<string, unknown> {
  const schema = schemaId !== undefined ? { schema: { $ref: `#/components/schemas/${schemaId}` } } : {};
  if (media === 'sse+json')
    return {
      'application/json': schema,
      'text/event-stream': { schema: { type: 'string', description: `data: <${schemaId ?? 'chunk'} chunk JSON> events, then data: [DONE]` } },
    };
  return {
    [MEDIA_TYPE[media]]:
      media === 'html' || media === 'text' || media === 'octet'
        ? { schema: { type: 'string', ...(media === 'octet' ? { contentMediaType: 'application/octet-stream' } : {}) } }
        : schema,
  };
}

function queryParameters(query: z.ZodObject): Record<string, unknown>[] {
  return Object.entries(query.shape).map(([name, field]) => ({
    name,
    in: 'query',
    required: !(field as z.ZodType).safeParse(undefined).success,
    schema: strip(z.toJSONSchema(field as z.ZodType, { target: 'draft-2020-12', io: 'input', unrepresentable: 'any' }) as JsonSchema),
  }));
}

function pathParameters(path: string): Record<string, unknown>[] {
  return [...path.matchAll(/\{([^}]+)\}/g)].map((m) => ({ name: m[1], in: 'path', required: true, schema: { type: 'string' } }));
}

const SECURITY: Record<Auth, unknown[]> = {
  key: [{ apiKey: [] }],
  status: [{ apiKey: [] }, { basicKey: [] }],
  none: [],
};

export interface SpecInfo {
  readonly modelName: string;
  readonly version: string;
}

/** The OpenAPI 3.1 document. */
export function buildOpenApiSpec(info: SpecInfo): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const op of OPERATIONS) {
    const parameters = [...pathParameters(op.path), ...(op.query !== undefined ? queryParameters(op.query) : [])];
    paths[op.path] ??= {};
    (paths[op.path] as Record<string, unknown>)[op.method] = {
      operationId: op.operationId,
      tags: [op.tag],
      summary: op.summary,
      ...(op.description !== undefined ? { description: op.description } : {}),
      security: SECURITY[op.auth],
      ...(parameters.length > 0 ? { parameters } : {}),
      ...(op.body !== undefined ? { requestBody: { required: true, content: content(op.body.media ?? 'json', op.body.schema) } } : {}),
      responses: Object.fromEntries(
        Object.entries(op.responses).map(([status, r]) => [
          status,
          { description: r.description, ...(r.schema !== undefined || r.media !== undefined ? { content: content(r.media ?? 'json', r.schema) } : {}) },
        ]),
      ),
    };
  }
  return {
    openapi: '3.1.0',
    jsonSchemaDialect: 'https://json-schema.org/draft/2020-12/schema',
    info: {
      title: 'csa2-serve gateway',
      version: info.version,
      description: `OpenAI-compatible API serving ${info.modelName} (DeepSeek-V4.1-Flash architecture, CSA2 sparse attention) with stored documents, the Files and Batch API, and vLLM's tokenize endpoints. Errors use OpenAI's shape.`,
    },
    servers: [{ url: '/' }],
    tags: ['Completions', 'Models', 'Documents', 'Files', 'Batches', 'Tokens', 'Operations'].map((name) => ({ name })),
    paths,
    components: {
      schemas: componentSchemas(),
      securitySchemes: {
        apiKey: { type: 'http', scheme: 'bearer', description: 'An API key (CSA2_API_KEYS); every id it sees is its tenant’s' },
        basicKey: { type: 'http', scheme: 'basic', description: 'The status page in a browser: the key as the password (any user name)' },
      },
    },
  };
}
