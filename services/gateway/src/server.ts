/**
 * @module server
 * `startGateway(env)`: config from the environment, dependencies, the app on a listening HTTP
 * server. `close()` shuts down gracefully: no new connections, new completions get 503, the
 * requests in flight get CSA2_SHUTDOWN_GRACE_MS to finish, the rest are cancelled (cancel keys
 * set), then connections, queues, Redis and the store are closed.
 */
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { serve } from '@hono/node-server';
import type { Logger } from 'pino';
import type { ObjectStore } from '@csa2/artifacts';
import type { Env } from '@csa2/jobs';
import { createApp, type GatewayApp } from './app.js';
import { loadGatewayConfig } from './config.js';
import type { GatewayDeps } from './capabilities.js';
import { connectGatewayDeps } from './composition-root.js';
import { startBatchDrivers, type BatchDrivers } from './batch/batch-worker.js';
import { startPromptArtifactSweeper } from './prompt-artifacts.js';

/** After the requests in flight ended, how long their connections get to flush before they are cut. */
const CLOSE_FLUSH_MS = 1000;

export interface RunningGateway {
  /** http://host:port */
  readonly url: string;
  readonly port: number;
  /** The generated key when CSA2_API_KEYS is unset, else the first configured key. */
  readonly apiKey: string;
  readonly app: GatewayApp;
  readonly deps: GatewayDeps;
  /** Graceful shutdown (see the module comment); idempotent. */
  close(): Promise<void>;
}

export interface StartOptions {
  readonly logger?: Logger;
  /** An object store to use instead of opening CSA2_STORE_URL. */
  readonly store?: ObjectStore;
}

/**
 * @example
 * const gw = await startGateway({ ...process.env, PORT: '0' });
 * console.log(gw.url, gw.apiKey);
 * await gw.close();
 */
export async function startGateway(env: Env = process.env, options: StartOptions = {}): Promise<RunningGateway> {
  const config = loadGatewayConfig(env);
  const connected = await connectGatewayDeps(config, { ...options, defaultMetrics: true });
  const { deps } = connected;
  const app = createApp(deps);
  let server: Server;
  try {
    server = await new Promise<Server>((resolve, reject) => {
      const s = serve({ fetch: app.fetch, port: config.port, hostname: config.host }) as Server;
      s.once('error', reject);
      s.once('listening', () => {
        s.off('error', reject);
        resolve(s);
      });
    });
  } catch (err) {
    await connected.close();
    throw err;
  }
  let drivers: BatchDrivers;
  try {
    drivers = await startBatchDrivers(deps);
  } catch (err) {
    server.close();
    await connected.close();
    throw err;
  }
  const port = (server.address() as AddressInfo).port;
  const host = config.host.includes(':') ? `[${config.host}]` : config.host;
  const url = `http://${host === '0.0.0.0' || host === '[::]' ? '127.0.0.1' : host}:${port}`;
  const apiKey = connected.generatedApiKey ?? [...deps.apiKeys.keys()][0] ?? '';
  if (connected.generatedOperatorKey !== null) {
    deps.logger.info(
      { operatorKey: connected.generatedOperatorKey, statusPage: `${url}/` },
      'CSA2_OPERATOR_KEYS is unset: generated an operator key (status page) for this run',
    );
  }
  if (connected.generatedApiKey !== null) {
    deps.logger.info(
      { apiKey: connected.generatedApiKey, tenant: deps.apiKeys.get(connected.generatedApiKey) },
      'CSA2_API_KEYS is unset: generated an API key for this run',
    );
  }
  deps.logger.info({ url, model: deps.model.name, tenants: new Set(deps.apiKeys.values()).size }, 'gateway listening');
  const stopSweeper = startPromptArtifactSweeper(deps, config.promptArtifactTtlMs);

  let closing: Promise<void> | null = null;
  return {
    url,
    port,
    apiKey,
    app,
    deps,
    close() {
      closing ??= (async () => {
        stopSweeper();
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        // running batches go back to their queue at once (their lines keep running on the workers)
        await drivers.close();
        await deps.inflight.drain(config.shutdownGraceMs);
        // Responses just ended (error events of cancelled streams) get a moment to flush.
        server.closeIdleConnections();
        const flushed = await Promise.race([closed.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), CLOSE_FLUSH_MS).unref())]);
        if (!flushed) {
          server.closeAllConnections();
          await closed;
        }
        await connected.close();
        deps.logger.info('gateway stopped');
      })();
      return closing;
    },
  };
}
