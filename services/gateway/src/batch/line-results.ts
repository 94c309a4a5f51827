/**
 * @module batch/line-results
 * A batch line's result, in OpenAI's output/error file format, and how results become the two files.
 *
 * - a line that ran and answered 2xx → output file:
 *   `{"id": "batch_req_…", "custom_id": …, "response": {"status_code": 200, "request_id": …, "body": {…}}, "error": null}`
 * - a line that ran (or was checked) and answered an error → error file, same shape with the error
 *   status and OpenAI's error body `{"error": {message, type, param, code}}`;
 * - a line that never ran (bad JSONL line, expired, cancelled) → error file with `"response": null`
 *   and `"error": {"code", "message"}`.
 *
 * Each result is stored as its own object (batch/keys.ts) with `ifAbsent`, before the line counts as
 * done: the first result stored for a line is the one the files show, however often a restarted
 * driver collects it. Finalizing reads them all in line order and writes both files.
 */
import { z } from 'zod';
import type { ObjectStore } from '@csa2/artifacts';
import type { ApiError } from '../errors.js';
import { putFile, type FileObject } from '../files/file-store.js';
import { batchFileId, batchLineKey, batchLinesPrefix, lineOutputId } from './keys.js';

export const BatchOutputLineSchema = z
  .object({
    id: z.string(),
    custom_id: z.string().nullable(),
    response: z.object({ status_code: z.number().int(), request_id: z.string(), body: z.record(z.string(), z.unknown()) }).nullable(),
    error: z.object({ code: z.string(), message: z.string() }).nullable(),
  })
  .meta({ id: 'BatchOutputLine', description: 'One line of a batch output or error file (JSONL)' });
export type BatchOutputLine = z.infer<typeof BatchOutputLineSchema>;

/** What is stored per line. */
export interface StoredLineResult {
  readonly index: number;
  /** true: output file; false: error file. */
  readonly ok: boolean;
  readonly line: BatchOutputLine;
}

export function responseLine(
  batchId: string,
  index: number,
  customId: string | null,
  response: { statusCode: number; requestId: string; body: Record<string, unknown> },
): BatchOutputLine {
  return {
    id: lineOutputId(batchId, index),
    custom_id: customId,
    response: { status_code: response.statusCode, request_id: response.requestId, body: response.body },
    error: null,
  };
}

export function apiErrorLine(batchId: string, index: number, customId: string | null, requestId: string, err: ApiError): BatchOutputLine {
  return responseLine(batchId, index, customId, { statusCode: err.status, requestId, body: err.toJSON() as unknown as Record<string, unknown> });
}

export function notRunLine(batchId: string, index: number, customId: string | null, code: string, message: string): BatchOutputLine {
  return { id: lineOutputId(batchId, index), custom_id: customId, response: null, error: { code, message } };
}

/** Stores the line's result unless one is stored already; returns the one that counts. */
export async function storeLineResult(store: ObjectStore, tenant: string, batchId: string, result: StoredLineResult): Promise<void> {
  await store.put(batchLineKey(tenant, batchId, result.index), Buffer.from(JSON.stringify(result)), { ifAbsent: true });
}

export interface FinalFiles {
  readonly output: FileObject | null;
  readonly error: FileObject | null;
}

/**
 * Writes the output file (successful lines) and the error file (the others), lines in input order,
 * under ids derived from the batch (a second finalization writes the same files). A file with no
 * line is not written (its id is null in the batch, as OpenAI does).
 */
export async function writeBatchFiles(store: ObjectStore, tenant: string, batchId: string, atMs: number): Promise<FinalFiles> {
  const prefix = batchLinesPrefix(tenant, batchId);
  const keys = (await store.list(prefix)).map((o) => o.key).sort();
  const out: string[] = [];
  const errors: string[] = [];
  for (const key of keys) {
    const result = JSON.parse(Buffer.from(await store.get(key)).toString('utf8')) as StoredLineResult;
    (result.ok ? out : errors).push(`${JSON.stringify(result.line)}\n`);
  }
  const write = async (which: 'output' | 'error', lines: string[]): Promise<FileObject | null> =>
    lines.length === 0
      ? null
      : putFile(store, tenant, {
          id: batchFileId(batchId, which, atMs),
          filename: `${batchId}_${which}.jsonl`,
          purpose: 'batch_output',
          content: Buffer.from(lines.join('')),
          createdAtMs: atMs,
        });
  return { output: await write('output', out), error: await write('error', errors) };
}

/** Removes the per-line results (once the files are written and the batch ended). */
export async function dropLineResults(store: ObjectStore, tenant: string, batchId: string): Promise<void> {
  for (const { key } of await store.list(batchLinesPrefix(tenant, batchId))) await store.delete(key);
}
