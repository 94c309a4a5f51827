/**
 * @module routes/files
 * OpenAI's Files API for batch input and output, tenant-scoped (files/file-store.ts):
 *
 * - POST /v1/files — multipart/form-data with `file` and `purpose` ('batch'); the body may be up to
 *   CSA2_MAX_FILE_BYTES (413 past it) and at most CSA2_UPLOAD_CONCURRENCY uploads are buffered at
 *   once (429 past it). A batch input must be UTF-8 JSONL with 1 to CSA2_BATCH_MAX_LINES requests;
 *   each line is checked when a batch runs it;
 * - GET /v1/files (`purpose`, `limit` 1–10000, `order` asc|desc, `after`), GET /v1/files/:file_id,
 *   GET /v1/files/:file_id/content, DELETE /v1/files/:file_id (409 while a batch reads it).
 */
import { Hono } from 'hono';
import { ApiError, invalidRequest } from '../errors.js';
import type { GatewayDeps } from '../capabilities.js';
import type { TenantVariables } from '../middleware/api-key-auth.js';
import { countInputLines } from '../batch/input-lines.js';
import { newFileId } from '../files/keys.js';
import { deleteFile, getFileContent, getFileObject, listFiles, putFile } from '../files/file-store.js';
import { FileListQuerySchema, FileUploadFieldsSchema } from '../schemas/files.js';
import { parseRequest } from '../schemas/parse.js';

/** The capabilities this module takes. */
export type FilesRouteDeps = Pick<GatewayDeps, 'batches' | 'config' | 'store'>;

const MAX_FILENAME_CHARS = 512;

function notFound(id: string): ApiError {
  return new ApiError(404, `No such File object: ${id}`, { param: 'file_id', code: 'file_not_found' });
}

export function filesRoutes(deps: FilesRouteDeps): Hono<{ Variables: TenantVariables }> {
  const app = new Hono<{ Variables: TenantVariables }>();
  const config = deps.config.batch;
  let uploading = 0;

  app.post('/files', async (c) => {
    const contentType = c.req.header('content-type') ?? '';
    if (!contentType.toLowerCase().startsWith('multipart/form-data')) {
      throw invalidRequest('Upload a file as multipart/form-data with the fields `file` and `purpose`', null, 'invalid_content_type');
    }
    if (uploading >= config.uploadConcurrency) {
      throw new ApiError(429, `Too many uploads at once (CSA2_UPLOAD_CONCURRENCY = ${config.uploadConcurrency}); retry shortly`, {
        code: 'too_many_uploads',
        headers: { 'retry-after': '1' },
      });
    }
    uploading++;
    try {
      let form: Record<string, string | File | (string | File)[]>;
      try {
        form = await c.req.parseBody({ all: true });
      } catch (err) {
        if (err instanceof ApiError) throw err;
        throw invalidRequest(`The multipart body could not be read: ${err instanceof Error ? err.message : String(err)}`, null, 'invalid_multipart');
      }
      const purposeField = form['purpose'];
      parseRequest(FileUploadFieldsSchema, { purpose: typeof purposeField === 'string' ? purposeField : undefined });
      const file = form['file'];
      if (!(file instanceof File))
        throw invalidRequest("Invalid value for 'file': send the file as a multipart file part named 'file'", 'file', 'invalid_value');
      const filename = file.name !== '' ? file.name : 'upload.jsonl';
      if (filename.length > MAX_FILENAME_CHARS)
        throw invalidRequest(`Invalid value for 'file': the file name has more than ${MAX_FILENAME_CHARS} characters`, 'file', 'invalid_value');
      const content = new Uint8Array(await file.arrayBuffer());
      const lines = countInputLines(content);
      if (lines === null) throw invalidRequest("Invalid value for 'file': a batch input file must be UTF-8 text (JSONL)", 'file', 'invalid_file');
      if (lines === 0) throw invalidRequest("Invalid value for 'file': the file holds no request (one JSON object per line)", 'file', 'empty_file');
      if (lines > config.maxLines)
        throw invalidRequest(
          `Invalid value for 'file': ${lines} requests; a batch takes at most ${config.maxLines} (CSA2_BATCH_MAX_LINES)`,
          'file',
          'too_many_lines',
        );
      const nowMs = Date.now();
      const object = await putFile(deps.store, c.get('tenant'), { id: newFileId(nowMs), filename, purpose: 'batch', content, createdAtMs: nowMs });
      return c.json(object);
    } finally {
      uploading--;
    }
  });

  app.get('/files', async (c) => {
    const q = parseRequest(FileListQuerySchema, c.req.query());
    const page = await listFiles(deps.store, c.get('tenant'), { purpose: q.purpose, limit: q.limit, order: q.order, after: q.after });
    return c.json({ object: 'list', data: page.data, first_id: page.data[0]?.id ?? null, last_id: page.data.at(-1)?.id ?? null, has_more: page.hasMore });
  });

  app.get('/files/:file_id', async (c) => {
    const id = c.req.param('file_id');
    const object = await getFileObject(deps.store, c.get('tenant'), id);
    if (object === null) throw notFound(id);
    return c.json(object);
  });

  app.get('/files/:file_id/content', async (c) => {
    const id = c.req.param('file_id');
    const tenant = c.get('tenant');
    const object = await getFileObject(deps.store, tenant, id);
    const content = object === null ? null : await getFileContent(deps.store, tenant, id);
    if (object === null || content === null) throw notFound(id);
    return c.body(content as Uint8Array<ArrayBuffer>, 200, {
      'content-type': 'application/octet-stream',
      'content-disposition': `attachment; filename="${object.filename.replace(/[^\x20-\x7e]|"/g, '_')}"`,
    });
  });

  app.delete('/files/:file_id', async (c) => {
    const id = c.req.param('file_id');
    const tenant = c.get('tenant');
    if ((await getFileObject(deps.store, tenant, id)) === null) throw notFound(id);
    const readers = await deps.batches.store.fileRefs(tenant, id);
    if (readers.length > 0) {
      throw new ApiError(
        409,
        `File ${id} is the input of batch ${readers.join(', ')}, which has not ended; delete it once the batch ended (or cancel the batch)`,
        { param: 'file_id', code: 'file_in_use' },
      );
    }
    if (!(await deleteFile(deps.store, tenant, id))) throw notFound(id);
    return c.json({ id, object: 'file', deleted: true });
  });

  return app;
}
