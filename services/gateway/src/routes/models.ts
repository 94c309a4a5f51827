/**
 * @module routes/models
 * GET /v1/models (the one served model) and GET /v1/models/:id.
 */
import { Hono } from 'hono';
import { modelNotFound } from '../errors.js';
import type { GatewayDeps } from '../capabilities.js';
import type { TenantVariables } from '../middleware/api-key-auth.js';

/** The capabilities this module takes. */
export type ModelsRouteDeps = Pick<GatewayDeps, 'model'>;

export function modelsRoutes(deps: ModelsRouteDeps): Hono<{ Variables: TenantVariables }> {
  const app = new Hono<{ Variables: TenantVariables }>();
  const model = { id: deps.model.name, object: 'model', created: deps.model.createdS, owned_by: 'csa2' };
  app.get('/models', (c) => c.json({ object: 'list', data: [model] }));
  app.get('/models/:id{.+}', (c) => {
    const id = c.req.param('id');
    if (id !== deps.model.name) throw modelNotFound(id, deps.model.name);
    return c.json(model);
  });
  return app;
}
