/**
 * @module schemas/files
 * Requests of the Files API: the upload's multipart fields and the query of GET /v1/files.
 */
import { z } from 'zod';

export const FILE_PURPOSES = ['batch', 'batch_output'] as const;
export type FilePurpose = (typeof FILE_PURPOSES)[number];

/** The multipart fields besides `file` (which is checked on its own: a binary part). */
export const FileUploadFieldsSchema = z
  .object({
    purpose: z.literal('batch', { error: "must be 'batch' (this server keeps files for the Batch API only)" }),
    file: z.string().meta({ format: 'binary', description: 'The JSONL file (one request per line)' }).optional(),
  })
  .meta({ id: 'FileUpload' });

export const FileListQuerySchema = z.object({
  purpose: z.enum(FILE_PURPOSES, { error: `must be one of ${FILE_PURPOSES.join(', ')}` }).optional(),
  limit: z.coerce
    .number({ error: 'must be an integer' })
    .int('must be an integer')
    .min(1, 'must be at least 1')
    .max(10_000, 'must be at most 10000')
    .optional(),
  order: z.enum(['asc', 'desc'], { error: "must be 'asc' or 'desc'" }).optional(),
  after: z.string().optional(),
});
