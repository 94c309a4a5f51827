/**
 * @module config/model-config
 * The DeepSeek-V4.1 (CSA2) model config: one readonly camelCase type, parsed once at the boundary from
 * the official `ModelArgs` / `inference/config.json` key spelling (snake_case). Nothing outside this file
 * sees a snake_case key.
 *
 * - Missing optional keys take the `ModelArgs` defaults (trunk reference §1.1). Those defaults describe a
 *   small smoke-test model, not the released one; in particular `dtype` defaults to "fp8" and
 *   `expert_dtype` to "fp4", which {@link assertRunnable} refuses.
 * - Aliases: `kv_source_layer_ids`, `index_source_layer_ids`, `candidate_source_layer_id`, and the
 *   HF-style `num_hidden_layers`, `hidden_size`, `num_attention_heads`, `sliding_window`, `rms_norm_eps`.
 *   When both spellings are present they must agree.
 * - `max_seq_len` defaults to 4096 as in `ModelArgs`; `max_position_embeddings` is deliberately NOT
 *   used as a fallback (the released config has neither key; the runtime picks its own limit).
 * - Parsing never refuses a config for turning on an out-of-scope feature (Engram, vision, DSpark/MTP,
 *   fp8/fp4 weights): those fields are kept for inspection, and {@link assertRunnable} refuses them.
 * - Errors are {@link ConfigError}s naming the JSON key (as spelled in the input) and the bad value.
 */
import { readFile } from 'node:fs/promises';
import { ConfigError, UnsupportedFeatureError } from '../errors.js';

export type ScoreFunc = 'softmax' | 'sigmoid' | 'sqrtsoftplus';
export type WeightDtype = 'bf16' | 'fp8';
export type ExpertDtype = 'fp4' | null;

export interface ModelConfig {
  // model
  readonly vocabSize: number;
  readonly dim: number; // hidden size d
  readonly numLayers: number; // backbone blocks (MTP/DSpark stages not included)

  // attention (MQA: one headDim latent per token is both K and V)
  readonly numHeads: number;
  readonly headDim: number;
  readonly ropeHeadDim: number; // RoPE on the last ropeHeadDim dims of each head
  readonly qLoraRank: number;
  readonly oGroups: number; // grouped low-rank output projection
  readonly oLoraRank: number;
  readonly normEps: number; // eps of every RMSNorm, of the mHC mix RMS and of the Engram gate
  readonly windowSize: number; // sliding-window length in tokens

  // CSA2 schedule
  readonly compressRatios: readonly number[]; // one per backbone layer (0 = sliding window only)
  readonly kvSourceLayers: readonly number[]; // ascending; layers that own a compressor (Full mode)
  readonly indexSourceLayers: readonly number[]; // ascending; layers that own an indexer (Full + Reindex)

  // RoPE / YaRN
  readonly ropeTheta: number; // ratio-0 layers, no YaRN
  readonly compressRopeTheta: number; // ratio > 0 layers, with YaRN when originalSeqLen > 0
  readonly originalSeqLen: number; // 0 = YaRN off
  readonly ropeFactor: number;
  readonly betaFast: number;
  readonly betaSlow: number;

  // indexer
  readonly indexNumHeads: number;
  readonly indexHeadDim: number;
  readonly indexTopK: number; // compressed entries selected per query

  // hierarchical sparse indexer (HSI candidates)
  readonly candidateSourceLayer: number; // -1 = off
  readonly candidateTopKBlocks: number;
  readonly candidateBlockSize: number; // compressed positions per candidate block

  // hyper-connections (mHC)
  readonly hcMult: number; // residual streams
  readonly hcSinkhornIters: number;
  readonly hcEps: number;

  // MoE (every backbone layer; the shared expert uses moeInterDim too)
  readonly moeInterDim: number;
  readonly numRoutedExperts: number;
  readonly numSharedExperts: number; // always 1
  readonly numActivatedExperts: number;
  readonly scoreFunc: ScoreFunc;
  readonly gateTemp: number;
  readonly normTopKProb: boolean;
  readonly routeScale: number;
  readonly swigluLimit: number; // 0 = no clamp

  // runtime
  readonly maxSeqLen: number; // tokens; default 4096 (ModelArgs)
  readonly maxBatchSize: number;
  readonly temperature: number;

