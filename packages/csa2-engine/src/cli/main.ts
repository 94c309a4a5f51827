/**
 * @module cli/main
 * The `csa2` command line: generate, inspect, init-model. User errors print one clear line and exit 1
 * (usage errors exit 2); only unexpected failures print a stack.
 */
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

const USAGE = `usage:
  csa2 generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) --max-tokens N
                [--temperature T] [--top-p P] [--seed S] [--replay R | --exact]
                [--force-ids 5,9,...] [--dump FILE] [--numerics bf16|fp32]
                [--provider cpu|cuda] [--threads N|auto]
  csa2 inspect (--model DIR | --config FILE)
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
    ...RUNTIME_FLAGS,
  });
  if (typeof o['model'] !== 'string') throw new UsageError('--model DIR is required');
  if ((o['prompt'] === undefined) === (o['prompt-ids'] === undefined)) throw new UsageError('give exactly one of --prompt and --prompt-ids');
  if (o['exact'] === true && o['replay'] !== undefined) throw new UsageError('--replay and --exact exclude each other');
  const numerics = (o['numerics'] ?? 'bf16') as string;
  if (numerics !== 'bf16' && numerics !== 'fp32') throw new InputError(`--numerics must be bf16 or fp32, got "${numerics}"`);
  const maxTokens = intOption(o['max-tokens'], 'max-tokens');
  const exact = o['exact'] === true;
  const replayTokens = intOption(o['replay'], 'replay', DEFAULT_REPLAY_TOKENS);
  const forceIds = typeof o['force-ids'] === 'string' ? idList(o['force-ids'], 'force-ids') : undefined;

  const t0 = performance.now();
  const engine = await EngineHost.start({ modelDir: o['model'], numerics: numerics as NumericsMode, runtime: runtimeOptions(o) });
  try {
    const loadMs = performance.now() - t0;
    const promptIds = typeof o['prompt-ids'] === 'string' ? idList(o['prompt-ids'], 'prompt-ids') : await engine.tokenize(o['prompt'] as string);
    if (promptIds.length === 0) throw new InputError('the prompt is empty');
    const result = await engine.generate(
      {
        promptIds,
        maxTokens,
        ...(exact ? { exact: true } : { replayTokens }),
        sampling: { temperature: numberOption(o['temperature'], 'temperature', 0), topP: numberOption(o['top-p'], 'top-p', 1), seed: intOption(o['seed'], 'seed', 0) },
        ...(forceIds !== undefined ? { forceIds } : {}),
        keepLogits: typeof o['dump'] === 'string',
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
      `csa2: ${promptIds.length} prompt tokens, ${result.tokens.length} generated (${result.finishReason}); ` +
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
      case 'init-model':
        await cmdInitModel(rest);
        return 0;
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
