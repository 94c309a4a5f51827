/**
 * @module app
 * `createApp(deps)`: the gateway's Hono app. Everything it talks to comes in `deps`, so tests build
 * it around a private Redis and a temporary store and call `app.request(…)`.
 *
 * | route | auth | statuses |
 * |---|---|---|
 * | GET /healthz | – | 200 |
 * | GET /readyz | – | 200, 503 |
 * | GET /metrics | – | 200 |
 * | GET /openapi.json, GET /docs | – | 200 |
 * | GET / (status page, HTML), GET /status.json | operator key: everything; API key: its tenant | 200, 401 |
 * | POST /v1/completions, POST /v1/chat/completions | Bearer | 200 (JSON or SSE), 400, 401, 404 (document), 409 (document not ready), 413, 429 (queue full, key limits), 500 (document damaged), 503, 504 |
 * | GET /v1/models, GET /v1/models/:id | Bearer | 200, 401, 404 |
 * | POST /v1/documents | Bearer | 202, 400, 401, 413, 429 (queue full, key limits), 503 |
 * | GET /v1/documents (pages), GET /v1/documents/:id | Bearer | 200, 400 (list query), 401, 404, 503 |
 * | DELETE /v1/documents/:id | Bearer | 200, 401, 404, 409 (being encoded), 503 |
 * | POST /v1/files (multipart), GET /v1/files, GET/DELETE /v1/files/:file_id, GET /v1/files/:file_id/content | Bearer | 200, 400, 401, 404, 409 (DELETE: a batch reads it), 413, 429 |
 * | POST /tokenize, POST /detokenize (vLLM's shapes) | Bearer | 200, 400, 401, 404 (document), 409 (document not ready), 413 |
 * | POST /v1/batches, GET /v1/batches, GET /v1/batches/:batch_id, POST /v1/batches/:batch_id/cancel | Bearer | 200, 400, 401, 404, 409 (cancel: ended) |
 *
 * Every error body is OpenAI's `{ error: { message, type, param, code } }`; server-side failures quote
 * the request id in the message and never carry internals (errors.ts). Every response has an
 * `x-request-id` (middleware/request-id). A client that closes the connection before its answer
 * (mid-body, mid-wait) is a client abort: status 499 in csa2_http_requests_total and in the log,
 * counted in csa2_http_client_aborts_total, never a 500. Request bodies share a byte budget while
 * they are read and tokenized (middleware/body-budget).
 */
import { Hono, type MiddlewareHandler } from 'hono';
import { cors } from 'hono/cors';
import { routePath } from 'hono/route';
import { ApiError, toApiError } from './errors.js';
import type { GatewayDeps } from './capabilities.js';
import { apiKeyAuth, type TenantVariables } from './middleware/api-key-auth.js';
import { bodyBudget } from './middleware/body-budget.js';
import { maxBody } from './middleware/json-body.js';
import { requestId, type RequestIdVariables } from './middleware/request-id.js';
import { completionsRoutes } from './routes/completions.js';
import { documentsRoutes } from './routes/documents.js';
import { healthRoutes } from './routes/health.js';
import { modelsRoutes } from './routes/models.js';
import { filesRoutes } from './routes/files.js';
import { batchesRoutes } from './routes/batches.js';
import { tokenizeRoutes } from './routes/tokenize.js';
import { openapiRoutes } from './routes/openapi.js';
import { statusRoutes } from './routes/status.js';

export type GatewayVariables = TenantVariables & RequestIdVariables;
export type GatewayApp = Hono<{ Variables: GatewayVariables }>;

/** nginx's "client closed request": what a request whose client left before its answer counts as. */
export const CLIENT_CLOSED_REQUEST = 499;

const routeOf = (c: Parameters<MiddlewareHandler>[0]): string => {
  const matched = routePath(c, -1);
  return matched.endsWith('*') ? 'unmatched' : matched;
};

