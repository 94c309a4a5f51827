/**
 * @module cli/main
 * The `csa2` command line: generate, ingest, inspect, init-model, gc (cli/gc). User errors print one clear line and exit 1
 * (usage errors exit 2); only unexpected failures print a stack.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
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
  readModelConfigFile,
  unsupportedSettings,
  windowCacheBytes,
  writeSafetensors,
  type ModelConfig,
  type NumericsMode,
} from '@csa2/core';
import { EngineHost } from '../host/engine-host.js';
import { cmdGc } from './gc.js';

const USAGE = `usage:
  csa2 generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) --max-tokens N
                [--temperature T] [--top-p P] [--seed S] [--replay R | --exact]
                [--force-ids 5,9,...] [--dump FILE] [--numerics bf16|fp32]
                [--provider cpu|cuda] [--threads N|auto]
                [--store URL --document ID [--tenant T]]
  csa2 ingest --model DIR --store URL (--text-file F | --ids-file F)
                [--doc-id ID] [--tenant T] [--chunk-tokens C]
  csa2 inspect (--model DIR | --config FILE)
  csa2 gc --store URL [--grace-ms N] [--marker-ttl-ms N] [--prompt-ttl-ms N|off] [--tenant T ...] [--dry-run] [--json]

  URL: file:///path or s3://bucket/prefix?endpoint=http://host:port&forcePathStyle=1
  csa2 init-model --config FILE --seed S --out DIR`;

class UsageError extends Error {}

function parse(args: string[], options: ParseArgsConfig['options']) {
  try {
    return parseArgs({ args, options: options ?? {}, allowPositionals: false, strict: true }).values as Record<string, string | boolean | undefined>;
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

async function cmdGenerate(args: string[]): Promise<void> {
  const o = parse(args, {
    model: { type: 'string' },
    prompt: { type: 'string' },
    'prompt-ids': { type: 'string' },
    'max-tokens': { type: 'string' },
    temperature: { type: 'string' },
    'top-p': { type: 'string' },
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
  });
  if (typeof o['model'] !== 'string') throw new UsageError('--model DIR is required');
  const document = typeof o['document'] === 'string' ? { tenant: typeof o['tenant'] === 'string' ? o['tenant'] : DEFAULT_TENANT, documentId: o['document'] } : undefined;
  if (document === undefined && (o['prompt'] === undefined) === (o['prompt-ids'] === undefined)) throw new UsageError('give exactly one of --prompt and --prompt-ids');
  if (document !== undefined && o['prompt'] !== undefined && o['prompt-ids'] !== undefined) throw new UsageError('give at most one of --prompt and --prompt-ids');
  if (document !== undefined && typeof o['store'] !== 'string') throw new UsageError('--document needs --store URL');
  if (o['exact'] === true && o['replay'] !== undefined) throw new UsageError('--replay and --exact exclude each other');
  const numerics = (o['numerics'] ?? 'bf16') as string;
  if (numerics !== 'bf16' && numerics !== 'fp32') throw new InputError(`--numerics must be bf16 or fp32, got "${numerics}"`);
  const maxTokens = intOption(o['max-tokens'], 'max-tokens');
  const exact = o['exact'] === true;
  const replayTokens = intOption(o['replay'], 'replay', DEFAULT_REPLAY_TOKENS);
  const forceIds = typeof o['force-ids'] === 'string' ? idList(o['force-ids'], 'force-ids') : undefined;

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
        sampling: { temperature: numberOption(o['temperature'], 'temperature', 0), topP: numberOption(o['top-p'], 'top-p', 1), seed: intOption(o['seed'], 'seed', 0) },
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
function runtimeOptions(o: Record<string, string | boolean | undefined>) {
  const provider = o['provider'] ?? 'cpu';
  if (provider !== 'cpu' && provider !== 'cuda') throw new InputError(`--provider must be cpu or cuda, got "${String(provider)}"`);
  const threads = o['threads'] === undefined || o['threads'] === 'auto' ? 'auto' : intOption(o['threads'], 'threads');
  if (threads !== 'auto' && threads < 1) throw new InputError(`--threads must be a positive integer or auto, got ${threads}`);
  return { executionProvider: provider, intraOpThreads: threads } as const;
}

const RUNTIME_FLAGS = { provider: { type: 'string' }, threads: { type: 'string' } } as const;

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

/** A one-line progress bar on a terminal; nothing when stderr is not a TTY. */
function progressBar(label: string): { update(done: number, total: number): void; end(): void } {
  if (!process.stderr.isTTY) return { update() {}, end() {} };
  const t0 = performance.now();
  let last = 0;
  return {
    update(done, total) {
      const now = performance.now();
      if (now - last < 100 && done < total) return;
      last = now;
      const width = 30;
      const filled = total > 0 ? Math.round((width * done) / total) : width;
      const rate = done / Math.max(1e-3, (now - t0) / 1000);
      process.stderr.write(`\r${label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${total} tokens, ${rate.toFixed(0)} tok/s`);
    },
    end() {
      process.stderr.write('\n');
    },
  };
}

