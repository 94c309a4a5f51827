/**
 * @module batch/batch-object
 * The batch object of OpenAI's Batch API (what create, retrieve, list and cancel answer), the create
 * request, and the record a batch is kept as in Redis (a hash of strings; batch/batch-store.ts).
 *
 * States: `validating` (created; its driver has not read the input yet) → `in_progress` →
 * `finalizing` (every line done; output and error files being written) → `completed`. Also:
 * `failed` (the input file as a whole is unusable: empty, too many lines, gone), `expired` (the
 * completion window ran out: unfinished lines are written off as `batch_expired`), `cancelling` →
 * `cancelled` (unfinished lines written off as `batch_cancelled`). The four end states never change.
 */
import { z } from 'zod';
import { BATCH_ENDPOINTS, COMPLETION_WINDOW_PATTERN, type BatchEndpoint } from '../schemas/batches.js';

export const BATCH_STATUSES = ['validating', 'failed', 'in_progress', 'finalizing', 'completed', 'expired', 'cancelling', 'cancelled'] as const;
export type BatchStatus = (typeof BATCH_STATUSES)[number];
export const TERMINAL_STATUSES: ReadonlySet<BatchStatus> = new Set(['failed', 'completed', 'expired', 'cancelled']);

/** Milliseconds of a completion window, or null when it is not one. */
export function completionWindowMs(window: string): number | null {
  const m = COMPLETION_WINDOW_PATTERN.exec(window);
  if (m === null) return null;
  const unitMs = m[2] === 's' ? 1000 : m[2] === 'm' ? 60_000 : 3_600_000;
  return Number(m[1]) * unitMs;
}

export const BatchErrorSchema = z.object({ code: z.string(), message: z.string(), param: z.string().nullable(), line: z.number().int().nullable() });
export type BatchError = z.infer<typeof BatchErrorSchema>;

export const BatchObjectSchema = z
  .object({
    id: z.string(),
    object: z.literal('batch'),
    endpoint: z.enum(BATCH_ENDPOINTS),
    model: z.string(),
    errors: z.object({ object: z.literal('list'), data: z.array(BatchErrorSchema) }).nullable(),
    input_file_id: z.string(),
    completion_window: z.string(),
    status: z.enum(BATCH_STATUSES),
    output_file_id: z.string().nullable(),
    error_file_id: z.string().nullable(),
    created_at: z.number().int(),
    in_progress_at: z.number().int().nullable(),
    expires_at: z.number().int(),
    finalizing_at: z.number().int().nullable(),
    completed_at: z.number().int().nullable(),
    failed_at: z.number().int().nullable(),
    expired_at: z.number().int().nullable(),
    cancelling_at: z.number().int().nullable(),
    cancelled_at: z.number().int().nullable(),
    request_counts: z.object({ total: z.number().int(), completed: z.number().int(), failed: z.number().int() }),
    usage: z.object({
      input_tokens: z.number().int(),
      input_tokens_details: z.object({ cached_tokens: z.number().int() }),
      output_tokens: z.number().int(),
      output_tokens_details: z.object({ reasoning_tokens: z.number().int() }),
      total_tokens: z.number().int(),
    }),
    metadata: z.record(z.string(), z.string()).nullable(),
  })
  .meta({ id: 'Batch' });
export type BatchObject = z.infer<typeof BatchObjectSchema>;

export const BatchListSchema = z
  .object({
    object: z.literal('list'),
    data: z.array(BatchObjectSchema),
    first_id: z.string().nullable(),
    last_id: z.string().nullable(),
    has_more: z.boolean(),
  })
  .meta({ id: 'BatchList' });

/** The batch as kept in Redis: times in ms (0 = not yet), counts, the JSON parts as strings. */
export interface BatchRecord {
  readonly id: string;
  readonly tenant: string;
  readonly endpoint: BatchEndpoint;
  readonly model: string;
  readonly inputFileId: string;
  readonly completionWindow: string;
  readonly status: BatchStatus;
  readonly outputFileId: string | null;
  readonly errorFileId: string | null;
  readonly createdAtMs: number;
  readonly inProgressAtMs: number;
  readonly expiresAtMs: number;
  readonly finalizingAtMs: number;
  readonly completedAtMs: number;
  readonly failedAtMs: number;
  readonly expiredAtMs: number;
  readonly cancellingAtMs: number;
  readonly cancelledAtMs: number;
  readonly total: number;
  readonly completed: number;
  readonly failed: number;
  readonly promptTokens: number;
  readonly completionTokens: number;
  readonly cachedTokens: number;
  readonly errors: readonly BatchError[] | null;
  readonly metadata: Readonly<Record<string, string>> | null;
}

