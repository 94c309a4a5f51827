/**
 * @module worker-http
 * The small HTTP server every engine worker runs on CSA2_HOST:CSA2_WORKER_HTTP_PORT, for the
 * orchestrator and the scraper (no API key: bind it to a private interface):
 *
 * | route | answer |
 * |---|---|
 * | GET /healthz | 200 `{"status":"ok"}` — liveness: the event loop answers (inference runs in the engine thread) |
 * | GET /readyz | 200 `{"status":"ready","checks":{…}}` or 503 `{"status":"unavailable","checks":{…}}` — readiness: the engine is loaded (not starting or restarting), Redis answers a PING within the timeout, the worker is taking jobs (not closing) |
 * | GET /metrics | 200, Prometheus text of the worker's registry (worker-metrics) |
 * | anything else | 404 / 405 |
 *
 * It starts before the engine loads, so liveness answers during a long model load while readiness
 * says `engine: starting`.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';

/** One readiness check: 'ok', or why not. */
export type ReadinessChecks = Readonly<Record<string, string>>;

export interface WorkerHttpOptions {
  /** Interface to listen on. */
  readonly host: string;
  /** 0 = any free port. */
  readonly port: number;
  readonly registry: Registry;
  /** The readiness checks; ready when every one is 'ok'. */
  readonly readiness: () => Promise<ReadinessChecks>;
}

export interface WorkerHttpServer {
  readonly port: number;
  /** http://host:port (127.0.0.1 when listening on every interface). */
  readonly url: string;
  close(): Promise<void>;
}

/** Listening failed (port taken, no permission): names the address and the variable to change. */
export class WorkerHttpListenError extends Error {
  readonly code = 'config-invalid';
  constructor(host: string, port: number, cause: unknown) {
    super(
      `cannot serve /healthz, /readyz and /metrics on ${host}:${port} (${cause instanceof Error ? cause.message : String(cause)}); set CSA2_WORKER_HTTP_PORT to a free port (0 = any)`,
      { cause },
    );
    this.name = 'WorkerHttpListenError';
  }
}

function send(res: ServerResponse, status: number, body: string, contentType = 'application/json; charset=utf-8'): void {
  res.writeHead(status, { 'content-type': contentType, 'cache-control': 'no-store' });
  res.end(body);
}

/** Starts the server; rejects with WorkerHttpListenError when it cannot listen. */
export async function startWorkerHttp(options: WorkerHttpOptions): Promise<WorkerHttpServer> {
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD')
      return send(res, 405, JSON.stringify({ error: `${req.method ?? '?'} is not allowed; these routes answer GET` }));
    switch (path) {
      case '/healthz':
        return send(res, 200, JSON.stringify({ status: 'ok' }));
      case '/readyz': {
        const checks = await options.readiness();
        const ready = Object.values(checks).every((v) => v === 'ok');
        return send(res, ready ? 200 : 503, JSON.stringify({ status: ready ? 'ready' : 'unavailable', checks }));
      }
      case '/metrics':
        return send(res, 200, await options.registry.metrics(), options.registry.contentType);
      default:
        return send(res, 404, JSON.stringify({ error: `no route ${path ?? ''}; try /healthz, /readyz or /metrics` }));
    }
  };
  const server: Server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) send(res, 500, JSON.stringify({ error: err instanceof Error ? err.message : String(err) }));
      else res.destroy();
    });
  });
  server.keepAliveTimeout = 5000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err) => reject(new WorkerHttpListenError(options.host, options.port, err)));
    server.listen(options.port, options.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const host = options.host === '0.0.0.0' || options.host === '::' ? '127.0.0.1' : options.host.includes(':') ? `[${options.host}]` : options.host;
  return {
    port,
    url: `http://${host}:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
