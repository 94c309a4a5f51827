/**
 * @module weights/checkpoint
 * The tensors of the text-only DeepSeek-V4.1 trunk under their official `state_dict` names (trunk
 * reference §5.1), and a loader for a checkpoint directory:
 *
 * ```
 * dir/config.json                     ModelArgs keys (parseModelConfig + assertRunnable + buildLayerPlan)
 * dir/model.safetensors               one file, or
 * dir/model.safetensors.index.json    { "weight_map": { name: "model-00001-of-00002.safetensors", ... } }
 * ```
 *
 * Only bf16 weights (`dtype` "bf16", `expert_dtype` null) are described: no `.scale` tensors, no Engram,
 * vision or MTP tensors. Every tensor may be stored as BF16, F16 or F32 and is widened exactly to
 * float32 when read.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { isAbsolute, join, normalize } from 'node:path';
import { CheckpointError } from '../errors.js';
import { buildLayerPlan } from '../config/layer-plan.js';
import type { LayerPlan } from '../config/layer-plan.js';
import { assertRunnable, readModelConfigFile } from '../config/model-config.js';
import type { ModelConfig } from '../config/model-config.js';
import { openSafetensors } from './safetensors.js';
import type { SafetensorsDtype, SafetensorsFile, TensorInfo } from './safetensors.js';

export interface ExpectedTensor {
  readonly shape: readonly number[];
  /** Allowed storage dtypes; the first is the one the reference checkpoint uses. */
  readonly dtypes: readonly SafetensorsDtype[];
}

/** Stored as F32 in the reference checkpoint (fp32 parameters): hc_*, attn_sink, gate.bias. */
const F32_FIRST: readonly SafetensorsDtype[] = Object.freeze(['F32', 'BF16', 'F16']);
/** Stored as BF16 in the reference checkpoint (head and compressor weights included). */
const BF16_FIRST: readonly SafetensorsDtype[] = Object.freeze(['BF16', 'F32', 'F16']);

/**
 * Every tensor of the text-only trunk, in a fixed order (global embed, then each layer, then the final
 * norm and head), with its shape and allowed dtypes.
 */
export function expectedTensors(config: ModelConfig, plan: LayerPlan): Map<string, ExpectedTensor> {
  const out = new Map<string, ExpectedTensor>();
  const add = (name: string, shape: number[], dtypes: readonly SafetensorsDtype[] = BF16_FIRST): void => {
    out.set(name, Object.freeze({ shape: Object.freeze(shape), dtypes }));
  };
  const d = config.dim;
  const n = config.hcMult;
  const mixes = (2 + n) * n;
  const hd = config.numHeads * config.headDim;
  const inter = config.moeInterDim;
  add('embed.weight', [config.vocabSize, d]);
  for (const e of plan.entries) {
    const p = `layers.${e.layer}.`;
    add(`${p}hc_attn_fn`, [mixes, n * d], F32_FIRST);
    add(`${p}hc_ffn_fn`, [mixes, n * d], F32_FIRST);
    add(`${p}hc_attn_base`, [mixes], F32_FIRST);
    add(`${p}hc_ffn_base`, [mixes], F32_FIRST);
    add(`${p}hc_attn_scale`, [3], F32_FIRST);
    add(`${p}hc_ffn_scale`, [3], F32_FIRST);
    add(`${p}attn_norm.weight`, [d]);
    add(`${p}ffn_norm.weight`, [d]);
    add(`${p}attn.attn_sink`, [config.numHeads], F32_FIRST);
    add(`${p}attn.wq_a.weight`, [config.qLoraRank, d]);
    add(`${p}attn.q_norm.weight`, [config.qLoraRank]);
    add(`${p}attn.wq_b.weight`, [hd, config.qLoraRank]);
    add(`${p}attn.wkv.weight`, [config.headDim, d]);
    add(`${p}attn.kv_norm.weight`, [config.headDim]);
    add(`${p}attn.wo_a.weight`, [config.oGroups * config.oLoraRank, hd / config.oGroups]);
    add(`${p}attn.wo_b.weight`, [d, config.oGroups * config.oLoraRank]);
    if (e.isKvSource) {
      add(`${p}attn.compressor.wkv.weight`, [config.headDim, d]);
      if (e.compressRatio > 1) add(`${p}attn.compressor.wgate.weight`, [config.headDim, d]);
      add(`${p}attn.compressor.norm.weight`, [config.headDim]);
    }
    if (e.isIndexSource) {
      add(`${p}attn.indexer.wq_b.weight`, [config.indexNumHeads * config.indexHeadDim, config.qLoraRank]);
      add(`${p}attn.indexer.weights_proj.weight`, [config.indexNumHeads, d]);
      if (e.ownsIndexK) {
        add(`${p}attn.indexer.wk.weight`, [config.indexHeadDim, config.headDim]);
        add(`${p}attn.indexer.k_norm.weight`, [config.indexHeadDim]);
      }
    }
    add(`${p}ffn.gate.weight`, [config.numRoutedExperts, d]);
    add(`${p}ffn.gate.bias`, [config.numRoutedExperts], F32_FIRST);
    for (let x = 0; x < config.numRoutedExperts; x++) {
      add(`${p}ffn.experts.${x}.w1.weight`, [inter, d]);
      add(`${p}ffn.experts.${x}.w2.weight`, [d, inter]);
      add(`${p}ffn.experts.${x}.w3.weight`, [inter, d]);
    }
    add(`${p}ffn.shared_experts.w1.weight`, [inter, d]);
    add(`${p}ffn.shared_experts.w2.weight`, [d, inter]);
    add(`${p}ffn.shared_experts.w3.weight`, [inter, d]);
  }
  add('norm.weight', [d]);
  add('head.weight', [config.vocabSize, d]);
  return out;
}