  // weight storage
  readonly weightDtype: WeightDtype; // `dtype`
  readonly expertDtype: ExpertDtype; // `expert_dtype` (routed experts only)

  // out-of-scope features, kept for inspection (assertRunnable refuses them)
  readonly engramLayerIds: readonly number[];
  readonly visionNumLayers: number;
  readonly numMtpLayers: number;
  readonly dsparkBlockSize: number; // 0 = no DSpark modules are built
}

type JsonObject = Readonly<Record<string, unknown>>;

interface Found {
  readonly key: string;
  readonly value: unknown;
}

function describe(value: unknown): string {
  if (value === undefined) return 'undefined';
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

/** The first of `keys` present in `obj`; when several spellings are present they must agree. */
function lookup(obj: JsonObject, keys: readonly string[]): Found | undefined {
  let found: Found | undefined;
  for (const key of keys) {
    const value = obj[key];
    if (!Object.hasOwn(obj, key) || value === undefined) continue;
    if (found === undefined) found = { key, value };
    else if (describe(found.value) !== describe(value)) {
      throw new ConfigError(key, `conflicts with ${found.key}: ${describe(value)} vs ${describe(found.value)}`);
    }
  }
  return found;
}

function intField(obj: JsonObject, keys: readonly string[], fallback: number, min: number): { key: string; value: number } {
  const found = lookup(obj, keys);
  const key = found?.key ?? (keys[0] as string);
  if (found === undefined) return { key, value: fallback };
  const v = found.value;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) {
    const what = min === 1 ? 'a positive integer' : min === 0 ? 'a non-negative integer' : `an integer >= ${min}`;
    throw new ConfigError(key, `must be ${what}, got ${describe(v)}`);
  }
  return { key, value: v };
}

function numField(obj: JsonObject, keys: readonly string[], fallback: number, positive: boolean): number {
  const found = lookup(obj, keys);
  if (found === undefined) return fallback;
  const v = found.value;
  if (typeof v !== 'number' || !Number.isFinite(v) || (positive ? v <= 0 : v < 0)) {
    throw new ConfigError(found.key, `must be a ${positive ? 'positive' : 'non-negative'} finite number, got ${describe(v)}`);
  }
  return v;
}

function boolField(obj: JsonObject, key: string, fallback: boolean): boolean {
  const found = lookup(obj, [key]);
  if (found === undefined) return fallback;
  if (typeof found.value !== 'boolean') throw new ConfigError(key, `must be true or false, got ${describe(found.value)}`);
  return found.value;
}

function enumField<T extends string | null>(obj: JsonObject, key: string, allowed: readonly T[], fallback: T): T {
  const found = lookup(obj, [key]);
  if (found === undefined) return fallback;
  const v = found.value;
  const match = allowed.find((a) => a === v);
  if (match === undefined) {
    throw new ConfigError(key, `must be one of ${allowed.map((a) => describe(a)).join(', ')}, got ${describe(v)}`);
  }
  return match;
}

function intListField(obj: JsonObject, keys: readonly string[], fallback: readonly number[]): { key: string; value: number[] } {
  const found = lookup(obj, keys);
  const key = found?.key ?? (keys[0] as string);
  if (found === undefined) return { key, value: [...fallback] };
  const v = found.value;
  if (!Array.isArray(v)) throw new ConfigError(key, `must be a list of integers, got ${describe(v)}`);
  const out: number[] = [];
  for (const [i, item] of v.entries()) {
    if (typeof item !== 'number' || !Number.isSafeInteger(item) || item < 0) {
      throw new ConfigError(key, `entry ${i} must be a non-negative integer, got ${describe(item)}`);
    }
    out.push(item);
  }
  return { key, value: out };
}

/** A list of distinct layer ids, each in [0, numLayers); returned ascending. */
function layerListField(obj: JsonObject, keys: readonly string[], fallback: readonly number[], numLayers: number): readonly number[] {
  const { key, value } = intListField(obj, keys, fallback);
  const seen = new Set<number>();
  for (const layer of value) {
    if (layer >= numLayers) throw new ConfigError(key, `layer ${layer} is out of range [0, ${numLayers}), got ${describe(value)}`);
    if (seen.has(layer)) throw new ConfigError(key, `layer ${layer} is listed twice, got ${describe(value)}`);
    seen.add(layer);
  }
  return Object.freeze(value.sort((a, b) => a - b));
}

