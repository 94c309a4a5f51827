/**
 * @module files/file-store
 * Files (OpenAI's `/v1/files`) in the object store, tenant-scoped (keys in files/keys.ts). The
 * content is written first and the metadata last, so a file whose metadata can be read is complete;
 * a crash between the two leaves content without metadata, which no listing shows.
 *
 * Purposes: `batch` (uploaded batch input), `batch_output` (a batch's output and error files,
 * written by the gateway). Content is immutable; delete removes the metadata first, then the content.
 */
import { z } from 'zod';
import type { ObjectStore } from '@csa2/artifacts';
import { FILE_PURPOSES, type FilePurpose } from '../schemas/files.js';
import { FILE_ID_PATTERN, fileContentKey, fileMetaKey, filesPrefix } from './keys.js';

/** OpenAI's file object. */
export const FileObjectSchema = z
  .object({
    id: z.string(),
    object: z.literal('file'),
    bytes: z.number().int(),
    created_at: z.number().int().describe('Unix seconds'),
    filename: z.string(),
    purpose: z.enum(FILE_PURPOSES),
    status: z.literal('processed'),
    status_details: z.null(),
    expires_at: z.null(),
  })
  .meta({ id: 'FileObject' });
export type FileObject = z.infer<typeof FileObjectSchema>;

export const FileListSchema = z
  .object({
    object: z.literal('list'),
    data: z.array(FileObjectSchema),
    first_id: z.string().nullable(),
    last_id: z.string().nullable(),
    has_more: z.boolean(),
  })
  .meta({ id: 'FileList' });

export const FileDeletedSchema = z.object({ id: z.string(), object: z.literal('file'), deleted: z.literal(true) }).meta({ id: 'FileDeleted' });

function isNotFound(err: unknown): boolean {
  return typeof err === 'object' && err !== null && 'code' in err && err.code === 'not-found';
}

function parseMeta(bytes: Uint8Array): FileObject {
  return FileObjectSchema.parse(JSON.parse(Buffer.from(bytes).toString('utf8')));
}

/** Stores a file (content, then metadata) and returns its object. */
export async function putFile(
  store: ObjectStore,
  tenant: string,
  file: { id: string; filename: string; purpose: FilePurpose; content: Uint8Array; createdAtMs: number },
): Promise<FileObject> {
  const object: FileObject = {
    id: file.id,
    object: 'file',
    bytes: file.content.byteLength,
    created_at: Math.floor(file.createdAtMs / 1000),
    filename: file.filename,
    purpose: file.purpose,
    status: 'processed',
    status_details: null,
    expires_at: null,
  };
  await store.put(fileContentKey(tenant, file.id), file.content);
  await store.put(fileMetaKey(tenant, file.id), Buffer.from(JSON.stringify(object)));
  return object;
}

/** The file's object, or null when the tenant has no such file. */
export async function getFileObject(store: ObjectStore, tenant: string, fileId: string): Promise<FileObject | null> {
  if (!FILE_ID_PATTERN.test(fileId)) return null;
  try {
    return parseMeta(await store.get(fileMetaKey(tenant, fileId)));
  } catch (err) {
    if (isNotFound(err)) return null;
    throw err;
  }
}

/** The file's bytes, or null when the tenant has no such file. */
export async function getFileContent(store: ObjectStore, tenant: string, fileId: string): Promise<Uint8Array | null> {
  if ((await getFileObject(store, tenant, fileId)) === null) return null;
  try {
    return await store.get(fileContentKey(tenant, fileId));
  } catch (err) {
    if (isNotFound(err)) return null;
    throw err;
  }
}

/** Removes the file; false when there was none. */
export async function deleteFile(store: ObjectStore, tenant: string, fileId: string): Promise<boolean> {
  if ((await getFileObject(store, tenant, fileId)) === null) return false;
  await store.delete(fileMetaKey(tenant, fileId));
  await store.delete(fileContentKey(tenant, fileId));
  return true;
}

export interface ListFilesOptions {
  /** Only files of this purpose. */
  readonly purpose?: FilePurpose | undefined;
  /** @defaultValue 10000 */
  readonly limit?: number | undefined;
  /** 'desc' (newest first) or 'asc'. @defaultValue 'desc' */
  readonly order?: 'asc' | 'desc' | undefined;
  /** Start after this id (the previous page's last_id). */
  readonly after?: string | undefined;
}

/** One page of the tenant's files, ordered by creation time (ids sort by it). */
export async function listFiles(store: ObjectStore, tenant: string, options: ListFilesOptions = {}): Promise<{ data: FileObject[]; hasMore: boolean }> {
  const prefix = filesPrefix(tenant);
  const ids = (await store.list(prefix))
    .map((o) => o.key.slice(prefix.length))
    .filter((rest) => rest.endsWith('/meta.json'))
    .map((rest) => rest.slice(0, -'/meta.json'.length))
    .filter((id) => FILE_ID_PATTERN.test(id))
    .sort();
  const order = options.order ?? 'desc';
  if (order === 'desc') ids.reverse();
  const after = options.after;
  const start = after === undefined ? 0 : ids.findIndex((id) => (order === 'desc' ? id < after : id > after));
  const limit = options.limit ?? 10_000;
  const data: FileObject[] = [];
  let hasMore = false;
  for (const id of start < 0 ? [] : ids.slice(start)) {
    const object = await getFileObject(store, tenant, id);
    if (object === null || (options.purpose !== undefined && object.purpose !== options.purpose)) continue;
    if (data.length === limit) {
      hasMore = true;
      break;
    }
    data.push(object);
  }
  return { data, hasMore };
}