export interface CheckpointTensor {
  readonly shape: readonly number[];
  readonly data: Float32Array;
}

export interface Checkpoint {
  readonly dir: string;
  readonly config: ModelConfig;
  readonly plan: LayerPlan;
  /** Tensors present in the files but not part of the text-only trunk (e.g. mtp.*, engram.*); not an error. */
  readonly unexpected: readonly string[];
  /** Whether a tensor of that name is present. */
  has(name: string): boolean;
  /**
   * Reads one tensor from disk and widens it exactly to float32 (each call reads again: keep the
   * result). CheckpointError when absent or not a float dtype.
   */
  tensor(name: string): CheckpointTensor;
  /** Closes the underlying files; later `tensor` calls fail. */
  close(): void;
}

const SINGLE_FILE = 'model.safetensors';
const INDEX_FILE = 'model.safetensors.index.json';

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

function fmtShape(s: readonly number[]): string {
  return `[${s.join(', ')}]`;
}

async function readWeightMap(dir: string): Promise<Map<string, string>> {
  const path = join(dir, INDEX_FILE);
  let json: unknown;
  try {
    json = JSON.parse(await readFile(path, 'utf8'));
  } catch (cause) {
    throw new CheckpointError(`${path}: cannot read the shard index: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
  const map = typeof json === 'object' && json !== null ? (json as Record<string, unknown>)['weight_map'] : undefined;
  if (typeof map !== 'object' || map === null || Array.isArray(map)) throw new CheckpointError(`${path}: has no "weight_map" object`);
  const out = new Map<string, string>();
  for (const [name, file] of Object.entries(map as Record<string, unknown>)) {
    if (typeof file !== 'string' || file.length === 0 || isAbsolute(file) || normalize(file).startsWith('..')) {
      throw new CheckpointError(`${path}: weight_map entry for "${name}" is not a file name inside the directory: ${JSON.stringify(file)}`, { tensor: name });
    }
    out.set(name, file);
  }
  return out;
}

/** Opens the safetensors file(s) of `dir`: name -> (file, info). */
async function openTensorFiles(dir: string): Promise<{ files: SafetensorsFile[]; where: Map<string, { file: SafetensorsFile; info: TensorInfo }> }> {
  const files: SafetensorsFile[] = [];
  const where = new Map<string, { file: SafetensorsFile; info: TensorInfo }>();
  try {
    if (existsSync(join(dir, SINGLE_FILE))) {
      const file = openSafetensors(join(dir, SINGLE_FILE));
      files.push(file);
      for (const [name, info] of file.tensors) where.set(name, { file, info });
    } else if (existsSync(join(dir, INDEX_FILE))) {
      const weightMap = await readWeightMap(dir);
      const byShard = new Map<string, SafetensorsFile>();
      for (const [name, shard] of weightMap) {
        let file = byShard.get(shard);
        if (file === undefined) {
          file = openSafetensors(join(dir, shard));
          files.push(file);
          byShard.set(shard, file);
        }
        const info = file.tensors.get(name);
        if (info === undefined)
          throw new CheckpointError(`${file.path}: tensor "${name}": listed in ${INDEX_FILE} but not present in the shard`, { tensor: name });
        where.set(name, { file, info });
      }
    } else {
      throw new CheckpointError(`${dir}: has neither ${SINGLE_FILE} nor ${INDEX_FILE}`);
    }
  } catch (err) {
    for (const f of files) f.close();
    throw err;
  }
  return { files, where };
}

/**
 * Loads a checkpoint directory: config.json (parsed, checked runnable, planned), then the safetensors
 * file(s). Every expected tensor must be present with the expected shape and a float dtype; otherwise a
 * {@link CheckpointError} names the first offending tensor (the message lists up to 8 problems, with
 * expected and actual shapes). Config problems surface as ConfigError / UnsupportedFeatureError.
 * Tensor data is read lazily by {@link Checkpoint.tensor}.
 *
 * @example
 * const ckpt = await loadCheckpoint('/models/tiny-a');
 * const embed = ckpt.tensor('embed.weight'); // { shape: [vocab, dim], data: Float32Array }
 */
export async function loadCheckpoint(dir: string): Promise<Checkpoint> {
  const config = await readModelConfigFile(join(dir, 'config.json'));
  assertRunnable(config);
  const plan = buildLayerPlan(config);
  const expected = expectedTensors(config, plan);
  const { files, where } = await openTensorFiles(dir);

  const problems: Array<{ name: string; text: string }> = [];
  for (const [name, want] of expected) {
    const found = where.get(name);
    if (found === undefined) {
      problems.push({ name, text: `tensor "${name}" is missing (expected shape ${fmtShape(want.shape)})` });
    } else if (!sameShape(found.info.shape, want.shape)) {
      problems.push({ name, text: `tensor "${name}" has shape ${fmtShape(found.info.shape)}, expected ${fmtShape(want.shape)}` });
    } else if (!want.dtypes.includes(found.info.dtype)) {
      problems.push({ name, text: `tensor "${name}" has dtype ${found.info.dtype}, expected one of ${want.dtypes.join(', ')}` });
    }
  }
  const first = problems[0];
  if (first !== undefined) {
    for (const f of files) f.close();
    const shown = problems.slice(0, 8).map((p) => p.text);
    const more = problems.length > shown.length ? `; and ${problems.length - shown.length} more` : '';
    throw new CheckpointError(`${dir}: ${problems.length} tensor problem(s): ${shown.join('; ')}${more}`, { tensor: first.name });
  }
  const unexpected = Object.freeze([...where.keys()].filter((name) => !expected.has(name)).sort());

  return {
    dir,
    config,
    plan,
    unexpected,
    has: (name) => where.has(name),
    tensor(name: string): CheckpointTensor {
      const found = where.get(name);
      if (found === undefined) throw new CheckpointError(`${dir}: tensor "${name}" is not in the checkpoint`, { tensor: name });
      return { shape: found.info.shape, data: found.file.readTensorF32(name) };
    },
    close(): void {
      for (const f of files) f.close();
    },
  };
}
