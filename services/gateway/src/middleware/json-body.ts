/**
 * @module middleware/json-body
 * Request bodies: a size limit (413 past CSA2_MAX_BODY_BYTES, checked on Content-Length and while
 * reading) and JSON parsing with OpenAI's 400 for a body that is not JSON.
 */
import type { Context, MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { ApiError, invalidRequest } from '../errors.js';

/** 413 in OpenAI's shape for bodies over `maxBodyBytes` (`variable`: the setting named in the message, @defaultValue 'CSA2_MAX_BODY_BYTES'). */
export function maxBody(options: { readonly maxBodyBytes: number; readonly variable?: string }): MiddlewareHandler {
  const variable = options.variable ?? 'CSA2_MAX_BODY_BYTES';
  return bodyLimit({
    maxSize: options.maxBodyBytes,
    onError: () => {
      throw new ApiError(413, `The request body is too large: the limit is ${options.maxBodyBytes} bytes (${variable})`, { code: 'request_too_large' });
    },
  });
}

/** The body parsed as JSON (unknown: routes parse it with their schema). */
export async function readJson(c: Context): Promise<unknown> {
  const text = await c.req.text();
  if (text.trim() === '') throw invalidRequest('The request body is empty; send a JSON object.', null, 'invalid_json');
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    throw invalidRequest(
      `We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload.) ${err instanceof Error ? err.message : ''}`.trim(),
      null,
      'invalid_json',
    );
  }
}
