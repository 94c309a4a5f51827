/**
 * @module @csa2/decoder-worker
 * The decoder worker: decode jobs → tokens in the request's Redis Stream.
 */
export { loadDecoderConfig, type DecoderConfig } from './config.js';
export { createDecodeProcessor, type DecodeDeps, type DecodeEngine, type DecodeProcessor } from './processor.js';
export { startDecoderWorker, decoderEngineOptions, type DecoderWorker, type DecoderWorkerOptions } from './worker.js';
