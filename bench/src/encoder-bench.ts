/**
 * @module encoder-bench
 * `npm run bench -- encoder`: what an encoder worker delivers, per execution provider, in one run on
 * one machine. For each model (the seeded dim-1024 bench model, the served model) and provider
 * (CPU, CUDA) it opens an engine as the encoder worker does (warm-up included, not timed) and ingests
 * a document of each length into a fresh filesystem store: encoder tokens/s over the whole ingest
 * (the encode, the artifact's chunks and manifest written, the stored encoder tail), and the
 * achieved FLOP/s from the FLOP count (flops.ts encodeFlops) against the machine's measured matmul
 * rate: the CPU's fp32 rate (ceiling.ts) and, on CUDA, the device's bf16 tensor-core rate, measured
 * by a chain of bf16 MatMuls that stay on the device (only a vector crosses to it and a scalar back).
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  GraphBuilder,
  SeededRandom,
  buildLayerPlan,
  f32,
  graphIoBytes,
  openGraphSession,
  ortProfileFiles,
  summarizeOrtProfiles,
  type OrtProfileSummary,
  readModelConfigFile,
  DEFAULT_RUNTIME_OPTIONS,
  type ExecutionProvider,
  type RuntimeOptions,
} from '@csa2/core';
import { Engine } from '@csa2/engine';
import { ensureSeededCheckpoint } from './checkpoint-cache.js';
import { measureMatmulCeiling } from './ceiling.js';
import { encodeFlops } from './flops.js';
import { machineFacts } from './machine.js';
import { BENCH_1024_CONFIG } from './model-bench.js';
import { fmtSig, fmtTokens, markdownTable } from './table.js';
import { UsageError, tokenCount, type BenchIo, type BenchSuite, type OptionValues } from './suite.js';

const REPO_ROOT = new URL('../../', import.meta.url);
const SERVED_MODEL_DIR = join(REPO_ROOT.pathname, 'models', 'v41-mini-128k');

type ModelKey = '1024' | 'served';
type EncoderPath = 'layers' | 'graph';
const PATHS: readonly EncoderPath[] = ['layers', 'graph'];
const MODEL_KEYS: readonly ModelKey[] = ['1024', 'served'];

export interface EncoderBenchOptions {
  readonly models: readonly ModelKey[];
  readonly providers: readonly ExecutionProvider[];
  /** Encoder paths per provider ('auto': the provider's default, layers on the CPU and the graph on CUDA). */
  readonly paths: readonly EncoderPath[] | 'auto';
  readonly lengths: readonly number[];
  /** Rows of one encode run (EngineOptions.encoderRows), each a run of its own ('auto': the engine's default). */
  readonly encoderRows: readonly number[] | 'auto';
  /** Intra-op threads on the CPU provider. */
  readonly cpuThreads: number | 'auto';
  /** The CPU provider ingests documents up to this length only (its hours at 128K tokens on a wide model). */
  readonly cpuMaxTokens: number;
  readonly seed: number;
  readonly cacheRoot: string;
  /** Profile every engine's sessions (RuntimeOptions.profilePrefix) and report the operator times. */
  readonly profile: boolean;
}

/** A run that failed (the engine's open, or one ingest): the bench goes on with the next and reports it. */
export interface EncoderBenchFailure {
  readonly model: string;
  readonly label: string;
  /** The document's length, or null when the engine did not open. */
  readonly tokens: number | null;
  readonly error: string;
}

/** The onnxruntime profile of one engine of the bench: its warm-up and every ingest it ran. */
export interface EncoderProfile {
  readonly model: string;
  readonly label: string;
  readonly summary: OrtProfileSummary;
}

export interface EncoderBenchRow {
  readonly model: string;
  readonly provider: ExecutionProvider;
  readonly path: EncoderPath;
  /** Rows of one encode run (the engine's chunk and prefill span). */
  readonly encoderRows: number;
  readonly tokens: number;
  readonly ms: number;
  readonly tokensPerSecond: number;
  readonly flops: number;
  readonly achievedTflops: number;
  /** Achieved FLOP/s over the provider's measured matmul rate. */
  readonly ofCeiling: number;
  readonly cpuFallbackGraphs: readonly string[];
  /** Graph runs of the ingest, and the bytes they took in and gave back (host↔device traffic under CUDA) per token. */
  readonly graphRuns: number;
  readonly ioBytesPerToken: number;
  /** The artifact's bytes per token (what must cross at the least). */
  readonly artifactBytesPerToken: number;
  /** Milliseconds in each block step (summed over layers and spans), the compress-at-end and head. */
  readonly steps: Readonly<Record<string, number>>;
}