/**
 * Parses a `ModelArgs`-spelled config object (e.g. `inference/config.json`) into a {@link ModelConfig}.
 * Throws {@link ConfigError} naming the JSON key and the bad value. Does not check the layer schedule
 * beyond ranges (see `buildLayerPlan`) and does not refuse out-of-scope features (see {@link assertRunnable}).
 *
 * @example
 * const config = parseModelConfig(JSON.parse(await readFile('config.json', 'utf8')));
 * assertRunnable(config);
 */
export function parseModelConfig(json: unknown): ModelConfig {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw new ConfigError('(root)', `must be a JSON object, got ${describe(json)}`);
  }
  const obj = json as JsonObject;

  // model
  const vocabSize = intField(obj, ['vocab_size'], 129280, 1).value;
  const dimF = intField(obj, ['dim', 'hidden_size'], 1024, 1);
  const numLayersF = intField(obj, ['n_layers', 'num_hidden_layers'], 5, 1);
  const numLayers = numLayersF.value;

  // attention
  const numHeadsF = intField(obj, ['n_heads', 'num_attention_heads'], 16, 1);
  const headDim = intField(obj, ['head_dim'], 128, 1).value;
  if (headDim % 32 !== 0) throw new ConfigError('head_dim', `must be a multiple of 32 (FP8 window / FP4 blocks), got ${headDim}`);
  const ropeHeadDim = intField(obj, ['rope_head_dim'], 32, 1).value;
  const qLoraRank = intField(obj, ['q_lora_rank'], 256, 1).value;
  const oGroups = intField(obj, ['o_groups'], 8, 1).value;
  if ((numHeadsF.value * headDim) % oGroups !== 0) {
    throw new ConfigError('o_groups', `must divide n_heads * head_dim = ${numHeadsF.value * headDim}, got ${oGroups}`);
  }
  const oLoraRank = intField(obj, ['o_lora_rank'], 256, 1).value;
  const normEps = numField(obj, ['norm_eps', 'rms_norm_eps'], 1e-20, true);
  const windowSize = intField(obj, ['window_size', 'sliding_window'], 128, 1).value;

  // indexer (read before rope_head_dim's cross-check)
  const indexNumHeads = intField(obj, ['index_n_heads'], 16, 1).value;
  const indexHeadDim = intField(obj, ['index_head_dim'], 64, 1).value;
  if (indexHeadDim % 32 !== 0) throw new ConfigError('index_head_dim', `must be a multiple of 32 (FP4 blocks of 32), got ${indexHeadDim}`);
  const indexTopK = intField(obj, ['index_topk'], 64, 1).value;
  if (ropeHeadDim % 2 !== 0 || ropeHeadDim > headDim || ropeHeadDim > indexHeadDim) {
    throw new ConfigError('rope_head_dim', `must be even and <= head_dim (${headDim}) and <= index_head_dim (${indexHeadDim}), got ${ropeHeadDim}`);
  }

  // out-of-scope features (read early: DSpark decides how many compress_ratios entries are needed)
  const numMtpLayers = intField(obj, ['n_mtp_layers'], 1, 0).value;
  const dsparkBlockSize = intField(obj, ['dspark_block_size'], 0, 0).value;
  const visionNumLayers = intField(obj, ['vision_n_layers'], 0, 0).value;
  const engramLayerIds = layerListField(obj, ['engram_layer_ids'], [], numLayers);

  // CSA2 schedule
  const ratiosF = intListField(obj, ['compress_ratios'], [0, 2, 2, 1, 1, 0]);
  const neededRatios = numLayers + (dsparkBlockSize > 0 ? numMtpLayers : 0);
  if (ratiosF.value.length < neededRatios) {
    throw new ConfigError(
      ratiosF.key,
      `needs at least ${neededRatios} entries (n_layers${dsparkBlockSize > 0 ? ' + n_mtp_layers' : ''}), got ${ratiosF.value.length}: ${describe(ratiosF.value)}`,
    );
  }
  const compressRatios = Object.freeze(ratiosF.value.slice(0, numLayers));
  const kvSourceLayers = layerListField(obj, ['kv_source_layers', 'kv_source_layer_ids'], [1, 3], numLayers);
  const indexSourceLayers = layerListField(obj, ['index_source_layers', 'index_source_layer_ids'], [1, 3], numLayers);

  // RoPE / YaRN
  const ropeTheta = numField(obj, ['rope_theta'], 10000, true);
  const compressRopeTheta = numField(obj, ['compress_rope_theta'], 40000, true);
  const originalSeqLen = intField(obj, ['original_seq_len'], 0, 0).value;
  const ropeFactor = numField(obj, ['rope_factor'], 40, true);
  const betaFast = numField(obj, ['beta_fast'], 32, true);
  const betaSlow = numField(obj, ['beta_slow'], 1, true);

  // HSI candidates
  const candF = lookup(obj, ['candidate_source_layer', 'candidate_source_layer_id']);
  let candidateSourceLayer = -1;
  if (candF !== undefined) {
    const v = candF.value;
    if (typeof v !== 'number' || !Number.isSafeInteger(v)) throw new ConfigError(candF.key, `must be an integer (-1 = off), got ${describe(v)}`);
    if (v >= numLayers) throw new ConfigError(candF.key, `layer ${v} is out of range [0, ${numLayers}) (-1 = off)`);
    candidateSourceLayer = v < 0 ? -1 : v;
  }
  const candOn = candidateSourceLayer >= 0 ? 1 : 0;
  const candidateTopKBlocks = intField(obj, ['candidate_topk_blocks'], 0, candOn).value;
  const candidateBlockSize = intField(obj, ['candidate_block_size'], 0, candOn).value;

  // hyper-connections
  const hcMult = intField(obj, ['hc_mult'], 4, 1).value;
  const hcSinkhornIters = intField(obj, ['hc_sinkhorn_iters'], 20, 1).value;
  const hcEps = numField(obj, ['hc_eps'], 1e-6, true);

  // MoE
  const moeInterDim = intField(obj, ['moe_inter_dim'], 1024, 1).value;
  const numRoutedExperts = intField(obj, ['n_routed_experts'], 8, 1).value;
  const numSharedExperts = intField(obj, ['n_shared_experts'], 1, 1).value;
  if (numSharedExperts !== 1) throw new ConfigError('n_shared_experts', `must be 1 (asserted by the reference), got ${numSharedExperts}`);
  const numActivatedExperts = intField(obj, ['n_activated_experts'], 2, 1).value;
  if (numActivatedExperts > numRoutedExperts) {
    throw new ConfigError('n_activated_experts', `must be <= n_routed_experts (${numRoutedExperts}), got ${numActivatedExperts}`);
  }
  const scoreFunc = enumField<ScoreFunc>(obj, 'score_func', ['softmax', 'sigmoid', 'sqrtsoftplus'], 'sqrtsoftplus');
  const gateTemp = numField(obj, ['gate_temp'], 1, true);
  const normTopKProb = boolField(obj, 'norm_topk_prob', true);
  const routeScale = numField(obj, ['route_scale'], 1, true);
  const swigluLimit = numField(obj, ['swiglu_limit'], 0, false);

  // runtime
  const maxSeqLen = intField(obj, ['max_seq_len'], 4096, 1).value;
  const maxBatchSize = intField(obj, ['max_batch_size'], 4, 1).value;
  const temperature = numField(obj, ['temperature'], 1, false);

  // weight storage
  const weightDtype = enumField<WeightDtype>(obj, 'dtype', ['fp8', 'bf16'], 'fp8');
  const expertDtype = enumField<ExpertDtype>(obj, 'expert_dtype', ['fp4', null], 'fp4');
  if ((weightDtype === 'fp8' || expertDtype === 'fp4') && dimF.value % 32 !== 0) {
    throw new ConfigError(dimF.key, `must be a multiple of 32 when weights are fp8/fp4 (activation quant blocks of 32), got ${dimF.value}`);
  }

  return Object.freeze({
    vocabSize,
    dim: dimF.value,
    numLayers,
    numHeads: numHeadsF.value,
    headDim,
    ropeHeadDim,
    qLoraRank,
    oGroups,
    oLoraRank,
    normEps,
    windowSize,
    compressRatios,
    kvSourceLayers,
    indexSourceLayers,
    ropeTheta,
    compressRopeTheta,
    originalSeqLen,
    ropeFactor,
    betaFast,
    betaSlow,
    indexNumHeads,
    indexHeadDim,
    indexTopK,
    candidateSourceLayer,
    candidateTopKBlocks,
    candidateBlockSize,
    hcMult,
    hcSinkhornIters,
    hcEps,
    moeInterDim,
    numRoutedExperts,
    numSharedExperts,
    numActivatedExperts,
    scoreFunc,
    gateTemp,
    normTopKProb,
    routeScale,
    swigluLimit,
    maxSeqLen,
    maxBatchSize,
    temperature,
    weightDtype,
    expertDtype,
    engramLayerIds,
    visionNumLayers,
    numMtpLayers,
    dsparkBlockSize,
  });
}

