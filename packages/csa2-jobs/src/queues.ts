/**
 * @module queues
 * Queue names and Redis key names shared by the gateway and the workers. Every key a request or a
 * document touches is derived here, so the layout is documented in one place:
 *
 *   bull:csa2-prefill:*            BullMQ queue of PrefillJob (encoder workers)
 *   bull:csa2-decode:*             BullMQ queue of DecodeJob (decoder workers)
 *   csa2:stream:<requestId>        Redis Stream of StreamEntry (decoder → gateway), expires after STREAM_TTL_SECONDS;
 *                                  choice 0 of a request (its only choice unless n > 1)
 *   csa2:stream:<requestId>:<i>    the stream of choice i ≥ 1 (DecodeJob.n), same format and rules
 *   csa2:cancel:<requestId>        present = the client went away; workers stop generating
 *   csa2:document-damage:<tenant>:<documentId>
 *                                  JSON { code, manifestCreatedAt }: a reader found the document's stored
 *                                  artifact damaged (a chunk missing or corrupt); its status says so
 */

export const PREFILL_QUEUE = 'csa2-prefill';
export const DECODE_QUEUE = 'csa2-decode';
export type QueueName = typeof PREFILL_QUEUE | typeof DECODE_QUEUE;

/** Streams and cancel flags outlive their request by this long (a late reader still gets the tail). */
export const STREAM_TTL_SECONDS = 3600;

export const streamKey = (requestId: string): string => `csa2:stream:${requestId}`;
/**
 * The stream id of a request's choice `choice`: the request id itself for choice 0 (so readers of one
 * choice keep reading `csa2:stream:<requestId>`), `<requestId>:<choice>` for the others. Every stream
 * function that takes a request id takes one of these (request ids never contain ':').
 */
export const choiceStreamId = (requestId: string, choice: number): string => (choice === 0 ? requestId : `${requestId}:${choice}`);
export const cancelKey = (requestId: string): string => `csa2:cancel:${requestId}`;
export const documentDamageKey = (tenant: string, documentId: string): string => `csa2:document-damage:${tenant}:${documentId}`;

/** BullMQ job id of a document's prefill job: one job per (tenant, document), so re-ingesting dedups. */
export const documentJobId = (tenant: string, documentId: string): string => `doc.${tenant}.${documentId}`;
/** BullMQ job ids of a request's jobs (a retried enqueue dedups on them). */
export const requestPrefillJobId = (requestId: string): string => `req.${requestId}.prefill`;
export const requestDecodeJobId = (requestId: string): string => `req.${requestId}.decode`;
/** The artifact document a long prompt is encoded into (tenant-scoped like every document). */
export const promptDocumentId = (requestId: string): string => `prompt-${requestId}`;