const STEP_ORDER = ['encoder-graph', 'attn-in', 'compress', 'indexer', 'attention', 'sinkhorn', 'attn-out', 'ffn', 'compress-at-end', 'head'] as const;

/**
 * The device's bf16 matmul rate: `depth` chained [M, K]·[K, K] bf16 MatMuls (fp32 accumulation) in
 * one graph run whose input is one row (expanded on the device) and whose output is a scalar, so the
 * run is the GEMMs and a launch. TFLOP/s of the best of `runs`.
 */
export async function measureBf16MatmulRate(
  runtime: RuntimeOptions,
  shape: { m: number; k: number; depth: number } = { m: 8192, k: 4096, depth: 16 },
  runs = 10,
): Promise<number> {
  const { m, k, depth } = shape;
  const g = new GraphBuilder('bf16_matmul_chain');
  const x = g.input('x', 'float32', [1, k]);
  const rng = new SeededRandom(20261207);
  const w = new Float32Array(k * k);
  for (let i = 0; i < w.length; i++) w[i] = (rng.nextUniform() * 2 - 1) / Math.sqrt(k);
  const wb = g.cast(g.weight('w', w, [k, k]), 'bfloat16');
  let h = g.cast(g.op('Expand', [x, g.ints([m, k])]), 'bfloat16');
  for (let i = 0; i < depth; i++) h = g.matmul(h, wb);
  g.output(g.op('ReduceSum', [g.cast(h, 'float32')], { keepdims: 0 }), 'y', 'float32', []);
  const session = await openGraphSession('bf16_matmul_chain', g.toBytes(), runtime, 1);
  try {
    const feeds = { x: f32(new Float32Array(k).fill(0.01), [1, k]) };
    for (let i = 0; i < 3; i++) await session.run(feeds);
    let best = Infinity;
    for (let i = 0; i < runs; i++) {
      const t = performance.now();
      await session.run(feeds);
      best = Math.min(best, performance.now() - t);
    }
    return (2 * m * k * k * depth) / (best * 1e9);
  } finally {
    await session.dispose();
  }
}

function randomIds(n: number, vocab: number, seed: number): number[] {
  const rng = new SeededRandom(seed);
  return Array.from({ length: n }, () => 3 + Math.floor(rng.nextUniform() * (vocab - 3)));
}

async function modelDir(key: ModelKey, opts: EncoderBenchOptions, io: BenchIo): Promise<{ name: string; dir: string }> {
  if (key === 'served') return { name: 'v41-mini-128k (served)', dir: SERVED_MODEL_DIR };
  // the bench model's config with a context that holds the longest document (max_seq_len sizes no weight)
  // and the byte-level vocabulary of 256, whose tokenizer the engine has built in (an engine opens only
  // with a tokenizer; the encoder's work does not depend on the vocabulary)
  const longest = Math.max(...opts.lengths);
  const base = JSON.parse(readFileSync(BENCH_1024_CONFIG, 'utf8')) as { max_seq_len: number };
  mkdirSync(opts.cacheRoot, { recursive: true });
  const ctx = Math.max(longest, base.max_seq_len);
  const configPath = join(opts.cacheRoot, `v41-bench-1024-vocab256-ctx${ctx}.json`);
  writeFileSync(configPath, `${JSON.stringify({ ...base, vocab_size: 256, max_seq_len: ctx }, null, 2)}\n`);
  const ck = await ensureSeededCheckpoint(configPath, { seed: opts.seed, cacheRoot: opts.cacheRoot, log: (l) => io.log(`[v41-bench-1024] ${l}`) });
  return { name: 'v41-bench-1024', dir: ck.dir };
}