/** One out-of-scope setting that a config turns on: the JSON key, its value, a value that runs, and why. */
export interface UnsupportedSetting {
  readonly field: string;
  /** The config's own value of `field`. */
  readonly value: unknown;
  /** A value of `field` that runs (what `csa2 init-model --drop-unsupported` writes). */
  readonly runnable: unknown;
  /** The value quoted, then why and what to use: `dtype = "fp8": … ; use "bf16"`. */
  readonly reason: string;
}

function unsupported(field: string, value: unknown, runnable: unknown, why: string): UnsupportedSetting {
  return { field, value, runnable, reason: `${field} = ${JSON.stringify(value)?.replaceAll(',', ', ')}: ${why}; use ${JSON.stringify(runnable)}` };
}

/** Every setting of `config` this implementation cannot run (empty when it is runnable). */
export function unsupportedSettings(config: ModelConfig): UnsupportedSetting[] {
  const out: UnsupportedSetting[] = [];
  if (config.engramLayerIds.length > 0) out.push(unsupported('engram_layer_ids', config.engramLayerIds, [], 'Engram is not supported by csa2-serve'));
  if (config.visionNumLayers > 0) out.push(unsupported('vision_n_layers', config.visionNumLayers, 0, 'the vision tower is not supported by csa2-serve'));
  if (config.dsparkBlockSize > 0 && config.numMtpLayers > 0) {
    out.push(
      unsupported(
        'dspark_block_size',
        config.dsparkBlockSize,
        0,
        `the DSpark/MTP head (with n_mtp_layers = ${config.numMtpLayers}) is not supported by csa2-serve`,
      ),
    );
  }
  if (config.weightDtype !== 'bf16') {
    out.push(unsupported('dtype', config.weightDtype, 'bf16', `${config.weightDtype} weights are not supported; only bf16/fp32 weights are runnable for now`));
  }
  if (config.expertDtype !== null) {
    out.push(
      unsupported('expert_dtype', config.expertDtype, null, `${config.expertDtype} experts are not supported; only bf16/fp32 weights are runnable for now`),
    );
  }
  return out;
}

