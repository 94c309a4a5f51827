/**
 * @module weights/init-model
 * A seeded random checkpoint for any runnable config, written as `config.json` + `model.safetensors`
 * in the layout {@link loadCheckpoint} reads. Tensors are generated and written one chunk at a time, so
 * even a large config never holds more than ~4 MB of weights in memory.
 *
 * Recipe (the tiny-a fixture README, "Weights"), z ~ N(0, 1) drawn in tensor order:
 *
 * | parameters                                     | value                          |
 * |------------------------------------------------|--------------------------------|
 * | `embed.weight`                                 | z                              |
 * | every RMSNorm weight (`*norm.weight`)          | 1 + 0.1 z                      |
 * | every other 2-D weight (incl. `hc_*_fn`, head) | z / sqrt(fan_in), fan_in = shape[-1] |
 * | additionally `attn.wo_b.weight`                | x 0.25                         |
 * | additionally every expert `w2` (routed, shared)| x 0.2                          |
 * | `hc_*_base`                                    | 0.5 z                          |
 * | `hc_*_scale`                                   | 0.5 + 0.1 z                    |
 * | `attn.attn_sink`                               | 0.5 z                          |
 * | `ffn.gate.bias`                                | 0.1 z                          |
 *
 * Values are computed in float32, then stored as F32 (`hc_*`, `attn_sink`, `gate.bias`) or rounded to
 * BF16 (round to nearest even). The generator is xoshiro128** seeded through splitmix32, with
 * Box-Muller normals: the same seed gives byte-identical files, but NOT the fixture's torch values.
 */
import { mkdir, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigError, InputError } from '../errors.js';
import { buildLayerPlan } from '../config/layer-plan.js';
import type { LayerPlan } from '../config/layer-plan.js';
import { assertRunnable, parseModelConfig } from '../config/model-config.js';
import type { ModelConfig } from '../config/model-config.js';
import { expectedTensors } from './checkpoint.js';
import { SAFETENSORS_DTYPE_BYTES, SafetensorsWriter, numelOf } from './safetensors.js';
import type { TensorSpec } from './safetensors.js';

/** Settings forced on every generated config.json: bf16 weights, and every out-of-scope feature off. */
export const INIT_MODEL_FORCED_SETTINGS: Readonly<Record<string, unknown>> = Object.freeze({
  dtype: 'bf16',
  expert_dtype: null,
  engram_layer_ids: [],
  vision_n_layers: 0,
  dspark_block_size: 0,
  n_mtp_layers: 0,
});

const CHUNK_ELEMENTS = 1 << 20;

function splitmix32(state: number): { state: number; value: number } {
  const next = (state + 0x9e3779b9) | 0;
  let z = next;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  z ^= z >>> 16;
  return { state: next, value: z >>> 0 };
}