/** Counts every request (csa2_http_requests_total; client aborts also in csa2_http_client_aborts_total) and logs it at debug (5xx at warn, by the error handler). */
function requestMetrics(deps: GatewayDeps): MiddlewareHandler {
  return async function requestMetrics(c, next) {
    const startMs = Date.now();
    await next();
    const route = routeOf(c);
    const status = c.res.status;
    deps.metrics.httpRequests.inc({ method: c.req.method, route, status: String(status) });
    if (status === CLIENT_CLOSED_REQUEST) deps.metrics.clientAborts.inc({ route });
    deps.logger.debug({ method: c.req.method, path: c.req.path, status, ms: Date.now() - startMs }, 'request');
  };
}

/**
 * CSA2_CORS_ORIGINS: browsers on these origins may call the API (preflights are answered before
 * authentication; the key still travels in Authorization, never in cookies).
 */
function corsFor(origins: '*' | readonly string[]): MiddlewareHandler {
  return cors({
    origin: origins === '*' ? '*' : [...origins],
    allowMethods: ['GET', 'POST', 'DELETE', 'OPTIONS'],
    allowHeaders: ['authorization', 'content-type', 'x-request-id'],
    exposeHeaders: ['retry-after', 'x-request-id'],
    maxAge: 600,
  });
}

export function createApp(deps: GatewayDeps): GatewayApp {
  const app: GatewayApp = new Hono<{ Variables: GatewayVariables }>();
  app.use('*', requestId());
  app.use('*', requestMetrics(deps));
  if (deps.config.corsOrigins !== null) app.use('*', corsFor(deps.config.corsOrigins));
  app.route('/', healthRoutes(deps));
  app.route('/', openapiRoutes(deps));
  app.route('/', statusRoutes(deps));
  const auth = apiKeyAuth({ keys: deps.apiKeys });
  app.use('/v1/*', auth);
  // a body declared too large is refused (413) before it waits for the body budget; uploads have their
  // own limits (CSA2_MAX_FILE_BYTES, CSA2_UPLOAD_CONCURRENCY) and do not hold the budget
  const bodyLimit = maxBody({ maxBodyBytes: deps.limits.maxBodyBytes });
  const budget = bodyBudget({
    budget: deps.bodyBudget,
    maxBodyBytes: deps.limits.maxBodyBytes,
    ...(deps.smallBodyBudget !== null ? { small: { budget: deps.smallBodyBudget, maxBodyBytes: deps.limits.smallBodyBytes } } : {}),
  });
  const uploadLimit = maxBody({ maxBodyBytes: deps.config.batch.maxFileBytes, variable: 'CSA2_MAX_FILE_BYTES' });
  const isUpload = (c: { req: { method: string; path: string } }) => c.req.method === 'POST' && c.req.path === '/v1/files';
  app.use('/v1/*', (c, next) => (isUpload(c) ? uploadLimit(c, next) : bodyLimit(c, next)));
  app.use('/v1/*', (c, next) => (isUpload(c) ? next() : budget(c, next)));
  app.route('/v1', completionsRoutes(deps));
  app.route('/v1', modelsRoutes(deps));
  app.route('/v1', documentsRoutes(deps));
  app.route('/v1', filesRoutes(deps));
  app.route('/v1', batchesRoutes(deps));
  for (const path of ['/tokenize', '/detokenize']) app.use(path, auth, bodyLimit, budget);
  app.route('/', tokenizeRoutes(deps));
  app.notFound((c) => new ApiError(404, `Unknown request URL: ${c.req.method} ${c.req.path}`, { code: 'unknown_url' }).getResponse(c.get('reqId')));
  app.onError((err, c) => {
    const reqId = c.get('reqId');
    if (c.req.raw.signal.aborted) {
      // the client closed the connection (mid-body, or while we worked): nobody reads this answer
      deps.logger.info(
        { reqId, method: c.req.method, path: c.req.path, status: CLIENT_CLOSED_REQUEST, err: err instanceof Error ? err.message : String(err) },
        'client closed the request',
      );
      return new Response(null, { status: CLIENT_CLOSED_REQUEST });
    }
    const apiError = toApiError(err);
    if (apiError.status >= 500 || apiError.detail !== null) {
      const fields = { reqId, method: c.req.method, path: c.req.path, status: apiError.status, code: apiError.code, err: apiError.detail ?? apiError.message };
      if (apiError.status >= 500) deps.logger.warn(fields, 'request failed');
      else deps.logger.info(fields, 'request refused');
    }
    return apiError.getResponse(reqId);
  });
  return app;
}
