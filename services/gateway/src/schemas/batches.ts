/**
 * @module schemas/batches
 * Requests of the Batch API: POST /v1/batches, the query of GET /v1/batches, and one line of a batch
 * input file (`{custom_id, method, url, body}`; its body is checked by the endpoint's own schema when
 * the line runs).
 */
import { z } from 'zod';

export const BATCH_ENDPOINTS = ['/v1/completions', '/v1/chat/completions', '/v1/documents'] as const;
export type BatchEndpoint = (typeof BATCH_ENDPOINTS)[number];

/** `24h` as OpenAI takes it; as an extension any `<n>s`, `<n>m` or `<n>h` up to CSA2_BATCH_MAX_WINDOW_MS. */
export const COMPLETION_WINDOW_PATTERN = /^([1-9][0-9]{0,6})(s|m|h)$/;

const metadataSchema = z
  .record(z.string().max(64, 'metadata keys have at most 64 characters'), z.string().max(512, 'metadata values have at most 512 characters'))
  .refine((m) => Object.keys(m).length <= 16, 'at most 16 metadata pairs');

export const BatchCreateRequestSchema = z
  .object({
    input_file_id: z.string({ error: 'you must provide an input_file_id' }).min(1, 'you must provide an input_file_id'),
    endpoint: z.enum(BATCH_ENDPOINTS, { error: `must be one of ${BATCH_ENDPOINTS.join(', ')}` }),
    completion_window: z
      .string({ error: "must be a string such as '24h'" })
      .regex(COMPLETION_WINDOW_PATTERN, "must be '24h' (or, as an extension, <n>s, <n>m or <n>h)")
      .describe("'24h'; extension: any <n>s | <n>m | <n>h up to CSA2_BATCH_MAX_WINDOW_MS"),
    metadata: metadataSchema.nullish(),
  })
  .meta({ id: 'BatchCreateRequest' });
export type BatchCreateRequest = z.infer<typeof BatchCreateRequestSchema>;

export const BatchListQuerySchema = z.object({
  limit: z.coerce.number({ error: 'must be an integer' }).int('must be an integer').min(1, 'must be at least 1').max(100, 'must be at most 100').optional(),
  after: z.string().optional(),
});

export const BatchInputLineSchema = z
  .object({
    custom_id: z.string({ error: 'must be a string' }).min(1, 'must not be empty').max(512, 'at most 512 characters'),
    method: z.literal('POST', { error: "must be 'POST'" }),
    url: z.enum(BATCH_ENDPOINTS, { error: `must be one of ${BATCH_ENDPOINTS.join(', ')}` }),
    body: z.record(z.string(), z.unknown(), { error: 'must be a JSON object (the request body)' }),
  })
  .meta({ id: 'BatchInputLine', description: 'One line of a batch input file (JSONL)' });