export async function runEncoderBench(
  opts: EncoderBenchOptions,
  io: BenchIo,
): Promise<{ rows: EncoderBenchRow[]; ceilings: Map<ExecutionProvider, number>; profiles: EncoderProfile[]; failures: EncoderBenchFailure[] }> {
  const ceilings = new Map<ExecutionProvider, number>();
  const failures: EncoderBenchFailure[] = [];
  const failed = (model: string, label: string, tokens: number | null, err: unknown): void => {
    const error = (err instanceof Error ? err.message : String(err)).split('\n')[0] as string;
    failures.push({ model, label, tokens, error });
    io.log(`[encoder] ${model} ${label}${tokens === null ? '' : ` ${fmtTokens(tokens)}`}: FAILED: ${error}`);
  };
  const providers: ExecutionProvider[] = [];
  for (const p of opts.providers) {
    if (p === 'cuda') {
      let tflops: number;
      try {
        tflops = await measureBf16MatmulRate({ ...DEFAULT_RUNTIME_OPTIONS, executionProvider: 'cuda' });
      } catch (err) {
        failed('(every model)', 'cuda', null, err); // no CUDA session opens here: the provider's runs are left out
        continue;
      }
      io.log(`[encoder] CUDA bf16 matmul: ${tflops.toFixed(1)} TFLOP/s`);
      ceilings.set('cuda', tflops);
    } else {
      const threads = opts.cpuThreads === 'auto' ? machineFacts().cores : opts.cpuThreads;
      const c = await measureMatmulCeiling({ shapes: [{ m: 512, k: 1024, n: 4096 }], threads, budgetMsPerShape: 500 });
      io.log(`[encoder] CPU fp32 matmul (${threads} threads): ${(c.best.gflops / 1000).toFixed(2)} TFLOP/s`);
      ceilings.set('cpu', c.best.gflops / 1000);
    }
    providers.push(p);
  }
  const rows: EncoderBenchRow[] = [];
  const profiles: EncoderProfile[] = [];
  for (const key of opts.models) {
    const { name, dir } = await modelDir(key, opts, io);
    const config = await readModelConfigFile(join(dir, 'config.json'));
    const plan = buildLayerPlan(config);
    const runs = providers.flatMap((p) => {
      const paths: readonly EncoderPath[] = opts.paths === 'auto' ? [p === 'cuda' ? 'graph' : 'layers'] : opts.paths;
      const spans: readonly (number | undefined)[] = opts.encoderRows === 'auto' ? [undefined] : opts.encoderRows;
      return paths.flatMap((x) => spans.map((n) => [p, x, n] as const));
    });
    for (const [provider, path, encoderRows] of runs) {
      const storeDir = mkdtempSync(join(tmpdir(), 'csa2-encoder-bench-'));
      const profilePrefix = opts.profile ? join(storeDir, 'profile-') : null;
      const t0 = performance.now();
      let engine: Engine;
      try {
        engine = await Engine.open({
          modelDir: dir,
          store: pathToFileURL(storeDir).href,
          // nodes on the CPU under CUDA are allowed here and named in the table, not refused
          runtime: { executionProvider: provider, intraOpThreads: provider === 'cpu' ? opts.cpuThreads : 1, cudaCpuFallback: 'allow', profilePrefix },
          encoder: path,
          ...(encoderRows !== undefined ? { encoderRows } : {}),
          warmUp: true,
        });
      } catch (err) {
        failed(name, `${provider} ${path}${encoderRows !== undefined ? ` ${encoderRows} rows` : ''}`, null, err);
        rmSync(storeDir, { recursive: true, force: true });
        continue;
      }
      const spanRows = engine.model.options.chunkTokens;
      const label = `${provider} ${path} ${spanRows} rows`;
      io.log(`[encoder] ${name} ${label}: engine open and warm in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
      try {
        const info = engine.info();
        for (const len of opts.lengths) {
          if (provider === 'cpu' && len > opts.cpuMaxTokens) {
            io.log(`[encoder] ${name} cpu: ${fmtTokens(len)} is beyond --encoder-cpu-max; skipped`);
            continue;
          }
          if (len > config.maxSeqLen) {
            io.log(`[encoder] ${name}: ${fmtTokens(len)} is beyond max_seq_len ${config.maxSeqLen}; skipped`);
            continue;
          }
          const ids = randomIds(len, config.vocabSize, opts.seed * 1000 + len);
          io.log(`[encoder] ${name} ${provider}: ingesting ${fmtTokens(len)} tokens`);
          const steps: Record<string, number> = {};
          const add = (what: string, ms: number): void => void (steps[what] = (steps[what] ?? 0) + ms);
          engine.model.timer = { layer: () => undefined, other: add, step: add };
          const io0 = graphIoBytes();
          const t0 = performance.now();
          try {
            await engine.ingest({ tenant: 'bench', documentId: `doc-${len}`, tokenIds: ids });
          } catch (err) {
            failed(name, label, len, err);
            continue;
          } finally {
            engine.model.timer = null;
          }
          const ms = performance.now() - t0;
          const io1 = graphIoBytes();
          const flops = encodeFlops(config, plan, len);
          const achievedTflops = flops / (ms * 1e9);
          const row: EncoderBenchRow = {
            model: name,
            provider,
            path,
            encoderRows: spanRows,
            tokens: len,
            ms,
            tokensPerSecond: (len * 1000) / ms,
            flops,
            achievedTflops,
            ofCeiling: achievedTflops / (ceilings.get(provider) ?? Number.NaN),
            cpuFallbackGraphs: info.cudaCpuFallbackGraphs,
            graphRuns: io1.runs - io0.runs,
            ioBytesPerToken: (io1.inputs - io0.inputs + io1.outputs - io0.outputs) / len,
            artifactBytesPerToken: info.bytesPerToken,
            steps,
          };
          rows.push(row);
          io.log(`[encoder] ${name} ${label} ${fmtTokens(len)}: ${row.tokensPerSecond.toFixed(0)} tok/s (${(ms / 1000).toFixed(2)} s)`);
        }
      } finally {
        await engine.close();
        if (profilePrefix !== null) profiles.push({ model: name, label, summary: summarizeOrtProfiles(ortProfileFiles(profilePrefix), profilePrefix) });
        rmSync(storeDir, { recursive: true, force: true });
      }
    }
  }
  return { rows, ceilings, profiles, failures };
}

export function renderEncoderTable(rows: readonly EncoderBenchRow[], ceilings: ReadonlyMap<ExecutionProvider, number>): string {
  const ceilingText = [...ceilings].map(([p, t]) => `${p}: ${fmtSig(t)} TFLOP/s (${p === 'cuda' ? 'bf16 tensor cores' : 'fp32'})`).join('; ');
  const table = markdownTable(
    [
      { header: 'model', align: 'left' },
      { header: 'provider', align: 'left' },
      { header: 'encoder', align: 'left' },
      { header: 'rows a run' },
      { header: 'tokens' },
      { header: 'ingest s' },
      { header: 'tok/s' },
      { header: 'TFLOP' },
      { header: 'TFLOP/s' },
      { header: 'of matmul rate' },
      { header: 'graph runs' },
      { header: 'graph I/O B/token' },
      { header: 'artifact B/token' },
    ],
    rows.map((r) => [
      r.model,
      r.provider,
      r.path,
      String(r.encoderRows),
      fmtTokens(r.tokens),
      (r.ms / 1000).toFixed(2),
      r.tokensPerSecond.toFixed(0),
      fmtSig(r.flops / 1e12),
      fmtSig(r.achievedTflops),
      `${(r.ofCeiling * 100).toPrecision(3)} %`,
      String(r.graphRuns),
      fmtSig(r.ioBytesPerToken),
      fmtSig(r.artifactBytesPerToken),
    ]),
  );
  const fallbacks = [...new Set(rows.flatMap((r) => r.cpuFallbackGraphs))];
  const stepTable = markdownTable(
    [
      { header: 'model', align: 'left' },
      { header: 'provider', align: 'left' },
      { header: 'encoder', align: 'left' },
      { header: 'rows a run' },
      { header: 'tokens' },
      ...STEP_ORDER.map((s) => ({ header: `${s} s` })),
      { header: 'rest s' },
    ],
    rows.map((r) => {
      const sum = STEP_ORDER.reduce((a, s) => a + (r.steps[s] ?? 0), 0);
      return [
        r.model,
        r.provider,
        r.path,
        String(r.encoderRows),
        fmtTokens(r.tokens),
        ...STEP_ORDER.map((s) => ((r.steps[s] ?? 0) / 1000).toFixed(2)),
        ((r.ms - sum) / 1000).toFixed(2),
      ];
    }),
  );
  return [
    `Matmul rates measured in this run: ${ceilingText}.`,
    '',
    table,
    '',
    'Where the ingest time goes (block steps summed over layers; rest: scheduling, artifact writes, the TypeScript between steps):',
    '',
    stepTable,
    ...(fallbacks.length > 0 ? ['', `Graphs with nodes on the CPU under CUDA: ${fallbacks.join(', ')}`] : []),
  ].join('\n');
}

/** Per profiled engine: the runs' time beside the summed node time, and the operator types that took the most. */
export function renderEncoderProfiles(profiles: readonly EncoderProfile[], top = 12): string {
  const parts: string[] = ['onnxruntime profiles (each engine: warm-up and every ingest; under CUDA a node time is host time, a launch or a wait):'];
  for (const p of profiles) {
    const s = p.summary;
    const executions = s.ops.reduce((a, o) => a + o.executions, 0);
    parts.push(
      '',
      `${p.model} ${p.label}: ${s.runs} runs, ${fmtSig(s.runMs / 1000)} s; ${executions} node executions, ${fmtSig(s.nodeMs / 1000)} s (${s.runMs > 0 ? ((100 * s.nodeMs) / s.runMs).toFixed(0) : '–'} % of the runs)`,
      `sessions with the most run time: ${s.sessions
        .slice(0, 4)
        .map((x) => `${x.name} ${x.runs} runs ${fmtSig(x.runMs / 1000)} s, ${fmtSig(x.bytes / 1e9 / Math.max(x.runs, 1))} GB a run`)
        .join('; ')}`,
      '',
      markdownTable(
        [
          { header: 'operator', align: 'left' },
          { header: 'provider', align: 'left' },
          { header: 'executions' },
          { header: 's' },
          { header: 'of node time' },
          { header: 'GB read + written' },
          { header: 'GFLOP' },
        ],
        s.ops
          .slice(0, top)
          .map((o) => [
            o.op,
            o.provider,
            String(o.executions),
            fmtSig(o.ms / 1000),
            `${((100 * o.ms) / Math.max(s.nodeMs, 1e-9)).toFixed(1)} %`,
            fmtSig(o.bytes / 1e9),
            o.flops > 0 ? fmtSig(o.flops / 1e9) : '–',
          ]),
      ),
    );
  }
  return parts.join('\n');
}

function parseList<T extends string>(text: string | undefined, allowed: readonly T[], name: string, dflt: readonly T[]): readonly T[] {
  if (text === undefined) return dflt;
  const items = text.split(',').map((s) => s.trim());
  for (const it of items) if (!(allowed as readonly string[]).includes(it)) throw new UsageError(`--${name}: "${it}" is not one of ${allowed.join(', ')}`);
  return items as T[];
}

export function parseEncoderBenchOptions(values: OptionValues): EncoderBenchOptions {
  const str = (k: string): string | undefined => (typeof values[k] === 'string' ? (values[k] as string) : undefined);
  const quick = values['quick'] === true;
  const lengths =
    str('encoder-lengths')
      ?.split(',')
      .map((s) => tokenCount(s, 'encoder-lengths')) ?? (quick ? [1024] : [8192, 32768, 131072]);
  const threadsText = str('encoder-threads') ?? 'auto';
  const cpuThreads = threadsText === 'auto' ? 'auto' : Number(threadsText);
  if (cpuThreads !== 'auto' && !(Number.isInteger(cpuThreads) && cpuThreads >= 1))
    throw new UsageError(`--encoder-threads: a positive integer or auto, got "${threadsText}"`);
  const seed = Number(str('seed') ?? '1');
  if (!Number.isInteger(seed) || seed < 0) throw new UsageError(`--seed: a non-negative integer, got "${str('seed')}"`);
  return {
    models: parseList(str('encoder-models'), MODEL_KEYS, 'encoder-models', quick ? ['served'] : MODEL_KEYS),
    providers: parseList(str('provider'), ['cpu', 'cuda'] as const, 'provider', ['cpu']),
    paths: str('encoder-paths') === undefined || str('encoder-paths') === 'auto' ? 'auto' : parseList(str('encoder-paths'), PATHS, 'encoder-paths', PATHS),
    lengths,
    encoderRows: encoderRowsOption(str('encoder-rows')),
    cpuThreads,
    cpuMaxTokens: str('encoder-cpu-max') === undefined ? Infinity : tokenCount(str('encoder-cpu-max') as string, 'encoder-cpu-max'),
    seed,
    cacheRoot: str('cache-dir') ?? join(REPO_ROOT.pathname, '.csa2', 'bench'),
    profile: values['encoder-profile'] === true,
  };
}

function encoderRowsOption(text: string | undefined): readonly number[] | 'auto' {
  if (text === undefined || text === 'auto') return 'auto';
  return text.split(',').map((t) => {
    const n = tokenCount(t.trim(), 'encoder-rows');
    if (n < 16) throw new UsageError(`--encoder-rows: at least 16 rows a run, got "${t.trim()}"`);
    return n;
  });
}

export const encoderSuite: BenchSuite = {
  name: 'encoder',
  summary:
    'encoder tokens/s (whole ingest) per execution provider at 8K/32K/128K tokens, dim-1024 bench model and served model, against the measured matmul rate',
  options: {
    provider: { type: 'string', valueName: 'cpu,cuda', description: 'execution providers, side by side in this run', defaultText: 'cpu' },
    'encoder-models': { type: 'string', valueName: '1024,served', description: 'models to ingest with', defaultText: '1024,served' },
    'encoder-paths': {
      type: 'string',
      valueName: 'layers,graph',
      description: 'encoder paths on every provider: through the layers, or one graph run a chunk',
      defaultText: 'auto (layers on the CPU, graph on CUDA)',
    },
    'encoder-lengths': { type: 'string', valueName: 'N,N,...', description: 'document lengths in tokens (1K = 1024)', defaultText: '8K,32K,128K' },
    'encoder-rows': {
      type: 'string',
      valueName: 'N,N|auto',
      description: 'rows of one encode run (the engine chunk and prefill span), each a run of its own',
      defaultText: "auto (the engine's: 4096 on CUDA)",
    },
    'encoder-cpu-max': { type: 'string', valueName: 'N', description: 'the CPU provider ingests documents up to N tokens only', defaultText: 'no limit' },
    'encoder-threads': { type: 'string', valueName: 'N|auto', description: 'intra-op threads on the CPU provider', defaultText: 'auto (all cores)' },
    seed: { type: 'string', valueName: 'S', description: 'seed of the documents and of the seeded checkpoint', defaultText: '1' },
    'cache-dir': { type: 'string', valueName: 'DIR', description: 'where seeded checkpoints are cached', defaultText: '.csa2/bench' },
    'encoder-profile': {
      type: 'boolean',
      description: "onnxruntime's per-node profile of each engine (warm-up and ingests): time per operator type and provider (slows the runs)",
    },
    quick: { type: 'boolean', description: 'smoke run: the served model, 1K tokens' },
  },
  async run(values, io) {
    const opts = parseEncoderBenchOptions(values);
    const { rows, ceilings, profiles, failures } = await runEncoderBench(opts, io);
    io.out(`${renderEncoderTable(rows, ceilings)}\n`);
    if (profiles.length > 0) io.out(`\n${renderEncoderProfiles(profiles)}\n`);
    if (failures.length > 0) {
      io.out(
        `\nFailed runs:\n\n${failures.map((f) => `- ${f.model} ${f.label}${f.tokens === null ? ' (engine open)' : ` ${fmtTokens(f.tokens)}`}: ${f.error}`).join('\n')}\n`,
      );
      throw new Error(`${failures.length} encoder bench run(s) failed (listed above)`);
    }
  },
};
