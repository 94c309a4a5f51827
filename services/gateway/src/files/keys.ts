/**
 * @module files/keys
 * Ids and object-store keys of files (tenant-scoped):
 *
 * | what | where |
 * |---|---|
 * | file content | store `tenants/<tenant>/files/<fileId>/content` |
 * | file metadata (written last: its presence means the file exists) | store `tenants/<tenant>/files/<fileId>/meta.json` |
 *
 * Ids sort by creation time (sortable-ids.ts): `file-` + 9 base-36 digits of the creation time in
 * ms + 15 random base64url characters. Listings page by id.
 */
import { tenantPrefix } from '@csa2/artifacts';
import { randomPart, timePart } from '../sortable-ids.js';

export const FILE_ID_PATTERN = /^file-[0-9a-z]{9}[A-Za-z0-9_-]{15}$/;

export function newFileId(nowMs: number = Date.now()): string {
  return `file-${timePart(nowMs)}${randomPart()}`;
}

export const fileContentKey = (tenant: string, fileId: string): string => `${tenantPrefix(tenant)}files/${fileId}/content`;
export const fileMetaKey = (tenant: string, fileId: string): string => `${tenantPrefix(tenant)}files/${fileId}/meta.json`;
export const filesPrefix = (tenant: string): string => `${tenantPrefix(tenant)}files/`;
