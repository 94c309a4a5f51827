/**
 * @module schemas/parse
 * `parseRequest`: a body (or a query) checked against one of the request schemas of this folder;
 * the first zod issue becomes a 400 naming its parameter in a sentence (schemas/issues.ts).
 */
import type { z } from 'zod';
import { invalidRequest } from '../errors.js';
import { clientIssue } from './issues.js';

/** Parses `body` with `schema`; the first issue becomes a 400 naming its parameter in a sentence (schemas/issues). */
export function parseRequest<T>(schema: z.ZodType<T>, body: unknown): T {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw invalidRequest('The request body must be a JSON object.', null, 'invalid_json');
  const r = schema.safeParse(body);
  if (r.success) return r.data;
  const issue = r.error.issues[0];
  if (issue === undefined) throw invalidRequest('The request body is not valid.', null, 'invalid_value');
  const { param, message, code } = clientIssue(issue, body);
  throw invalidRequest(message, param, code);
}
