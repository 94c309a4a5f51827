/**
 * @module middleware/request-id
 * `x-request-id`: the client's value when it is valid (REQ_ID_PATTERN of @csa2/jobs: at most 128
 * characters from A-Z a-z 0-9 . _ : = + / -), else a new `req_<32 hex>`, in `c.get('reqId')`, echoed
 * on every response (errors included), written into the jobs the request makes (`reqId`), and bound
 * to the log context (`withLogFields`), so every line the gateway and the workers log for the
 * request names it. An invalid value is refused with 400 `invalid_request_id` (the answer carries a
 * fresh id). Runs first, before authentication.
 */
import { randomBytes } from 'node:crypto';
import type { MiddlewareHandler } from 'hono';
import { REQ_ID_PATTERN, REQ_ID_RULE, withLogFields } from '@csa2/jobs';
import { invalidRequest } from '../errors.js';

export const REQUEST_ID_HEADER = 'x-request-id';

export interface RequestIdVariables {
  /** The request's x-request-id (the client's, or generated). */
  reqId: string;
}

/** A fresh request id: `req_` + 32 hex digits. */
export function newReqId(): string {
  return `req_${randomBytes(16).toString('hex')}`;
}

/**
 * @example app.use('*', requestId());
 */
export function requestId(): MiddlewareHandler<{ Variables: RequestIdVariables }> {
  return async function requestId(c, next) {
    const given = c.req.header(REQUEST_ID_HEADER);
    const valid = given !== undefined && REQ_ID_PATTERN.test(given);
    const id = valid ? given : newReqId();
    c.set('reqId', id);
    c.header(REQUEST_ID_HEADER, id);
    return withLogFields({ reqId: id }, async () => {
      if (given !== undefined && given !== '' && !valid) {
        const res = invalidRequest(
          `Invalid '${REQUEST_ID_HEADER}' header: it must be ${REQ_ID_RULE} (got ${given.length} characters). Request id: ${id}`,
          null,
          'invalid_request_id',
        ).getResponse();
        res.headers.set(REQUEST_ID_HEADER, id);
        return res;
      }
      await next();
      c.header(REQUEST_ID_HEADER, id);
      return undefined;
    });
  };
}
