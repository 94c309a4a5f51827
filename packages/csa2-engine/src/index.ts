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
  ChoiceOutcome,
  PromptTokenLogprob,
  FinishReason,
  ModelInfo,
  DocumentRef,
  IngestRequest,
  IngestOutcome,
  IngestProgress,
  IngestHooks,
  EngineStats,
  Histogram,
} from './types.js';
export type { SerializedError } from './engine.js';
export { Engine, serializeError, CUDA_MODEL_OPTIONS, CUDA_SCHEDULER_DEFAULTS } from './engine.js';
export { StopMatcher } from './stop-matcher.js';
export { FlowControl } from './flow-control.js';
export type { SchedulerPolicy } from './scheduler/scheduler-policy.js';
export { DEFAULT_SCHEDULER_POLICY, resolvePolicy } from './scheduler/scheduler-policy.js';
export { EngineHost, EngineError } from './host/engine-host.js';
export { main as cliMain } from './cli/main.js';
