#!/usr/bin/env node
/**
 * @module main
 * Process entry of the encoder worker: `runWorkerProcess` (@csa2/jobs worker-runtime) with the
 * encoder's config and worker — config from the environment (a bad value exits 2), the worker, and a
 * clean stop on SIGTERM/SIGINT (stop taking jobs, let the running ones finish within
 * CSA2_SHUTDOWN_GRACE_MS, hand the rest back, close the engine). A second signal exits at once; the
 * queue's stalled-job recovery then re-runs whatever was interrupted.
 */
import { runWorkerProcess } from '@csa2/jobs';
import { loadEncoderConfig } from './config.js';
import { startEncoderWorker } from './worker.js';

runWorkerProcess({ name: 'encoder-worker', loadConfig: () => loadEncoderConfig(), start: (config) => startEncoderWorker(config) });
