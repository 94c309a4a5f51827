/**
 * @module batch/keys
 * Ids, Redis keys and object-store keys of batches; every one is tenant-scoped or carries its tenant
 * in the record it names (files have theirs in files/keys.ts).
 *
 * Ids sort by creation time (sortable-ids.ts): `batch_` + 9 base-36 digits of the creation time in
 * ms + 15 random base64url characters; a batch's own output files get `file-` ids whose last 15
 * characters derive from the batch, the same on every finalization. Listings page by id.
 *
 * | what | where |
 * |---|---|
 * | a batch line's result (written once, before the line counts as done) | store `tenants/<tenant>/batches/<batchId>/lines/<index>.json` |
 * | batch record (status, timestamps, counts) | Redis hash `csa2:batch:<batchId>` |
 * | a tenant's batches | Redis sorted set `csa2:batches:<tenant>` (score 0, members ordered by id) |
 * | lines done (index → ok / err) | Redis hash `csa2:batch:<batchId>:done` |
 * | lines submitted (index → attempt) | Redis hash `csa2:batch:<batchId>:attempts` |
 * | batches reading a file (refuse its deletion) | Redis set `csa2:file-refs:<tenant>:<fileId>` |
 * | the driver job of a batch | BullMQ queue `csa2-batch`, job id `batch.<batchId>` |
 *
 * Line request ids are derived from (batch, line, attempt) so that a restarted driver enqueues the
 * same BullMQ job ids (`req.<requestId>.decode|prefill`): BullMQ ignores the repeated add, or the
 * worker finds the stream already ended — a line never runs twice under one attempt.
 */
import { createHash } from 'node:crypto';
import { tenantPrefix } from '@csa2/artifacts';
import { derivedPart, randomPart, timePart } from '../sortable-ids.js';

export const BATCH_QUEUE = 'csa2-batch';
export const BATCH_JOB_NAME = 'batch';

export const BATCH_ID_PATTERN = /^batch_[0-9a-z]{9}[A-Za-z0-9_-]{15}$/;

/** The id of a file a batch produces (`which` = 'output' | 'error'): the same on every finalization of that batch. */
export function batchFileId(batchId: string, which: 'output' | 'error', atMs: number): string {
  return `file-${timePart(atMs)}${derivedPart(`${batchId}/${which}`)}`;
}

export function newBatchId(nowMs: number = Date.now()): string {
  return `batch_${timePart(nowMs)}${randomPart()}`;
}

/** The batch id without `batch_` (24 characters), the stem of its line ids. */
export function batchStem(batchId: string): string {
  return batchId.slice('batch_'.length);
}

/** Request id of a line's attempt (`cmpl-…` / `chatcmpl-…`, as direct requests): ≤ 44 characters. */
export function lineRequestId(batchId: string, endpoint: 'completions' | 'chat', index: number, attempt: number): string {
  return `${endpoint === 'chat' ? 'chatcmpl' : 'cmpl'}-${batchStem(batchId)}-${index}-${attempt}`;
}

/** The document id of a documents line that names none. */
export function lineDocumentId(batchId: string, index: number): string {
  return `doc-${batchStem(batchId)}-${index}`;
}

/** The `id` of a line in the output and error files. */
export function lineOutputId(batchId: string, index: number): string {
  return `batch_req_${batchStem(batchId)}_${index}`;
}

/** A seed for a line that gives none (the same on every attempt, so a retry samples the same text). */
export function lineSeed(batchId: string, index: number): number {
  return createHash('sha256').update(`${batchId}/${index}`).digest().readUInt32BE(0) >>> 1;
}

export const batchLinesPrefix = (tenant: string, batchId: string): string => `${tenantPrefix(tenant)}batches/${batchId}/lines/`;
export const batchLineKey = (tenant: string, batchId: string, index: number): string =>
  `${batchLinesPrefix(tenant, batchId)}${String(index).padStart(7, '0')}.json`;

export const batchKey = (batchId: string): string => `csa2:batch:${batchId}`;
export const tenantBatchesKey = (tenant: string): string => `csa2:batches:${tenant}`;
export const batchDoneKey = (batchId: string): string => `csa2:batch:${batchId}:done`;
export const batchAttemptsKey = (batchId: string): string => `csa2:batch:${batchId}:attempts`;
export const fileRefsKey = (tenant: string, fileId: string): string => `csa2:file-refs:${tenant}:${fileId}`;
export const batchJobId = (batchId: string): string => `batch.${batchId}`;
