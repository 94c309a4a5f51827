/**
 * @module routes/health
 * GET /healthz (the process answers), GET /readyz (Redis PING and the object store's ping, each
 * bounded by CSA2_READY_TIMEOUT_MS: 200 when both answer, else 503 naming what failed), GET
 * /metrics (Prometheus text: the gateway's metrics plus the queues' backlog rendered by @csa2/jobs
 * backlog.ts, which the autoscaler reads). None of them needs an API key.
 */
import { Hono } from 'hono';
import { renderBacklogMetrics } from '@csa2/jobs';
import { withTimeout } from '../errors.js';
import type { GatewayDeps } from '../capabilities.js';

/** The capabilities this module takes. */
export type HealthRouteDeps = Pick<GatewayDeps, 'backlog' | 'config' | 'inflight' | 'metrics' | 'redis' | 'store'>;

async function probe(what: string, check: () => Promise<unknown>, timeoutMs: number): Promise<string> {
  try {
    await withTimeout(check(), timeoutMs, () => new Error(`no answer within ${timeoutMs} ms`));
    return 'ok';
  } catch (err) {
    return `${what} unavailable: ${err instanceof Error ? err.message : String(err)}`;
  }
}

export function healthRoutes(deps: HealthRouteDeps): Hono {
  const app = new Hono();
  app.get('/healthz', (c) => c.json({ status: 'ok' }));
  app.get('/readyz', async (c) => {
    const timeoutMs = deps.config.readyTimeoutMs;
    const [redis, store] = await Promise.all([probe('redis', () => deps.redis.ping(), timeoutMs), probe('store', () => deps.store.ping(), timeoutMs)]);
    const ready = redis === 'ok' && store === 'ok' && deps.inflight.isAccepting;
    const checks = { redis, store, ...(deps.inflight.isAccepting ? {} : { gateway: 'shutting down' }) };
    return c.json({ status: ready ? 'ready' : 'unavailable', checks }, ready ? 200 : 503);
  });
  app.get('/metrics', async (c) => {
    const timeoutMs = deps.config.readyTimeoutMs;
    const [own, backlog] = await Promise.all([
      deps.metrics.registry.metrics(),
      // The autoscaling backlog (@csa2/jobs backlog.ts); absent from a scrape while Redis is down.
      withTimeout(deps.backlog.collect(), timeoutMs, () => new Error('backlog timed out')).then(renderBacklogMetrics, () => ''),
    ]);
    const body = backlog === '' ? own : `${own.endsWith('\n') ? own : `${own}\n`}${backlog}`;
    return c.body(body, 200, { 'content-type': deps.metrics.registry.contentType });
  });
  return app;
}
