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
 * | POST /v1/completions, POST /v1/chat/completions | Bearer | 200 (JSON or SSE), 400, 401, 404 (document), 409 (document not ready), 413, 429 (queue full, key limits), 500 (document damaged), 503, 504 |
 * | GET /v1/models, GET /v1/models/:id | Bearer | 200, 401, 404 |
 * | POST /v1/documents | Bearer | 202, 400, 401, 413, 429 (queue full, key limits), 503 |
 * | GET /v1/documents/:id | Bearer | 200, 401, 404, 503 |
 * | DELETE /v1/documents/:id | Bearer | 200, 401, 404, 409 (being encoded), 503 |
 *
 * Every error body is OpenAI's `{ error: { message, type, param, code } }`. Request bodies share a
 * byte budget while they are read and tokenized (middleware/body-budget).
 */
import { Hono, type MiddlewareHandler } from 'hono';
import { routePath } from 'hono/route';
import { ApiError, toApiError } from './errors.js';
import type { GatewayDeps } from './deps.js';
import { apiKeyAuth, type TenantVariables } from './middleware/api-key-auth.js';
import { bodyBudget } from './middleware/body-budget.js';
import { maxBody } from './middleware/json-body.js';
import { completionsRoutes } from './routes/completions.js';
import { documentsRoutes } from './routes/documents.js';
import { healthRoutes } from './routes/health.js';
import { modelsRoutes } from './routes/models.js';

export type GatewayApp = Hono<{ Variables: TenantVariables }>;

/** Counts every request (csa2_http_requests_total) and logs it at debug (5xx at warn, by the error handler). */
function requestMetrics(deps: GatewayDeps): MiddlewareHandler {
  return async function requestMetrics(c, next) {
    const startMs = Date.now();
    await next();
    const matched = routePath(c, -1);
    const route = matched.endsWith('*') ? 'unmatched' : matched;
    deps.metrics.httpRequests.inc({ method: c.req.method, route, status: String(c.res.status) });
    deps.logger.debug({ method: c.req.method, path: c.req.path, status: c.res.status, ms: Date.now() - startMs }, 'request');
  };
}

export function createApp(deps: GatewayDeps): GatewayApp {
  const app: GatewayApp = new Hono<{ Variables: TenantVariables }>();
  app.use('*', requestMetrics(deps));
  app.route('/', healthRoutes(deps));
  app.use('/v1/*', apiKeyAuth({ keys: deps.apiKeys }));
  // a body declared too large is refused (413) before it waits for the body budget
  app.use('/v1/*', maxBody({ maxBodyBytes: deps.limits.maxBodyBytes }));
  app.use('/v1/*', bodyBudget({ budget: deps.bodyBudget, maxBodyBytes: deps.limits.maxBodyBytes }));
  app.route('/v1', completionsRoutes(deps));
  app.route('/v1', modelsRoutes(deps));
  app.route('/v1', documentsRoutes(deps));
  app.notFound((c) => new ApiError(404, `Unknown request URL: ${c.req.method} ${c.req.path}`, { code: 'unknown_url' }).getResponse());
  app.onError((err, c) => {
    const apiError = toApiError(err);
    if (apiError.status >= 500) {
      deps.logger.warn({ method: c.req.method, path: c.req.path, status: apiError.status, err: err instanceof Error ? err.message : String(err), code: apiError.code }, 'request failed');
    }
    return apiError.getResponse();
  });
  return app;
}
