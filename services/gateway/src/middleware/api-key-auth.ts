/**
 * @module middleware/api-key-auth
 * `Authorization: Bearer <key>` → the key's tenant in `c.get('tenant')`; a missing or unknown key is
 * a 401 in OpenAI's shape. Keys are compared by SHA-256 digest (a Map lookup on digests, so the
 * lookup time does not depend on how much of a key matched).
 */
import { createHash } from 'node:crypto';
import type { MiddlewareHandler } from 'hono';
import { ApiError } from '../errors.js';
import { keyIdOf } from '../key-limiter.js';

export interface TenantVariables {
  /** The tenant of the request's API key. */
  tenant: string;
  /** The request's API key as a digest (key-limiter keyIdOf): its limits and Redis counters. */
  keyId: string;
}

export interface ApiKeyAuthOptions {
  /** API key → tenant. */
  readonly keys: ReadonlyMap<string, string>;
}

const digest = (key: string): string => createHash('sha256').update(key, 'utf8').digest('hex');

/**
 * @example app.use('/v1/*', apiKeyAuth({ keys: new Map([['sk-…', 'acme']]) }));
 */
export function apiKeyAuth(options: ApiKeyAuthOptions): MiddlewareHandler<{ Variables: TenantVariables }> {
  const tenants = new Map<string, { tenant: string; keyId: string }>();
  for (const [key, tenant] of options.keys) tenants.set(digest(key), { tenant, keyId: keyIdOf(key) });
  const headers = { 'www-authenticate': 'Bearer' };
  return async function apiKeyAuth(c, next) {
    const header = c.req.header('authorization');
    if (header === undefined || header.trim() === '') {
      throw new ApiError(401, "You didn't provide an API key. Provide it in an Authorization header using Bearer auth (Authorization: Bearer YOUR_KEY).", {
        code: 'missing_api_key',
        headers,
      });
    }
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    const found = match?.[1] !== undefined ? tenants.get(digest(match[1])) : undefined;
    if (found === undefined) throw new ApiError(401, 'Incorrect API key provided.', { code: 'invalid_api_key', headers });
    c.set('tenant', found.tenant);
    c.set('keyId', found.keyId);
    await next();
  };
}