function rotl32(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

/**
 * xoshiro128** (Blackman & Vigna), seeded from a safe integer through splitmix32; normals by Box-Muller.
 * The state lives in an Int32Array so that V8 never boxes it (31-bit Smis).
 */
export class SeededRandom {
  private readonly s = new Int32Array(4);
  private readonly spare = new Float64Array(1);
  private hasSpare = false;

  constructor(seed: number) {
    if (!Number.isSafeInteger(seed)) throw new InputError(`seed must be a safe integer, got ${seed}`);
    const lo = seed >>> 0;
    const hi = Math.floor(seed / 2 ** 32) >>> 0;
    let st = lo ^ splitmix32(hi ^ 0x5eed).value;
    for (let i = 0; i < 4; i++) {
      const r = splitmix32(st);
      st = r.state;
      this.s[i] = r.value;
    }
    if (((this.s[0] as number) | (this.s[1] as number) | (this.s[2] as number) | (this.s[3] as number)) === 0) this.s[0] = 1; // the all-zero state is a fixed point
  }

  /** Next uniform 32-bit unsigned integer. */
  nextU32(): number {
    const s = this.s;
    const s0 = s[0] as number;
    const s1 = s[1] as number;
    const result = Math.imul(rotl32(Math.imul(s1, 5), 7), 9) >>> 0;
    const t = s1 << 9;
    const s2 = (s[2] as number) ^ s0;
    const s3 = (s[3] as number) ^ s1;
    s[1] = s1 ^ s2;
    s[0] = s0 ^ s3;
    s[2] = s2 ^ t;
    s[3] = rotl32(s3, 11);
    return result;
  }

  /** Uniform in [0, 1) with 53 random bits. */
  nextUniform(): number {
    const a = this.nextU32() >>> 5;
    const b = this.nextU32() >>> 6;
    return (a * 67108864 + b) / 9007199254740992;
  }

  /** Standard normal (Box-Muller; both values of each pair are used, cos first). */
  nextNormal(): number {
    if (this.hasSpare) {
      this.hasSpare = false;
      return this.spare[0] as number;
    }
    const u1 = 1 - this.nextUniform(); // (0, 1]
    const u2 = this.nextUniform();
    const r = Math.sqrt(-2 * Math.log(u1));
    const theta = 2 * Math.PI * u2;
    this.spare[0] = r * Math.sin(theta);
    this.hasSpare = true;
    return r * Math.cos(theta);
  }
}

/** A uniform [0, 1) source on SeededRandom, for tests and benchmarks that only need `() => number`. */
export function seededUniform(seed: number): () => number {
  const rng = new SeededRandom(seed);
  return () => rng.nextUniform();
}

/** value = offset + scale * z for one tensor, by its state_dict name and shape. */
export function initRecipe(name: string, shape: readonly number[]): { offset: number; scale: number } {
  if (name === 'embed.weight') return { offset: 0, scale: 1 };
  if (name.endsWith('norm.weight')) return { offset: 1, scale: 0.1 };
  if (/hc_(attn|ffn)_base$/.test(name)) return { offset: 0, scale: 0.5 };
  if (/hc_(attn|ffn)_scale$/.test(name)) return { offset: 0.5, scale: 0.1 };
  if (name.endsWith('attn.attn_sink')) return { offset: 0, scale: 0.5 };
  if (name.endsWith('ffn.gate.bias')) return { offset: 0, scale: 0.1 };
  if (shape.length === 2) {
    const fanIn = shape[1] as number;
    let scale = 1 / Math.sqrt(fanIn);
    if (name.endsWith('attn.wo_b.weight')) scale *= 0.25;
    if (/ffn\.(experts\.\d+|shared_experts)\.w2\.weight$/.test(name)) scale *= 0.2;
    return { offset: 0, scale };
  }
  return { offset: 0, scale: 1 };
}

/** Total parameter count (elements) of the text-only trunk of `config`. */
export function parameterCount(config: ModelConfig, plan: LayerPlan): number {
  let n = 0;
  for (const t of expectedTensors(config, plan).values()) n += numelOf(t.shape);
  return n;
}

export interface InitModelProgress {
  /** Bytes of tensor data written so far, of `bytesTotal`. */
  readonly bytesDone: number;
  readonly bytesTotal: number;
  readonly tensorsDone: number;
  readonly tensorsTotal: number;
}

export interface InitModelOptions {
  /** PRNG seed (a safe integer); the same seed gives byte-identical files. */
  readonly seed: number;
  /** Directory to write config.json and model.safetensors into (created if needed). */
  readonly outDir: string;
  /** Called after every chunk of ~1M elements written (and once per tensor). */
  readonly onProgress?: (p: InitModelProgress) => void;
}

/** What initModel would write for a config, computed without writing anything. */
export interface InitModelPlan {
  /** The config.json it writes (the input with INIT_MODEL_FORCED_SETTINGS applied). */
  readonly json: Readonly<Record<string, unknown>>;
  readonly config: ModelConfig;
  readonly plan: LayerPlan;
  /** Settings of the input that the forced settings change (`from` undefined = absent). */
  readonly overrides: ReadonlyArray<{ readonly field: string; readonly from: unknown; readonly to: unknown }>;
  readonly parameterCount: number;
  readonly tensorCount: number;
  /** model.safetensors' size: the tensor data exactly, plus an estimate of the header (~120 B per tensor). */
  readonly estimatedBytes: number;
}

const HEADER_BYTES_PER_TENSOR_ESTIMATE = 120;

export interface InitModelResult {
  readonly parameterCount: number;
  /** Size of model.safetensors in bytes. */
  readonly bytes: number;
  readonly tensorCount: number;
  readonly configPath: string;
  readonly weightsPath: string;
  /** Settings of the input that were changed to make the config runnable (`from` undefined = absent). */
  readonly overrides: ReadonlyArray<{ readonly field: string; readonly from: unknown; readonly to: unknown }>;
}

/** Passes the chunks through, calling `after(elements)` once the consumer asked for the next one (the previous was written). */
function* counted(chunks: Generator<Float32Array>, after: (elements: number) => void): Generator<Float32Array> {
  for (const chunk of chunks) {
    yield chunk;
    after(chunk.length);
  }
}

function* chunksOf(rng: SeededRandom, numel: number, offset: number, scale: number): Generator<Float32Array> {
  const f32Scale = Math.fround(scale);
  const f32Offset = Math.fround(offset);
  for (let start = 0; start < numel; start += CHUNK_ELEMENTS) {
    const chunk = new Float32Array(Math.min(CHUNK_ELEMENTS, numel - start));
    for (let i = 0; i < chunk.length; i++) {
      // float32 arithmetic, as the reference transforms fp32 z before rounding to bf16
      chunk[i] = Math.fround(f32Offset + Math.fround(f32Scale * Math.fround(rng.nextNormal())));
    }
    yield chunk;
  }
}

/**
 * Writes a seeded random checkpoint of `configJson` (ModelArgs keys) to `opts.outDir`: config.json with
 * {@link INIT_MODEL_FORCED_SETTINGS} applied, and model.safetensors streamed tensor by tensor.
 * Throws ConfigError for an invalid config (after the forced settings).
 *
 * @example
 * const info = await initModel(JSON.parse(await readFile('config.json', 'utf8')), { seed: 1, outDir: '/tmp/m' });
 * const ckpt = await loadCheckpoint('/tmp/m');
 */
/**
 * The checkpoint `initModel` would write for `configJson`: the forced settings it applies, the
 * parameter count and the file size, without writing (or allocating) anything. Throws ConfigError
 * for an invalid config (after the forced settings).
 */
export function planInitModel(configJson: unknown): InitModelPlan {
  if (typeof configJson !== 'object' || configJson === null || Array.isArray(configJson)) {
    throw new ConfigError('(root)', `must be a JSON object, got ${JSON.stringify(configJson)}`);
  }
  const input = configJson as Readonly<Record<string, unknown>>;
  const overrides: Array<{ field: string; from: unknown; to: unknown }> = [];
  for (const [field, to] of Object.entries(INIT_MODEL_FORCED_SETTINGS)) {
    const from = input[field];
    if (JSON.stringify(from) !== JSON.stringify(to)) overrides.push({ field, from, to });
  }
  const json: Record<string, unknown> = { ...input, ...INIT_MODEL_FORCED_SETTINGS };
  const config = parseModelConfig(json);
  assertRunnable(config);
  const plan = buildLayerPlan(config);
  let parameters = 0;
  let dataBytes = 0;
  let tensorCount = 0;
  for (const t of expectedTensors(config, plan).values()) {
    const numel = numelOf(t.shape);
    parameters += numel;
    dataBytes += numel * SAFETENSORS_DTYPE_BYTES[t.dtypes[0] ?? 'BF16'];
    tensorCount++;
  }
  return {
    json,
    config,
    plan,
    overrides,
    parameterCount: parameters,
    tensorCount,
    estimatedBytes: 8 + dataBytes + tensorCount * HEADER_BYTES_PER_TENSOR_ESTIMATE,
  };
}

export async function initModel(configJson: unknown, opts: InitModelOptions): Promise<InitModelResult> {
  const { json, config, plan, overrides } = planInitModel(configJson);
  const expected = expectedTensors(config, plan);
  const rng = new SeededRandom(opts.seed);
  const specs: TensorSpec[] = [...expected].map(([name, t]) => ({ name, dtype: t.dtypes[0] ?? 'BF16', shape: t.shape }));
  const bytesTotal = specs.reduce((a, t) => a + numelOf(t.shape) * SAFETENSORS_DTYPE_BYTES[t.dtype], 0);
  let bytesDone = 0;
  let tensorsDone = 0;
  const report = (): void => opts.onProgress?.({ bytesDone, bytesTotal, tensorsDone, tensorsTotal: specs.length });

  await mkdir(opts.outDir, { recursive: true });
  const configPath = join(opts.outDir, 'config.json');
  const weightsPath = join(opts.outDir, 'model.safetensors');
  const writer = await SafetensorsWriter.create(weightsPath, specs, {
    format: 'pt',
    generator: 'csa2 initModel (xoshiro128** + Box-Muller)',
    seed: String(opts.seed),
  });
  let count = 0;
  try {
    for (const spec of specs) {
      const { offset, scale } = initRecipe(spec.name, spec.shape);
      const numel = numelOf(spec.shape);
      const elementBytes = SAFETENSORS_DTYPE_BYTES[spec.dtype];
      await writer.writeChunks(
        spec.name,
        counted(chunksOf(rng, numel, offset, scale), (n) => {
          bytesDone += n * elementBytes;
          report();
        }),
      );
      count += numel;
      tensorsDone++;
      report();
    }
    await writer.close();
  } catch (err) {
    await writer.abort();
    throw err;
  }
  await writeFile(configPath, `${JSON.stringify(json, null, 2)}\n`);
  const bytes = (await stat(weightsPath)).size;
  return Object.freeze({ parameterCount: count, bytes, tensorCount: specs.length, configPath, weightsPath, overrides: Object.freeze(overrides) });
}
