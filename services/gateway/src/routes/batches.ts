/**
 * @module routes/batches
 * OpenAI's Batch API on our own queues, tenant-scoped (batch/ has the design):
 *
 * - POST /v1/batches `{input_file_id, endpoint, completion_window, metadata?}` → the batch
 *   (`validating`); endpoints: /v1/completions, /v1/chat/completions, /v1/documents;
 * - GET /v1/batches/:batch_id, GET /v1/batches (`after`, `limit` 1–100, newest first);
 * - POST /v1/batches/:batch_id/cancel → `cancelling` (then `cancelled` once its running lines
 *   stopped); cancelling an ended batch is a 409, cancelling a cancelling one returns it unchanged.
 */
import { Hono } from 'hono';
import { ApiError, invalidRequest } from '../errors.js';
import type { GatewayDeps } from '../capabilities.js';
import type { TenantVariables } from '../middleware/api-key-auth.js';
import { readJson } from '../middleware/json-body.js';
import { batchObject, completionWindowMs, newBatchFields, type BatchRecord } from '../batch/batch-object.js';
import { enqueueBatchRun } from '../batch/batch-queue.js';
import { BATCH_ID_PATTERN, newBatchId } from '../batch/keys.js';
import { getFileObject } from '../files/file-store.js';
import { BatchCreateRequestSchema, BatchListQuerySchema } from '../schemas/batches.js';
import { parseRequest } from '../schemas/parse.js';

/** The capabilities this module takes. */
export type BatchesRouteDeps = Pick<GatewayDeps, 'batches' | 'config' | 'inflight' | 'model' | 'store'>;

function notFound(id: string): ApiError {
  return new ApiError(404, `No such Batch object: ${id}`, { param: 'batch_id', code: 'batch_not_found' });
}

export function batchesRoutes(deps: BatchesRouteDeps): Hono<{ Variables: TenantVariables }> {
  const app = new Hono<{ Variables: TenantVariables }>();
  const { store: batches, queue } = deps.batches;

  async function find(tenant: string, id: string): Promise<BatchRecord> {
    const record = BATCH_ID_PATTERN.test(id) ? await batches.get(id) : null;
    if (record === null || record.tenant !== tenant) throw notFound(id);
    return record;
  }

  app.post('/batches', async (c) => {
    const tenant = c.get('tenant');
    const body = parseRequest(BatchCreateRequestSchema, await readJson(c));
    const windowMs = completionWindowMs(body.completion_window) ?? 0;
    if (windowMs > deps.config.batch.maxCompletionWindowMs) {
      throw invalidRequest(
        `Invalid value for 'completion_window': at most ${deps.config.batch.maxCompletionWindowMs} ms (CSA2_BATCH_MAX_WINDOW_MS)`,
        'completion_window',
        'invalid_value',
      );
    }
    const file = await getFileObject(deps.store, tenant, body.input_file_id);
    if (file === null) throw new ApiError(404, `No such File object: ${body.input_file_id}`, { param: 'input_file_id', code: 'file_not_found' });
    if (file.purpose !== 'batch')
      throw invalidRequest(
        `Invalid value for 'input_file_id': file ${file.id} has purpose '${file.purpose}'; a batch reads a file uploaded with purpose 'batch'`,
        'input_file_id',
        'invalid_value',
      );
    if (!deps.inflight.isAccepting) throw new ApiError(503, 'the server is shutting down', { code: 'shutting_down', headers: { 'retry-after': '1' } });
    const nowMs = Date.now();
    const id = newBatchId(nowMs);
    const fields = newBatchFields({
      id,
      tenant,
      endpoint: body.endpoint,
      model: deps.model.name,
      inputFileId: file.id,
      completionWindow: body.completion_window,
      createdAtMs: nowMs,
      expiresAtMs: nowMs + windowMs,
      metadata: body.metadata ?? null,
    });
    await batches.create(tenant, file.id, fields);
    await enqueueBatchRun(queue, id, tenant);
    return c.json(batchObject(await find(tenant, id)));
  });

  app.get('/batches', async (c) => {
    const q = parseRequest(BatchListQuerySchema, c.req.query());
    const page = await batches.list(c.get('tenant'), { after: q.after, limit: q.limit ?? 20 });
    const data = page.data.map(batchObject);
    return c.json({ object: 'list', data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: page.hasMore });
  });

  app.get('/batches/:batch_id', async (c) => {
    const record = await find(c.get('tenant'), c.req.param('batch_id'));
    // the driver job is added right after the record; a gateway that died in between left none
    if (record.status === 'validating') await enqueueBatchRun(queue, record.id, record.tenant);
    return c.json(batchObject(record));
  });

  app.post('/batches/:batch_id/cancel', async (c) => {
    const tenant = c.get('tenant');
    const record = await find(tenant, c.req.param('batch_id'));
    if (record.status !== 'cancelling') {
      const moved = await batches.transition(record.id, ['validating', 'in_progress'], 'cancelling', { cancelling_at_ms: Date.now() });
      if (!moved) {
        const now = await find(tenant, record.id);
        if (now.status !== 'cancelling') {
          throw new ApiError(409, `Batch ${record.id} is ${now.status} and can no longer be cancelled`, { param: 'batch_id', code: 'batch_not_cancellable' });
        }
      }
    }
    return c.json(batchObject(await find(tenant, record.id)));
  });

  return app;
}
