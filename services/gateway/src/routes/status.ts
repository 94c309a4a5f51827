/**
 * @module routes/status
 * GET / (the status page, HTML) and GET /status.json (the same data). Who sees what:
 *
 * - an operator key (CSA2_OPERATOR_KEYS; one is generated and logged at start when unset): every
 *   tenant, the queues, the workers and this gateway's traffic;
 * - an API key: its tenant's documents and batches only (no queue, worker or traffic figures: those
 *   sum every tenant's work);
 * - no or an unknown key: 401 with `WWW-Authenticate: Basic`, so a browser asks for one.
 *
 * The key comes as `Authorization: Bearer <key>` or as Basic credentials (the key as the password,
 * any user name; or as the user name with an empty password). Keys are compared by SHA-256 digest.
 */
import { createHash } from 'node:crypto';
import { Hono, type Context } from 'hono';
import { ApiError } from '../errors.js';
import type { GatewayDeps } from '../capabilities.js';
import { collectStatus, type StatusDeps, type StatusScope } from '../status/status-data.js';
import { renderLoginPage, renderStatusPage } from '../status/status-page.js';
import { TrafficWindow } from '../status/traffic-window.js';

/** The capabilities this module takes. */
export type StatusRouteDeps = Pick<GatewayDeps, 'apiKeys' | 'metrics' | 'model' | 'operatorKeys'> & StatusDeps;

const digest = (key: string): string => createHash('sha256').update(key, 'utf8').digest('hex');

/** The key in an Authorization header (Bearer, or Basic with the key as password or user), or null. */
export function keyFromAuthorization(header: string | undefined): string | null {
  if (header === undefined) return null;
  const bearer = /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (bearer?.[1] !== undefined) return bearer[1];
  const basic = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header);
  if (basic?.[1] === undefined) return null;
  const decoded = Buffer.from(basic[1], 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  const user = colon < 0 ? decoded : decoded.slice(0, colon);
  const password = colon < 0 ? '' : decoded.slice(colon + 1);
  return password !== '' ? password : user !== '' ? user : null;
}

export function statusRoutes(deps: StatusRouteDeps): Hono {
  const app = new Hono();
  const operators = new Set([...deps.operatorKeys].map(digest));
  const tenants = new Map([...deps.apiKeys].map(([key, tenant]) => [digest(key), tenant]));
  const traffic = new TrafficWindow(deps.metrics, { windowMs: 300_000, sampleMs: 10_000, startedAtMs: deps.model.createdS * 1000 });

  function scopeOf(c: Context): StatusScope | null {
    const key = keyFromAuthorization(c.req.header('authorization'));
    if (key === null) return null;
    const d = digest(key);
    if (operators.has(d)) return { kind: 'operator' };
    const tenant = tenants.get(d);
    return tenant !== undefined ? { kind: 'tenant', tenant } : null;
  }

  const challenge = { 'www-authenticate': 'Basic realm="csa2 status", charset="UTF-8"', 'cache-control': 'no-store' };

  app.get('/', async (c) => {
    const scope = scopeOf(c);
    if (scope === null) return c.html(renderLoginPage(), 401, challenge);
    return c.html(renderStatusPage(await collectStatus(deps, scope, traffic)), 200, { 'cache-control': 'no-store' });
  });

  app.get('/status.json', async (c) => {
    const scope = scopeOf(c);
    if (scope === null)
      throw new ApiError(401, 'An operator key or an API key is needed (Authorization: Bearer <key>)', { code: 'missing_api_key', headers: challenge });
    return c.json(await collectStatus(deps, scope, traffic), 200, { 'cache-control': 'no-store' });
  });

  return app;
}
