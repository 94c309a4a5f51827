#!/usr/bin/env node
/**
 * @module main
 * Process entry of the encoder worker: config from the environment, the worker, and a clean stop on
 * SIGTERM/SIGINT (stop taking jobs, let the running ones finish within CSA2_SHUTDOWN_GRACE_MS, hand
 * the rest back, close the engine). A second signal exits at once; the queue's stalled-job recovery
 * then re-runs whatever was interrupted.
 */
import { EnvConfigError } from '@csa2/jobs';
import { loadEncoderConfig } from './config.js';
import { startEncoderWorker } from './worker.js';

async function main(): Promise<number> {
  let config;
  try {
    config = loadEncoderConfig();
  } catch (err) {
    if (err instanceof EnvConfigError) {
      process.stderr.write(`encoder-worker: bad configuration: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  const worker = await startEncoderWorker(config);
  await new Promise<void>((resolve) => {
    const onSignal = (sig: NodeJS.Signals) => {
      process.stderr.write(`encoder-worker: ${sig}: shutting down\n`);
      process.once(sig, () => process.exit(130));
      resolve();
    };
    process.once('SIGTERM', onSignal);
    process.once('SIGINT', onSignal);
  });
  await worker.close();
  return 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`encoder-worker: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
