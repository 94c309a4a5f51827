/**
 * @module main
 * Process entry: `node services/gateway/dist/main.js`. Reads the environment, starts the gateway,
 * and shuts it down gracefully on SIGTERM / SIGINT (a second signal exits at once).
 */
import { startGateway } from './server.js';

async function main(): Promise<void> {
  let gateway;
  try {
    gateway = await startGateway(process.env);
  } catch (err) {
    process.stderr.write(`gateway: cannot start: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  }
  let stopping = false;
  const stop = (signal: NodeJS.Signals): void => {
    if (stopping) {
      process.stderr.write(`gateway: ${signal} again, exiting now\n`);
      process.exit(1);
    }
    stopping = true;
    gateway.deps.logger.info({ signal }, 'shutting down');
    gateway.close().then(
      () => process.exit(0),
      (err: unknown) => {
        process.stderr.write(`gateway: shutdown failed: ${err instanceof Error ? err.message : String(err)}\n`);
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

await main();
