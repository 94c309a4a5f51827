/**
 * @module routes/openapi
 * GET /openapi.json (the OpenAPI 3.1 document, openapi/spec.ts) and GET /docs (the reference page
 * rendered from it, openapi/docs-page.ts). Both are public, built once per app and cached.
 */
import { readFileSync } from 'node:fs';
import { Hono } from 'hono';
import type { GatewayDeps } from '../capabilities.js';
import { renderDocsPage } from '../openapi/docs-page.js';
import { buildOpenApiSpec } from '../openapi/spec.js';

/** The capabilities this module takes. */
export type OpenApiRouteDeps = Pick<GatewayDeps, 'model'>;

function packageVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: unknown };
    return typeof pkg.version === 'string' ? pkg.version : '0.0.0';
  } catch {
    return '0.0.0';
  }
}

export function openapiRoutes(deps: OpenApiRouteDeps): Hono {
  const app = new Hono();
  let spec: Record<string, unknown> | null = null;
  let page: string | null = null;
  const getSpec = (): Record<string, unknown> => (spec ??= buildOpenApiSpec({ modelName: deps.model.name, version: packageVersion() }));
  app.get('/openapi.json', (c) => c.json(getSpec()));
  app.get('/docs', (c) => c.html((page ??= renderDocsPage(getSpec()))));
  return app;
}