async function cmdIngest(args: string[]): Promise<void> {
  const o = parse(args, {
    model: { type: 'string' },
    store: { type: 'string' },
    'text-file': { type: 'string' },
    'ids-file': { type: 'string' },
    'doc-id': { type: 'string' },
    tenant: { type: 'string' },
    'chunk-tokens': { type: 'string' },
    numerics: { type: 'string' },
    ...RUNTIME_FLAGS,
  });
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
    const bar = progressBar(`csa2: encoding ${documentId}`);
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
      [
        `document: ${out.documentId}`,
        `tenant: ${tenant}`,
        `tokens: ${out.tokens}`,
        `reused tokens: ${out.reusedTokens}`,
        `bytes written: ${out.bytesWritten} (${out.chunksWritten} chunks written, ${out.chunksSkipped} already stored)`,
        `artifact bytes: ${out.artifactBytes} (${(out.artifactBytes / out.tokens).toFixed(1)} per token on the store)`,
        `global-cache bytes per token: ${out.bytesPerToken}`,
        `time: ${seconds.toFixed(2)} s (${((out.tokens - out.reusedTokens) / seconds).toFixed(0)} tokens/s encoded)`,
      ].join('\n') + '\n',
    );
  } finally {
    await engine.close();
  }
}

async function readConfigArg(o: Record<string, string | boolean | undefined>): Promise<{ config: ModelConfig; source: string }> {
  if (typeof o['model'] === 'string') return { config: await readModelConfigFile(`${o['model']}/config.json`), source: `${o['model']}/config.json` };
  if (typeof o['config'] === 'string') return { config: await readModelConfigFile(o['config']), source: o['config'] };
  throw new UsageError('give --model DIR or --config FILE');
}

async function cmdInspect(args: string[]): Promise<void> {
  const o = parse(args, { model: { type: 'string' }, config: { type: 'string' } });
  const { config, source } = await readConfigArg(o);
  const plan = buildLayerPlan(config);
  const lines: string[] = [`config: ${source}`, '', 'layer  mode     ratio  kv-src  idx-src  candidates'];
  for (const e of plan.entries) {
    const cand = e.isCandidateSource ? 'source' : e.usesCandidates ? 'uses' : '';
    lines.push(
      `${String(e.layer).padStart(5)}  ${e.mode.padEnd(7)}  ${String(e.compressRatio).padStart(5)}  ${String(e.kvSource ?? '-').padStart(6)}  ${String(e.indexSource ?? '-').padStart(7)}  ${cand}`,
    );
  }
  const counts = Object.entries(plan.counts).map(([k, v]) => `${k} ${v}`).join(', ');
  lines.push('', `layers: ${config.numLayers} (${counts}); encoder/decoder split at layer ${plan.decoderStart ?? 'none'}`);
  lines.push(`parameters: ${parameterCount(config, plan).toLocaleString('en-US')}`);
  lines.push(`global-cache bytes per token: ${globalCacheBytesPerToken(config, plan)}`);
  lines.push(`sliding-window bytes (all layers, fixed): ${windowCacheBytes(config).toLocaleString('en-US')}`);
  const unsupported = unsupportedSettings(config);
  if (unsupported.length > 0) lines.push(`not runnable here: ${unsupported.map((u) => `${u.field} (${u.reason})`).join('; ')}`);
  process.stdout.write(lines.join('\n') + '\n');
}

async function cmdInitModel(args: string[]): Promise<void> {
  const o = parse(args, { config: { type: 'string' }, seed: { type: 'string' }, out: { type: 'string' } });
  if (typeof o['config'] !== 'string' || typeof o['out'] !== 'string') throw new UsageError('--config FILE and --out DIR are required');
  let json: unknown;
  try {
    json = JSON.parse(await readFile(o['config'], 'utf8'));
  } catch (cause) {
    throw new ConfigError(o['config'], `cannot read JSON: ${(cause as Error).message}`, { cause });
  }
  parseModelConfig(json);
  const info = await initModel(json, { seed: intOption(o['seed'], 'seed'), outDir: o['out'] });
  process.stdout.write(
    `wrote ${info.weightsPath} (${info.parameterCount.toLocaleString('en-US')} parameters, ${info.bytes.toLocaleString('en-US')} bytes) and ${info.configPath}\n` +
      info.overrides.map((v) => `  set ${v.field}: ${JSON.stringify(v.from)} -> ${JSON.stringify(v.to)}\n`).join(''),
  );
}

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case 'generate':
        await cmdGenerate(rest);
        return 0;
      case 'inspect':
        await cmdInspect(rest);
        return 0;
      case 'ingest':
        await cmdIngest(rest);
        return 0;
      case 'init-model':
        await cmdInitModel(rest);
        return 0;
      case 'gc':
        return await cmdGc(rest);
      case undefined:
      case '--help':
      case '-h':
      case 'help':
        process.stdout.write(USAGE + '\n');
        return command === undefined ? 2 : 0;
      default:
        throw new UsageError(`unknown command "${command}"`);
    }
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`csa2: ${err.message}\n${USAGE}\n`);
      return 2;
    }
    if (err instanceof Csa2Error) {
      process.stderr.write(`csa2: error: ${err.message}\n`);
      return 1;
    }
    throw err;
  }
}