/**
 * Throws {@link UnsupportedFeatureError} when the config turns on Engram, vision, the DSpark/MTP head, fp8
 * weights or fp4 experts. `feature` is the first offending JSON field; the message names all of them.
 */
export function assertRunnable(config: ModelConfig): void {
  const bad = unsupportedSettings(config);
  const first = bad[0];
  if (first === undefined) return;
  const fields = bad.map((b) => b.field).join(', ');
  throw new UnsupportedFeatureError(
    first.field,
    `config turns on features this implementation does not run (${fields}): ${bad.map((b) => b.reason).join('; ')}`,
  );
}

/**
 * Reads and parses a config.json file. An unreadable file or invalid JSON is a {@link ConfigError} whose
 * field is the file path; field errors name the JSON key and the file.
 */
export async function readModelConfigFile(path: string): Promise<ModelConfig> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (cause) {
    throw new ConfigError(path, `cannot read config file: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (cause) {
    throw new ConfigError(path, `invalid JSON: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
  try {
    return parseModelConfig(json);
  } catch (err) {
    if (err instanceof ConfigError) {
      const prefix = `config: ${err.field}: `;
      const detail = err.message.startsWith(prefix) ? err.message.slice(prefix.length) : err.message;
      throw new ConfigError(err.field, `${detail} (in ${path})`, { cause: err });
    }
    throw err;
  }
}