/** Redis hash fields of a new batch. */
export function newBatchFields(
  r: Pick<BatchRecord, 'id' | 'tenant' | 'endpoint' | 'model' | 'inputFileId' | 'completionWindow' | 'createdAtMs' | 'expiresAtMs' | 'metadata'>,
): Record<string, string> {
  return {
    id: r.id,
    tenant: r.tenant,
    endpoint: r.endpoint,
    model: r.model,
    input_file_id: r.inputFileId,
    completion_window: r.completionWindow,
    status: 'validating',
    created_at_ms: String(r.createdAtMs),
    expires_at_ms: String(r.expiresAtMs),
    metadata: JSON.stringify(r.metadata),
    total: '0',
    completed: '0',
    failed: '0',
  };
}

function int(fields: Readonly<Record<string, string>>, name: string): number {
  const n = Number(fields[name] ?? '0');
  return Number.isSafeInteger(n) ? n : 0;
}

/** The record from its Redis hash; null for an empty hash (no such batch). */
export function parseBatchRecord(fields: Readonly<Record<string, string>>): BatchRecord | null {
  if (fields['id'] === undefined) return null;
  const status = fields['status'] as BatchStatus;
  const str = (name: string): string | null => (fields[name] === undefined || fields[name] === '' ? null : (fields[name] as string));
  return {
    id: fields['id'],
    tenant: fields['tenant'] ?? '',
    endpoint: fields['endpoint'] as BatchEndpoint,
    model: fields['model'] ?? '',
    inputFileId: fields['input_file_id'] ?? '',
    completionWindow: fields['completion_window'] ?? '24h',
    status: (BATCH_STATUSES as readonly string[]).includes(status) ? status : 'failed',
    outputFileId: str('output_file_id'),
    errorFileId: str('error_file_id'),
    createdAtMs: int(fields, 'created_at_ms'),
    inProgressAtMs: int(fields, 'in_progress_at_ms'),
    expiresAtMs: int(fields, 'expires_at_ms'),
    finalizingAtMs: int(fields, 'finalizing_at_ms'),
    completedAtMs: int(fields, 'completed_at_ms'),
    failedAtMs: int(fields, 'failed_at_ms'),
    expiredAtMs: int(fields, 'expired_at_ms'),
    cancellingAtMs: int(fields, 'cancelling_at_ms'),
    cancelledAtMs: int(fields, 'cancelled_at_ms'),
    total: int(fields, 'total'),
    completed: int(fields, 'completed'),
    failed: int(fields, 'failed'),
    promptTokens: int(fields, 'prompt_tokens'),
    completionTokens: int(fields, 'completion_tokens'),
    cachedTokens: int(fields, 'cached_tokens'),
    errors: str('errors') === null ? null : (JSON.parse(fields['errors'] as string) as BatchError[]),
    metadata: str('metadata') === null ? null : (JSON.parse(fields['metadata'] as string) as Record<string, string> | null),
  };
}

const seconds = (ms: number): number | null => (ms > 0 ? Math.floor(ms / 1000) : null);

/** The OpenAI batch object of a record. */
export function batchObject(r: BatchRecord): BatchObject {
  return {
    id: r.id,
    object: 'batch',
    endpoint: r.endpoint,
    model: r.model,
    errors: r.errors === null ? null : { object: 'list', data: [...r.errors] },
    input_file_id: r.inputFileId,
    completion_window: r.completionWindow,
    status: r.status,
    output_file_id: r.outputFileId,
    error_file_id: r.errorFileId,
    created_at: Math.floor(r.createdAtMs / 1000),
    in_progress_at: seconds(r.inProgressAtMs),
    expires_at: Math.floor(r.expiresAtMs / 1000),
    finalizing_at: seconds(r.finalizingAtMs),
    completed_at: seconds(r.completedAtMs),
    failed_at: seconds(r.failedAtMs),
    expired_at: seconds(r.expiredAtMs),
    cancelling_at: seconds(r.cancellingAtMs),
    cancelled_at: seconds(r.cancelledAtMs),
    request_counts: { total: r.total, completed: r.completed, failed: r.failed },
    usage: {
      input_tokens: r.promptTokens,
      input_tokens_details: { cached_tokens: r.cachedTokens },
      output_tokens: r.completionTokens,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: r.promptTokens + r.completionTokens,
    },
    metadata: r.metadata === null ? null : { ...r.metadata },
  };
}
