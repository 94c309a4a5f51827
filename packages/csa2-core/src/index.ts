/**
 * @module @csa2/core
 * The public surface of csa2-core: the DeepSeek-V4.1 (CSA2) model, its config, weights, numerics,
 * tokenizers and the generation loop. Services import from here only; test helpers (fixtures, seeded
 * checkpoints, synthetic caches) are in `@csa2/core/testing`.
 */
export * from './errors.js';
export type { ModelConfig, ScoreFunc, WeightDtype, ExpertDtype, UnsupportedSetting } from './config/model-config.js';
export { parseModelConfig, assertRunnable, readModelConfigFile, unsupportedSettings } from './config/model-config.js';
export type { LayerMode, LayerPlanEntry, LayerPlan } from './config/layer-plan.js';
export { buildLayerPlan, encoderContinuationTokens } from './config/layer-plan.js';
export {
  mainKvRowBytes,
  indexKRowBytes,
  windowKvRowBytes,
  globalCacheBytesPerToken,
  globalCacheBytes,
  windowCacheBytes,
} from './config/cache-layout.js';
export type { SafetensorsFile, SafetensorsDtype, TensorInfo, TensorSpec } from './weights/safetensors.js';
export { openSafetensors, writeSafetensors, SafetensorsWriter } from './weights/safetensors.js';
export type { Checkpoint, CheckpointTensor } from './weights/checkpoint.js';
export { loadCheckpoint, expectedTensors } from './weights/checkpoint.js';
export type { InitModelOptions, InitModelPlan, InitModelProgress, InitModelResult } from './weights/init-model.js';
export { initModel, parameterCount, planInitModel, SeededRandom, INIT_MODEL_FORCED_SETTINGS } from './weights/init-model.js';
export * from './numerics/bf16.js';
export * from './numerics/formats.js';
export * from './tokenizer/index.js';
export type { RuntimeOptions, ExecutionProvider } from './runtime/ort-session.js';
export { ortProfileFiles, summarizeOrtProfiles, type OrtOpTime, type OrtProfileSummary } from './runtime/ort-profile.js';
export {
  DEFAULT_RUNTIME_OPTIONS,
  DECODE_ATTENTION_ARENA_ROWS,
  resolveIntraOpThreads,
  SINGLE_THREAD_BELOW_DIM,
  applyCudaEnvironment,
  checkCudaProviderInstalled,
  graphIoBytes,
  cudaCpuFallbackGraphs,
  ortBindingDir,
  CUDA_PROVIDER_LIBRARIES,
} from './runtime/ort-session.js';
export type { GraphSession, HostTensor, TensorOf, TensorType } from './runtime/ort-session.js';
export { openGraphSession, f32 } from './runtime/ort-session.js';
export type { ElemType, Dim } from './onnx/graph-builder.js';
export { GraphBuilder } from './onnx/graph-builder.js';
export type { NumericsMode } from './model/graphs/graph-ops.js';
export type { ModelOptions, ScanThreadsState } from './model/model.js';
export { Csa2Model, DEFAULT_MODEL_OPTIONS, DEFAULT_REPLAY_TOKENS, encoderLayoutName } from './model/model.js';
export type {
  Span,
  SpanLayout,
  SpanOutput,
  SourceSelections,
  StreamRows,
  ForwardObserver,
  LayerTimer,
  BlockStep,
  ProgressCallback,
} from './model/sequence/span.js';
export { knownSourceStats } from './model/indexer/indexer.js';
export { threadScanStats } from './model/indexer/indexer-scan.js';
export { MAX_AUTO_SCAN_THREADS, MAX_SCAN_THREADS, THREAD_MIN_SCORES, resolveScanThreads } from './model/indexer/scan-threads.js';
export { Sequence, KvSourceCache, WindowRing } from './model/sequence/sequence.js';
export type { SequenceShape } from './model/sequence/sequence.js';
export { PackedRowStore } from './model/sequence/packed-rows.js';
export { RowArena, MIN_REGION_BYTES, type RowArenaStats } from './model/sequence/row-arena.js';
export { TokenBuffer } from './model/sequence/token-buffer.js';
export type { SamplingParams } from './model/generation/sampler.js';
export {
  Sampler,
  TokenHistory,
  adjustLogits,
  argmax,
  klDivergence,
  sampleToken,
  uniformAt,
  validateSampling,
  GREEDY_TEMPERATURE,
  LOGIT_BIAS_LIMIT,
  PENALTY_LIMIT,
} from './model/generation/sampler.js';
export { loadModel } from './model/load-model.js';
export type { TokenLogprob, TokenLogprobs } from './model/generation/logprobs.js';
export { tokenLogprobs } from './model/generation/logprobs.js';
export { modelFingerprint } from './weights/fingerprint.js';
export { seededUniform } from './weights/init-model.js';
