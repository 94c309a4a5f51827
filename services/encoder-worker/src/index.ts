/**
 * @module @csa2/encoder-worker
 * The encoder worker: prefill jobs (documents, long prompts) → artifacts in the object store.
 */
export { loadEncoderConfig, type EncoderConfig } from './config.js';
export { createEncodeProcessor, type EncodeDeps, type EncodeEngine, type EncodeProcessor } from './processor.js';
export { startEncoderWorker, encoderEngineOptions, type EncoderWorker, type EncoderWorkerOptions } from './worker.js';
