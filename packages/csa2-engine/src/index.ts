/**
 * @module @csa2/engine
 * The model, its tokenizer and its artifacts as one engine, in-thread (Engine) or in a worker thread
 * (EngineHost, what services use).
 */
export type {
  EngineOptions,
  GenerateRequest,
  GenerateOutcome,
  GenerateHooks,
  TokenEvent,
  FinishReason,
  ModelInfo,
  SerializedError,
  DocumentRef,
  IngestRequest,
  IngestOutcome,
  IngestProgress,
  IngestHooks,
} from './engine.js';
export { Engine, StopMatcher, serializeError } from './engine.js';
export { EngineHost, EngineError } from './host/engine-host.js';
export { main as cliMain } from './cli/main.js';
