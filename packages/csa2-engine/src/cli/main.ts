/**
 * @module cli/main
 * The `csa2` command line: generate, ingest, inspect, init-model, gc (cli/gc). Every command has `--help`;
 * `csa2 --version` prints the version. User errors print one clear line and exit 1 (usage errors
 * exit 2, with the command's usage); only unexpected failures print a stack.
 *
 * Commands are rows of COMMANDS (name, summary, synopsis, options with their help, run): a new
 * command is one more row.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { readFile, statfs } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import {
  buildLayerPlan,
  ConfigError,
  Csa2Error,
  DEFAULT_REPLAY_TOKENS,
  globalCacheBytesPerToken,
  initModel,
  InputError,
  parameterCount,
  parseModelConfig,
  planInitModel,
  readModelConfigFile,
  unsupportedSettings,
  UnsupportedFeatureError,
  windowCacheBytes,
  writeSafetensors,
  type ModelConfig,
  type NumericsMode,
  type SamplingParams,
} from '@csa2/core';
import { EngineHost } from '../host/engine-host.js';
import { GC_USAGE, cmdGc } from './gc.js';

/** `init-model` writes checkpoints larger than this only with --force. */
export const INIT_MODEL_FORCE_ABOVE_BYTES = 4e9;

const STORE_URL_HELP = 'file:///path or s3://bucket/prefix?endpoint=http://host:port&forcePathStyle=1';

class UsageError extends Error {}

type Values = Record<string, string | boolean | undefined>;
type Options = NonNullable<ParseArgsConfig['options']>;

function parse(args: string[], options: Options): Values {
  try {
    return parseArgs({
      args,
      options: { ...options, help: { type: 'boolean', short: 'h' }, version: { type: 'boolean' } },
      allowPositionals: false,
      strict: true,
    }).values as Values;
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

function intOption(v: string | boolean | undefined, name: string, fallback?: number): number {
  if (v === undefined || typeof v === 'boolean') {
    if (fallback === undefined) throw new UsageError(`--${name} is required`);
    return fallback;
  }
  const n = Number(v);
  if (!Number.isSafeInteger(n)) throw new InputError(`--${name} must be an integer, got "${v}"`);
  return n;
}

function numberOption(v: string | boolean | undefined, name: string, fallback: number): number {
  if (v === undefined || typeof v === 'boolean') return fallback;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new InputError(`--${name} must be a number, got "${v}"`);
  return n;
}

function idList(v: string, name: string): number[] {
  const parts = v.split(',').map((s) => s.trim());
  return parts.map((s, i) => {
    const n = Number(s);
    if (s === '' || !Number.isSafeInteger(n)) throw new InputError(`--${name}: item ${i} ("${s}") is not an integer id`);
    return n;
  });
}

/** `--logit-bias 5:-100,17:2.5` → [[5, -100], [17, 2.5]]. */
function biasList(v: string): [number, number][] {
  return v.split(',').map((item, i) => {
    const m = /^\s*(\d+)\s*:\s*(-?[0-9.eE+-]+)\s*$/.exec(item);
    const id = Number(m?.[1]);
    const bias = Number(m?.[2]);
    if (m === null || !Number.isSafeInteger(id) || !Number.isFinite(bias)) throw new InputError(`--logit-bias: item ${i} ("${item.trim()}") is not ID:BIAS`);
    return [id, bias];
  });
}

/** The sampling flags of generate (validated by the engine: its errors name the field). */
function samplingOptions(o: Values): SamplingParams {
  const optional = (flag: string, key: keyof SamplingParams, parse: (v: string, name: string) => unknown) =>
    typeof o[flag] === 'string' ? { [key]: parse(o[flag], flag) } : {};
  const num = (v: string, name: string) => numberOption(v, name, 0);
  const int = (v: string, name: string) => intOption(v, name);
  return {
    temperature: numberOption(o['temperature'], 'temperature', 0),
    topP: numberOption(o['top-p'], 'top-p', 1),
    seed: intOption(o['seed'], 'seed', 0),
    ...optional('top-k', 'topK', int),
    ...optional('min-p', 'minP', num),
    ...optional('repetition-penalty', 'repetitionPenalty', num),
    ...optional('presence-penalty', 'presencePenalty', num),
    ...optional('frequency-penalty', 'frequencyPenalty', num),
    ...optional('logit-bias', 'logitBias', (v) => biasList(v)),
  } as SamplingParams;
}

async function cmdGenerate(o: Values): Promise<void> {
  if (typeof o['model'] !== 'string') throw new UsageError('--model DIR is required');
  const document =
    typeof o['document'] === 'string' ? { tenant: typeof o['tenant'] === 'string' ? o['tenant'] : DEFAULT_TENANT, documentId: o['document'] } : undefined;
  if (document === undefined && (o['prompt'] === undefined) === (o['prompt-ids'] === undefined))
    throw new UsageError('give exactly one of --prompt and --prompt-ids');
  if (document !== undefined && o['prompt'] !== undefined && o['prompt-ids'] !== undefined)
    throw new UsageError('give at most one of --prompt and --prompt-ids');
  if (document !== undefined && typeof o['store'] !== 'string') throw new UsageError('--document needs --store URL');
  if (o['exact'] === true && o['replay'] !== undefined) throw new UsageError('--replay and --exact exclude each other');
  const numerics = (o['numerics'] ?? 'bf16') as string;
  if (numerics !== 'bf16' && numerics !== 'fp32') throw new InputError(`--numerics must be bf16 or fp32, got "${numerics}"`);
  const maxTokens = intOption(o['max-tokens'], 'max-tokens');
  const exact = o['exact'] === true;
  const replayTokens = intOption(o['replay'], 'replay', DEFAULT_REPLAY_TOKENS);
  const forceIds = typeof o['force-ids'] === 'string' ? idList(o['force-ids'], 'force-ids') : undefined;
  const sampling = samplingOptions(o);

  const t0 = performance.now();
  const engine = await EngineHost.start({
    modelDir: o['model'],
    numerics: numerics as NumericsMode,
    runtime: runtimeOptions(o),
    ...(typeof o['store'] === 'string' ? { store: o['store'] } : {}),
  });
  try {
    const loadMs = performance.now() - t0;
    const promptIds =
      typeof o['prompt-ids'] === 'string' ? idList(o['prompt-ids'], 'prompt-ids') : typeof o['prompt'] === 'string' ? await engine.tokenize(o['prompt']) : [];
    if (promptIds.length === 0 && document === undefined) throw new InputError('the prompt is empty');
    const result = await engine.generate(
      {
        promptIds,
        maxTokens,
        ...(exact ? { exact: true } : { replayTokens }),
        sampling,
        ...(forceIds !== undefined ? { forceIds } : {}),
        keepLogits: typeof o['dump'] === 'string',
        ...(document !== undefined ? { document } : {}),
      },
      { onToken: (t) => process.stdout.write(t.text) },
    );
    process.stdout.write('\n');
    if (typeof o['dump'] === 'string') {
      const V = engine.info.vocabSize;
      const logits = new Float32Array(result.logits.length * V);
      result.logits.forEach((row, i) => logits.set(row, i * V));
      await writeSafetensors(o['dump'], [
        { name: 'logits', dtype: 'F32', shape: [result.logits.length, V], data: logits },
        { name: 'tokens', dtype: 'I32', shape: [result.tokens.length], data: Int32Array.from(result.tokens) },
      ]);
    }
    const decodeTokens = Math.max(0, result.tokens.length - 1);
    const { prefillMs, decodeMs } = result.timings;
    process.stderr.write(
      `csa2: ${result.promptTokens} prompt tokens (${result.cachedTokens} from the stored document), ${result.tokens.length} generated (${result.finishReason}); ` +
        `mode ${exact ? 'exact' : `replay ${replayTokens}`}; load ${loadMs.toFixed(0)} ms, ` +
        `first token ${prefillMs.toFixed(0)} ms, decode ${decodeTokens > 0 && decodeMs > 0 ? ((decodeTokens * 1000) / decodeMs).toFixed(1) : '-'} tok/s\n` +
        `csa2: tokens ${result.tokens.join(',')}\n`,
    );
  } finally {
    await engine.close();
  }
}

/** --threads N|auto and --provider cpu|cuda, shared by the commands that run a model. */
function runtimeOptions(o: Values) {
  const provider = o['provider'] ?? 'cpu';
  if (provider !== 'cpu' && provider !== 'cuda') throw new InputError(`--provider must be cpu or cuda, got "${String(provider)}"`);
  const threads = o['threads'] === undefined || o['threads'] === 'auto' ? 'auto' : intOption(o['threads'], 'threads');
  if (threads !== 'auto' && threads < 1) throw new InputError(`--threads must be a positive integer or auto, got ${threads}`);
  const deviceId = o['device-id'] === undefined ? 0 : intOption(o['device-id'], 'device-id');
  if (deviceId < 0) throw new InputError(`--device-id must be a non-negative integer, got ${deviceId}`);
  const fallback = o['cuda-cpu-fallback'] ?? 'refuse';
  if (fallback !== 'refuse' && fallback !== 'allow') throw new InputError(`--cuda-cpu-fallback must be refuse or allow, got "${String(fallback)}"`);
  return { executionProvider: provider, intraOpThreads: threads, deviceId, tf32: o['tf32'] === true, cudaCpuFallback: fallback } as const;
}

const RUNTIME_FLAGS = {
  provider: { type: 'string' },
  threads: { type: 'string' },
  'device-id': { type: 'string' },
  tf32: { type: 'boolean' },
  'cuda-cpu-fallback': { type: 'string' },
} as const;
const RUNTIME_HELP: readonly Help[] = [
  ['--provider cpu|cuda', 'onnxruntime execution provider (default cpu)'],
  ['--device-id N', 'the CUDA device (default 0)'],
  ['--tf32', 'let cuBLAS/cuDNN use TF32 for fp32 products (default off: the reference numerics)'],
  ['--cuda-cpu-fallback refuse|allow', 'a graph with nodes the CUDA provider cannot run: refuse it (default) or run them on the CPU'],
  ['--threads N|auto', 'intra-op threads (default auto: 1 below dim 512, else the cores)'],
];

const DEFAULT_TENANT = 'default';

/** Token ids from a file: a JSON array, or integers separated by commas/whitespace. */
async function readIdsFile(path: string): Promise<number[]> {
  const text = (await readFile(path, 'utf8')).trim();
  if (text.startsWith('[')) {
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (cause) {
      throw new InputError(`--ids-file ${path}: not valid JSON: ${(cause as Error).message}`);
    }
    if (!Array.isArray(json)) throw new InputError(`--ids-file ${path}: expected an array of token ids`);
    return json.map((v, i) => {
      if (typeof v !== 'number' || !Number.isSafeInteger(v)) throw new InputError(`--ids-file ${path}: item ${i} (${JSON.stringify(v)}) is not an integer id`);
      return v;
    });
  }
  return text.length === 0 ? [] : idList(text.split(/[\s,]+/).join(','), 'ids-file');
}

/** A writable terminal stream (process.stderr), or a test's stand-in. */
export interface ProgressStream {
  readonly isTTY?: boolean;
  write(s: string): unknown;
}

/**
 * A one-line progress bar on a terminal (redrawn at most every 100 ms; `describe` renders the
 * figures after the bar); nothing when `stream` is not a TTY.
 */
export function progressBar(
  label: string,
  describe: (done: number, total: number, perSecond: number) => string,
  stream: ProgressStream = process.stderr,
): { update(done: number, total: number): void; end(): void } {
  if (stream.isTTY !== true) return { update() {}, end() {} };
  const t0 = performance.now();
  let last = -Infinity;
  let drawn = false;
  return {
    update(done, total) {
      const now = performance.now();
      if (now - last < 100 && done < total) return;
      last = now;
      drawn = true;
      const width = 30;
      const filled = total > 0 ? Math.min(width, Math.round((width * done) / total)) : width;
      const rate = done / Math.max(1e-3, (now - t0) / 1000);
      stream.write(`\r${label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${describe(done, total, rate)}`);
    },
    end() {
      if (drawn) stream.write('\n');
    },
  };
}

/** 1103132330208 → "1.1 TB" (decimal units, as disks are sold). */
export function formatBytes(bytes: number): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB', 'PB'];
  let v = bytes;
  let u = 0;
  while (v >= 1000 && u < units.length - 1) {
    v /= 1000;
    u++;
  }
  return u === 0 ? `${bytes} B` : `${v >= 100 ? v.toFixed(0) : v.toFixed(1)} ${units[u] as string}`;
}

async function cmdIngest(o: Values): Promise<void> {
  if (typeof o['model'] !== 'string' || typeof o['store'] !== 'string') throw new UsageError('--model DIR and --store URL are required');
  if ((o['text-file'] === undefined) === (o['ids-file'] === undefined)) throw new UsageError('give exactly one of --text-file and --ids-file');
  const numerics = (o['numerics'] ?? 'bf16') as string;
  if (numerics !== 'bf16' && numerics !== 'fp32') throw new InputError(`--numerics must be bf16 or fp32, got "${numerics}"`);
  let text: string | undefined;
  let tokenIds: number[] | undefined;
  try {
    if (typeof o['text-file'] === 'string') text = await readFile(o['text-file'], 'utf8');
    else tokenIds = await readIdsFile(o['ids-file'] as string);
  } catch (err) {
    if (err instanceof Csa2Error) throw err;
    throw new InputError(`cannot read ${String(o['text-file'] ?? o['ids-file'])}: ${(err as Error).message}`);
  }
  const tenant = typeof o['tenant'] === 'string' ? o['tenant'] : DEFAULT_TENANT;
  const engine = await EngineHost.start({ modelDir: o['model'], numerics: numerics as NumericsMode, runtime: runtimeOptions(o), store: o['store'] });
  try {
    const ids = tokenIds ?? (await engine.tokenize(text as string));
    const documentId = typeof o['doc-id'] === 'string' ? o['doc-id'] : `doc-${createHash('sha256').update(Int32Array.from(ids)).digest('hex').slice(0, 16)}`;
    const bar = progressBar(`csa2: encoding ${documentId}`, (done, total, rate) => `${done}/${total} tokens, ${rate.toFixed(0)} tok/s`);
    const t0 = performance.now();
    const out = await engine.ingest(
      {
        tenant,
        documentId,
        tokenIds: ids,
        ...(o['chunk-tokens'] !== undefined ? { chunkTokens: intOption(o['chunk-tokens'], 'chunk-tokens') } : {}),
      },
      { onProgress: (p) => bar.update(p.tokensDone, p.tokensTotal) },
    );
    bar.end();
    const seconds = (performance.now() - t0) / 1000;
    process.stdout.write(
      `${[
        `document: ${out.documentId}`,
        `tenant: ${tenant}`,
        `tokens: ${out.tokens}`,
        `reused tokens: ${out.reusedTokens}`,
        `bytes written: ${out.bytesWritten} (${out.chunksWritten} chunks written, ${out.chunksSkipped} already stored)`,
        `artifact bytes: ${out.artifactBytes} (${(out.artifactBytes / out.tokens).toFixed(1)} per token on the store)`,
        `global-cache bytes per token: ${out.bytesPerToken}`,
        `encoder tail: ${out.tailBytes > 0 ? `${out.tailBytes} bytes (questions with replay ${out.tailReplayTokens} start after it)` : 'none (not asked, or the document is too short for a reusable one)'}`,
        `time: ${seconds.toFixed(2)} s (${((out.tokens - out.reusedTokens) / seconds).toFixed(0)} tokens/s encoded)`,
      ].join('\n')}\n`,
    );
  } finally {
    await engine.close();
  }
}

async function readConfigArg(o: Values): Promise<{ config: ModelConfig; source: string }> {
  if (typeof o['model'] === 'string') return { config: await readModelConfigFile(`${o['model']}/config.json`), source: `${o['model']}/config.json` };
  if (typeof o['config'] === 'string') return { config: await readModelConfigFile(o['config']), source: o['config'] };
  throw new UsageError('give --model DIR or --config FILE');
}

async function cmdInspect(o: Values): Promise<void> {
  const { config, source } = await readConfigArg(o);
  const plan = buildLayerPlan(config);
  const lines: string[] = [`config: ${source}`, '', 'layer  mode     ratio  kv-src  idx-src  candidates'];
  for (const e of plan.entries) {
    const cand = e.isCandidateSource ? 'source' : e.usesCandidates ? 'uses' : '';
    lines.push(
      `${String(e.layer).padStart(5)}  ${e.mode.padEnd(7)}  ${String(e.compressRatio).padStart(5)}  ${String(e.kvSource ?? '-').padStart(6)}  ${String(e.indexSource ?? '-').padStart(7)}  ${cand}`,
    );
  }
  const counts = Object.entries(plan.counts)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  lines.push('', `layers: ${config.numLayers} (${counts}); encoder/decoder split at layer ${plan.decoderStart ?? 'none'}`);
  lines.push(`parameters: ${parameterCount(config, plan).toLocaleString('en-US')}`);
  lines.push(`global-cache bytes per token: ${globalCacheBytesPerToken(config, plan)}`);
  lines.push(`sliding-window bytes (all layers, fixed): ${windowCacheBytes(config).toLocaleString('en-US')}`);
  const unsupported = unsupportedSettings(config);
  if (unsupported.length > 0) lines.push('not runnable here:', ...unsupported.map((u) => `  ${u.reason}`));
  process.stdout.write(`${lines.join('\n')}\n`);
}

/** Free bytes on the file system that `dir` (or its nearest existing ancestor) is on; null when unknown. */
async function freeBytes(dir: string): Promise<number | null> {
  for (let d = resolve(dir); ; d = dirname(d)) {
    try {
      const s = await statfs(d);
      return s.bavail * s.bsize;
    } catch {
      if (dirname(d) === d) return null;
    }
  }
}

async function cmdInitModel(o: Values): Promise<void> {
  if (typeof o['config'] !== 'string' || typeof o['out'] !== 'string') throw new UsageError('--config FILE and --out DIR are required');
  const seed = intOption(o['seed'], 'seed');
  let json: unknown;
  try {
    json = JSON.parse(await readFile(o['config'], 'utf8'));
  } catch (cause) {
    throw new ConfigError(o['config'], `cannot read JSON: ${(cause as Error).message}`, { cause });
  }
  // 1. what the config turns on that cannot run: refused, naming each field, unless asked to drop it
  const unsupported = unsupportedSettings(parseModelConfig(json));
  if (unsupported.length > 0 && o['drop-unsupported'] !== true) {
    throw new UnsupportedFeatureError(
      (unsupported[0] as { field: string }).field,
      `${o['config']} turns on what csa2-serve cannot run:\n${unsupported.map((u) => `  ${u.reason}`).join('\n')}\n` +
        `pass --drop-unsupported to write a checkpoint with those settings changed as listed (a different model than the config describes)`,
    );
  }
  // 2. the size, before anything is written
  const planned = planInitModel(json);
  const size = `about ${formatBytes(planned.estimatedBytes)} (${planned.parameterCount.toLocaleString('en-US')} parameters in ${planned.tensorCount} tensors)`;
  if (planned.estimatedBytes > INIT_MODEL_FORCE_ABOVE_BYTES && o['force'] !== true) {
    throw new InputError(`this checkpoint would be ${size}; pass --force to write more than ${formatBytes(INIT_MODEL_FORCE_ABOVE_BYTES)}`);
  }
  const free = await freeBytes(o['out']);
  if (free !== null && planned.estimatedBytes > free) {
    throw new InputError(`this checkpoint would be ${size}, but only ${formatBytes(free)} are free where ${o['out']} is`);
  }
  process.stderr.write(`csa2: writing ${size} to ${o['out']}\n`);
  for (const v of planned.overrides) process.stderr.write(`csa2:   set ${v.field}: ${JSON.stringify(v.from) ?? '(absent)'} -> ${JSON.stringify(v.to)}\n`);
  // 3. write, with progress on a terminal
  const bar = progressBar('csa2: writing weights', (done, total, rate) => `${formatBytes(done)} / ${formatBytes(total)}, ${formatBytes(rate)}/s`);
  const info = await initModel(json, { seed, outDir: o['out'], onProgress: (p) => bar.update(p.bytesDone, p.bytesTotal) });
  bar.end();
  process.stdout.write(
    `wrote ${info.weightsPath} (${info.parameterCount.toLocaleString('en-US')} parameters, ${info.bytes.toLocaleString('en-US')} bytes) and ${info.configPath}\n`,
  );
}

type Help = readonly [flag: string, what: string];

interface Command {
  readonly name: string;
  readonly summary: string;
  readonly synopsis: string;
  readonly options: Options;
  readonly help: readonly Help[];
  readonly run: (o: Values) => Promise<void>;
}

const COMMANDS: readonly Command[] = [
  {
    name: 'generate',
    summary: 'generate text from a prompt (or continue a stored document)',
    synopsis: 'csa2 generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) --max-tokens N [options]',
    options: {
      model: { type: 'string' },
      prompt: { type: 'string' },
      'prompt-ids': { type: 'string' },
      'max-tokens': { type: 'string' },
      temperature: { type: 'string' },
      'top-p': { type: 'string' },
      'top-k': { type: 'string' },
      'min-p': { type: 'string' },
      'repetition-penalty': { type: 'string' },
      'presence-penalty': { type: 'string' },
      'frequency-penalty': { type: 'string' },
      'logit-bias': { type: 'string' },
      seed: { type: 'string' },
      replay: { type: 'string' },
      exact: { type: 'boolean' },
      'force-ids': { type: 'string' },
      dump: { type: 'string' },
      numerics: { type: 'string' },
      store: { type: 'string' },
      document: { type: 'string' },
      tenant: { type: 'string' },
      ...RUNTIME_FLAGS,
    },
    help: [
      ['--model DIR', 'checkpoint directory (config.json + model.safetensors)'],
      ['--prompt TEXT | --prompt-ids 1,2,3', 'the prompt as text or token ids (optional with --document)'],
      ['--max-tokens N', 'tokens to generate (required)'],
      ['--temperature T', '0 (default) = greedy; otherwise sampled with --seed'],
      ['--top-p P, --top-k K, --min-p P', "nucleus, top-k (0 = off) and min-p filters, in vLLM's order"],
      ['--repetition-penalty R', "vLLM's, over prompt and output tokens (1 = off)"],
      ['--presence-penalty P, --frequency-penalty F', "OpenAI's, over the output tokens, in [-2, 2]"],
      ['--logit-bias ID:BIAS,...', "added to those tokens' logits first, bias in [-100, 100]"],
      ['--seed S', 'sampling seed (default 0): token i is drawn from (S, i) alone'],
      ['--replay R | --exact', `decoder replay over the last R tokens (default ${DEFAULT_REPLAY_TOKENS}), or every layer over the whole prompt`],
      ['--force-ids 5,9,...', 'feed these ids at the decode steps (teacher forcing)'],
      ['--dump FILE', 'write the logits and tokens as safetensors'],
      ['--numerics bf16|fp32', "the reference's bf16 execution (default) or plain fp32"],
      ['--store URL --document ID [--tenant T]', `continue a stored document (URL: ${STORE_URL_HELP})`],
      ...RUNTIME_HELP,
    ],
    run: cmdGenerate,
  },
  {
    name: 'ingest',
    summary: 'encode a document into the artifact store',
    synopsis: 'csa2 ingest --model DIR --store URL (--text-file F | --ids-file F) [options]',
    options: {
      model: { type: 'string' },
      store: { type: 'string' },
      'text-file': { type: 'string' },
      'ids-file': { type: 'string' },
      'doc-id': { type: 'string' },
      tenant: { type: 'string' },
      'chunk-tokens': { type: 'string' },
      numerics: { type: 'string' },
      ...RUNTIME_FLAGS,
    },
    help: [
      ['--model DIR', 'checkpoint directory'],
      ['--store URL', STORE_URL_HELP],
      ['--text-file F | --ids-file F', 'the document as text, or as token ids (a JSON array or integers separated by commas/spaces)'],
      ['--doc-id ID', 'document id (default: doc- + a hash of the tokens)'],
      ['--tenant T', `tenant (default ${DEFAULT_TENANT})`],
      ['--chunk-tokens C', 'tokens per chunk (default 4096; a multiple of every compress ratio and of the candidate block)'],
      ['--numerics bf16|fp32', 'numerics of the encoder (default bf16)'],
      ...RUNTIME_HELP,
    ],
    run: cmdIngest,
  },
  {
    name: 'inspect',
    summary: "print a config's layer plan, parameter count, cache bytes per token, and what cannot run",
    synopsis: 'csa2 inspect (--model DIR | --config FILE)',
    options: { model: { type: 'string' }, config: { type: 'string' } },
    help: [
      ['--model DIR', 'a checkpoint directory (reads its config.json)'],
      ['--config FILE', 'a config.json (ModelArgs keys)'],
    ],
    run: cmdInspect,
  },
  {
    name: 'init-model',
    summary: 'write a seeded random checkpoint (bf16) for a runnable config',
    synopsis: 'csa2 init-model --config FILE --seed S --out DIR [--drop-unsupported] [--force]',
    options: {
      config: { type: 'string' },
      seed: { type: 'string' },
      out: { type: 'string' },
      force: { type: 'boolean' },
      'drop-unsupported': { type: 'boolean' },
    },
    help: [
      ['--config FILE', 'a config.json (ModelArgs keys)'],
      ['--seed S', 'PRNG seed: the same seed writes byte-identical files'],
      ['--out DIR', 'where config.json and model.safetensors go (created if needed)'],
      [
        '--drop-unsupported',
        'write a checkpoint although the config turns on what cannot run (Engram, vision, DSpark/MTP, fp8/fp4 weights), with those settings turned off',
      ],
      ['--force', `write a checkpoint larger than ${formatBytes(INIT_MODEL_FORCE_ABOVE_BYTES)} (the size is estimated first)`],
    ],
    run: cmdInitModel,
  },
];

function commandHelp(c: Command): string {
  const width = Math.max(...c.help.map(([flag]) => flag.length));
  return [
    `csa2 ${c.name}: ${c.summary}`,
    '',
    `usage: ${c.synopsis}`,
    '',
    'options:',
    ...c.help.map(([flag, what]) => `  ${flag.padEnd(width)}  ${what}`),
    `  ${'-h, --help'.padEnd(width)}  this help`,
  ].join('\n');
}

const USAGE = [
  'usage: csa2 <command> [options]     (csa2 <command> --help for its options)',
  '',
  'commands:',
  ...COMMANDS.map((c) => `  ${c.name.padEnd(11)} ${c.summary}`),
  `  ${'gc'.padEnd(11)} delete artifact chunks no document references (csa2 gc --help)`,
  '',
  '  csa2 --version   print the version',
].join('\n');

/** The version of @csa2/engine (its package.json, two levels above dist/cli/). */
export function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: unknown };
  return typeof pkg.version === 'string' ? pkg.version : 'unknown';
}

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    const topic = name === 'help' ? COMMANDS.find((c) => c.name === rest[0]) : undefined;
    process.stdout.write(`${topic !== undefined ? commandHelp(topic) : USAGE}\n`);
    return name === undefined ? 2 : 0;
  }
  if (name === '--version' || name === '-V' || name === 'version') {
    process.stdout.write(`csa2 ${version()}\n`);
    return 0;
  }
  const command = COMMANDS.find((c) => c.name === name);
  try {
    if (name === 'gc') {
      // its own parser (cli/gc)
      if (rest.includes('--help') || rest.includes('-h')) {
        process.stdout.write(`${GC_USAGE}\n`);
        return 0;
      }
      return await cmdGc(rest);
    }
    if (command === undefined) throw new UsageError(`unknown command "${name}"`);
    const values = parse(rest, command.options);
    if (values['help'] === true) {
      process.stdout.write(`${commandHelp(command)}\n`);
      return 0;
    }
    if (values['version'] === true) {
      process.stdout.write(`csa2 ${version()}\n`);
      return 0;
    }
    await command.run(values);
    return 0;
  } catch (err) {
    if (err instanceof UsageError) {
      const usage = command !== undefined ? `usage: ${command.synopsis}\n(csa2 ${command.name} --help lists every option)` : name === 'gc' ? GC_USAGE : USAGE;
      process.stderr.write(`csa2: ${err.message}\n${usage}\n`);
      return 2;
    }
    if (err instanceof Csa2Error) {
      process.stderr.write(`csa2: error: ${err.message}\n`);
      return 1;
    }
    throw err;
  }
}
