/**
 * @module model-bench
 * The `model` suite: prefill and decode throughput of csa2-core models, side by side with the machine's
 * matmul ceiling measured in the same run.
 *
 * Per model and context N (random token ids, seeded):
 *   exact prefill  — `prefillExact` over N tokens (every layer over the whole prompt);
 *   encode         — `encode` over the same N tokens from an empty sequence (encoder layers + the first
 *                    decoder KV source's compressor): the CED prefill work; encode ÷ exact is its speedup;
 *   CED            — encode plus `decoderReplay` over the last R tokens (time to first logits on the CED path);
 *   decode         — `step` × decodeSteps after the exact prefill (greedy), mean tok/s and p50 ms/token.
 * Each phase's analytic FLOPs (flops.ts) over its time gives GFLOP/s, also shown as a fraction of the
 * best ceiling GFLOP/s. Only public @csa2/core APIs are used, so the suite keeps working while the
 * model's internals change.
 */
import { availableParallelism } from 'node:os';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  DEFAULT_MODEL_OPTIONS,
  DEFAULT_RUNTIME_OPTIONS,
  SeededRandom,
  argmax,
  loadModel,
  parameterCount,
  resolveIntraOpThreads,
  type Csa2Model,
  type RuntimeOptions,
} from '@csa2/core';
import { fixturesRoot } from '@csa2/core/testing';
import { DEFAULT_CEILING_SHAPES, measureMatmulCeiling, type CeilingResult, type MatmulShape } from './ceiling.js';
import { ensureSeededCheckpoint } from './checkpoint-cache.js';
import { decodeStepFlops, decoderReplayFlops, encodeFlops, exactPrefillFlops } from './flops.js';
import { machineFacts, peakRssBytes, type MachineFacts } from './machine.js';
import { progressReporter } from './progress.js';
import { UsageError, type BenchIo, type BenchSuite, type OptionValues } from './suite.js';
import { fmtDuration, fmtGiB, fmtPercent, fmtSig, fmtTokens, markdownTable, type Column } from './table.js';
import { median } from './stats.js';

/** bench/ (this file runs from bench/dist/). */
const BENCH_DIR = fileURLToPath(new URL('../', import.meta.url));
export const DEFAULT_CACHE_ROOT = join(BENCH_DIR, '..', '.csa2', 'bench');

export type ModelKey = 'tiny' | '1024';
export type GraphOptimization = RuntimeOptions['graphOptimization'];

export interface ModelBenchOptions {
  readonly models: readonly ModelKey[];
  /** Context lengths in tokens; null: each model's own defaults. Capped at max_seq_len − decodeSteps. */
  readonly contexts: readonly number[] | null;
  readonly decodeSteps: number;
  /** Intra-op threads of the model's sessions; 'auto' is csa2-core's own choice (resolveIntraOpThreads). */
  readonly threads: number | 'auto';
  readonly allowSpinning: boolean;
  readonly graphOptimization: GraphOptimization;
  readonly chunkTokens: number;
  readonly attentionBudgetValues: number;
  /** Decoder replay length R of the CED column. */
  readonly replayTokens: number;
  /** Seed of the prompt token ids and of seeded checkpoints. */
  readonly seed: number;
  readonly ceilingShapes: readonly MatmulShape[];
  readonly ceilingThreads: number;
  readonly ceilingBudgetMsPerShape: number;
  /** Where seeded checkpoints are cached. */
  readonly cacheRoot: string;
  /**
   * Each context is measured again (fresh sequences, same tokens) while less than this much time went into
   * it, up to `maxRepeats` runs; every phase reports its fastest run, which is what a shared, noisy
   * machine can still measure reproducibly. Long runs (the 40-layer model) happen once.
   */
  readonly repeatUntilMs: number;
  readonly maxRepeats: number;
}

/**
 * csa2-core's default bound on the float32 values live in one attention graph run (2^24: a whole 256-row
 * chunk of the 1024 model in one run). The attention graphs are two sessions shared by all layers and
 * gather one block of 64 keys at a time, so this bounds ~64 MiB per arena, not per layer.
 */
export const BENCH_ATTENTION_BUDGET_VALUES = DEFAULT_MODEL_OPTIONS.attentionBudgetValues;

export const DEFAULT_MODEL_BENCH_OPTIONS: ModelBenchOptions = Object.freeze({
  models: ['tiny', '1024'] as const,
  contexts: null,
  decodeSteps: 16,
  threads: 'auto' as const,
  allowSpinning: DEFAULT_RUNTIME_OPTIONS.allowSpinning,
  graphOptimization: DEFAULT_RUNTIME_OPTIONS.graphOptimization,
  chunkTokens: DEFAULT_MODEL_OPTIONS.chunkTokens,
  attentionBudgetValues: BENCH_ATTENTION_BUDGET_VALUES,
  replayTokens: 128,
  seed: 1,
  ceilingShapes: DEFAULT_CEILING_SHAPES,
  ceilingThreads: availableParallelism(),
  ceilingBudgetMsPerShape: 1000,
  cacheRoot: DEFAULT_CACHE_ROOT,
  repeatUntilMs: 5000,
  maxRepeats: 5,
});

// ------------------------------------------------------------------ models

interface PreparedCheckpoint {
  readonly dir: string;
  /** Where the weights come from, for the table header. */
  readonly provenance: string;
  readonly createMs: number;
  readonly bytes: number | null;
}

interface BenchModelSpec {
  readonly key: ModelKey;
  readonly name: string;
  readonly defaultContexts: readonly number[];
  prepare(opts: ModelBenchOptions, io: BenchIo): Promise<PreparedCheckpoint>;
}

export const BENCH_1024_CONFIG = join(BENCH_DIR, 'configs', 'v41-bench-1024.json');

const MODEL_SPECS: Readonly<Record<ModelKey, BenchModelSpec>> = {
  tiny: {
    key: 'tiny',
    name: 'deepseek-v41-tiny-a',
    defaultContexts: [48, 128, 240],
    async prepare() {
      return { dir: join(fixturesRoot(), 'deepseek-v41-tiny-a'), provenance: 'fixture (official reference weights)', createMs: 0, bytes: null };
    },
  },
  '1024': {
    key: '1024',
    name: 'v41-bench-1024',
    defaultContexts: [1024, 4096, 16384],
    async prepare(opts, io) {
      const ck = await ensureSeededCheckpoint(BENCH_1024_CONFIG, { seed: opts.seed, cacheRoot: opts.cacheRoot, log: (l) => io.log(`[v41-bench-1024] ${l}`) });
      const provenance = `seeded checkpoint (initModel seed ${opts.seed}, ${ck.created ? `made now in ${fmtDuration(ck.createMs)}` : 'cached'})`;
      return { dir: ck.dir, provenance, createMs: ck.createMs, bytes: ck.bytes };
    },
  },
};

export const MODEL_KEYS: readonly ModelKey[] = ['tiny', '1024'];

// ------------------------------------------------------------------ results

export interface PhaseResult {
  readonly tokens: number;
  readonly ms: number;
  readonly tokensPerS: number;
  /** Analytic FLOPs of the phase (flops.ts). */
  readonly flops: number;
  readonly gflops: number;
  /** gflops ÷ the best ceiling GFLOP/s. */
  readonly ceilingFraction: number;
}

export interface DecodeResult extends PhaseResult {
  readonly stepMs: readonly number[];
  readonly p50Ms: number;
}

export interface ContextRow {
  /** The context asked for, and the one run (smaller when capped by max_seq_len). */
  readonly requested: number;
  readonly context: number;
  readonly capped: boolean;
  /** How many times the context was measured (each phase reports its fastest run). */
  readonly runs: number;
  readonly exact: PhaseResult;
  /** null when the schedule has no encoder–decoder split. */
  readonly encode: PhaseResult | null;
  readonly replay: PhaseResult | null;
  /** encode + replay over N tokens. */
  readonly ced: PhaseResult | null;
  /** encode tok/s ÷ exact tok/s. */
  readonly encodeSpeedup: number | null;
  readonly decode: DecodeResult;
  /** Peak RSS of the process after this row. */
  readonly peakRssBytes: number;
}

export interface ModelResult {
  readonly key: ModelKey;
  readonly name: string;
  readonly dir: string;
  readonly provenance: string;
  readonly numLayers: number;
  readonly dim: number;
  readonly parameterCount: number;
  readonly checkpointBytes: number | null;
  readonly maxSeqLen: number;
  readonly decoderStart: number | null;
  /** Intra-op threads the model's sessions use (resolved from 'auto'). */
  readonly threads: number;
  readonly loadMs: number;
  readonly createMs: number;
  readonly warmupMs: number;
  /** Why some contexts were capped, or null. */
  readonly capNote: string | null;
  readonly rows: readonly ContextRow[];
}

export interface ModelBenchResult {
  readonly machine: MachineFacts;
  readonly ceiling: CeilingResult;
  readonly options: ModelBenchOptions;
  readonly models: readonly ModelResult[];
  readonly totalMs: number;
}

// ------------------------------------------------------------------ running

function phase(tokens: number, ms: number, flops: number, ceiling: CeilingResult): PhaseResult {
  const gflops = flops / (ms * 1e6);
  return { tokens, ms, tokensPerS: (tokens * 1000) / ms, flops, gflops, ceilingFraction: gflops / ceiling.best.gflops };
}

/** N seeded token ids in [0, vocab): the same seed gives the same prompt (longer prompts extend shorter ones). */
export function seededTokenIds(seed: number, count: number, vocabSize: number): number[] {
  const rng = new SeededRandom(seed);
  return Array.from({ length: count }, () => rng.nextU32() % vocabSize);
}

/** The contexts a model runs: requested ones capped at `cap`, duplicates removed, order kept. */
export function resolveContexts(requested: readonly number[], cap: number): Array<{ requested: number; context: number; capped: boolean }> {
  const out: Array<{ requested: number; context: number; capped: boolean }> = [];
  for (const r of requested) {
    const context = Math.min(r, cap);
    if (out.some((o) => o.context === context)) continue;
    out.push({ requested: r, context, capped: context < r });
  }
  return out;
}

interface ContextSample {
  readonly exactMs: number;
  readonly stepMs: readonly number[];
  readonly encodeMs: number | null;
  readonly replayMs: number | null;
}

/** One measurement of every phase at one context, on fresh sequences. */
async function sampleContext(model: Csa2Model, tag: string, ids: readonly number[], opts: ModelBenchOptions, io: BenchIo): Promise<ContextSample> {
  const N = ids.length;
  const seq = model.createSequence();
  let progress = progressReporter(`${tag} exact prefill`, io.log);
  let t0 = performance.now();
  let logits = await model.prefillExact(seq, ids, progress.update);
  const exactMs = performance.now() - t0;
  progress.finish();

  const stepMs: number[] = [];
  for (let i = 0; i < opts.decodeSteps; i++) {
    const id = argmax(logits);
    t0 = performance.now();
    logits = await model.step(seq, id);
    stepMs.push(performance.now() - t0);
  }

  let encodeMs: number | null = null;
  let replayMs: number | null = null;
  if (model.plan.decoderStart !== null) {
    const R = Math.min(opts.replayTokens, N);
    const seq2 = model.createSequence();
    progress = progressReporter(`${tag} encode`, io.log);
    t0 = performance.now();
    const stream = await model.encode(seq2, ids, { replayTokens: R, keepRows: R, onProgress: progress.update });
    encodeMs = performance.now() - t0;
    progress.finish();
    t0 = performance.now();
    await model.decoderReplay(seq2, stream);
    replayMs = performance.now() - t0;
  }
  return { exactMs, stepMs, encodeMs, replayMs };
}

const sum = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0);

async function benchContext(
  model: Csa2Model,
  label: string,
  ctx: { requested: number; context: number; capped: boolean },
  opts: ModelBenchOptions,
  ceiling: CeilingResult,
  io: BenchIo,
): Promise<ContextRow> {
  const { config, plan } = model;
  const N = ctx.context;
  const ids = seededTokenIds(opts.seed, N, config.vocabSize);
  const samples: ContextSample[] = [];
  const t0 = performance.now();
  while (samples.length === 0 || (performance.now() - t0 < opts.repeatUntilMs && samples.length < opts.maxRepeats)) {
    const tag = `[${label} ${fmtTokens(N)}${samples.length > 0 ? ` run ${samples.length + 1}` : ''}]`;
    samples.push(await sampleContext(model, tag, ids, opts, io));
  }

  const exact = phase(N, Math.min(...samples.map((s) => s.exactMs)), exactPrefillFlops(config, plan, N), ceiling);
  let decodeFlops = 0;
  for (let i = 0; i < opts.decodeSteps; i++) decodeFlops += decodeStepFlops(config, plan, N + i);
  const fastestDecode = samples.reduce((a, b) => (sum(b.stepMs) < sum(a.stepMs) ? b : a));
  const decode: DecodeResult = {
    ...phase(opts.decodeSteps, sum(fastestDecode.stepMs), decodeFlops, ceiling),
    stepMs: fastestDecode.stepMs,
    p50Ms: median(samples.flatMap((s) => s.stepMs)),
  };
  let encode: PhaseResult | null = null;
  let replay: PhaseResult | null = null;
  let ced: PhaseResult | null = null;
  const tag = `[${label} ${fmtTokens(N)}]`;
  if (plan.decoderStart !== null) {
    const R = Math.min(opts.replayTokens, N);
    const encodeMs = Math.min(...samples.map((s) => s.encodeMs as number));
    const replayMs = Math.min(...samples.map((s) => s.replayMs as number));
    const cedMs = Math.min(...samples.map((s) => (s.encodeMs as number) + (s.replayMs as number)));
    encode = phase(N, encodeMs, encodeFlops(config, plan, N), ceiling);
    replay = phase(R, replayMs, decoderReplayFlops(config, plan, N, R), ceiling);
    ced = phase(N, cedMs, encode.flops + replay.flops, ceiling);
  }
  io.log(
    `${tag} ${samples.length} run(s): exact prefill ${fmtSig(exact.tokensPerS)} tok/s; decode ${fmtSig(decode.tokensPerS)} tok/s (p50 ${fmtSig(decode.p50Ms)} ms)` +
      (encode === null ? '' : `; encode ${fmtSig(encode.tokensPerS)} tok/s (${fmtSig(encode.tokensPerS / exact.tokensPerS)}× exact)`),
  );
  return {
    ...ctx,
    runs: samples.length,
    exact,
    encode,
    replay,
    ced,
    encodeSpeedup: encode === null ? null : encode.tokensPerS / exact.tokensPerS,
    decode,
    peakRssBytes: peakRssBytes(),
  };
}

async function benchModel(spec: BenchModelSpec, opts: ModelBenchOptions, ceiling: CeilingResult, io: BenchIo): Promise<ModelResult> {
  const prepared = await spec.prepare(opts, io);
  const runtime: RuntimeOptions = {
    ...DEFAULT_RUNTIME_OPTIONS,
    intraOpThreads: opts.threads,
    allowSpinning: opts.allowSpinning,
    graphOptimization: opts.graphOptimization,
  };
  io.log(`[${spec.name}] loading ${prepared.dir}`);
  let t0 = performance.now();
  const model = await loadModel(prepared.dir, { runtime, chunkTokens: opts.chunkTokens, attentionBudgetValues: opts.attentionBudgetValues });
  const loadMs = performance.now() - t0;
  try {
    const { config, plan } = model;
    io.log(`[${spec.name}] loaded in ${fmtDuration(loadMs)}; peak RSS ${fmtGiB(peakRssBytes())}`);
    const cap = config.maxSeqLen - opts.decodeSteps;
    if (cap < 1) throw new UsageError(`${spec.name}: max_seq_len ${config.maxSeqLen} leaves no room for ${opts.decodeSteps} decode steps`);
    const contexts = resolveContexts(opts.contexts ?? spec.defaultContexts, cap);
    const capNote = contexts.some((c) => c.capped)
      ? `contexts capped at ${cap} tokens (max_seq_len ${config.maxSeqLen} − ${opts.decodeSteps} decode steps): ` +
        contexts
          .filter((c) => c.capped)
          .map((c) => `${fmtTokens(c.requested)} → ${c.context}`)
          .join(', ')
      : null;

    // warm-up: first runs of every session at full chunk size (allocator arenas, thread pools) are not
    // measured: csa2-core's own warm-up (one chunk through exact prefill, a decode step and encode), then
    // one decoder replay (the CED column's path)
    t0 = performance.now();
    await model.warmUp();
    if (plan.decoderStart !== null) {
      const w = Math.min(opts.replayTokens, cap);
      const warmIds = seededTokenIds(opts.seed + 1, w, config.vocabSize);
      const ws = model.createSequence();
      await model.decoderReplay(ws, await model.encode(ws, warmIds, { replayTokens: w, keepRows: w }));
    }
    const warmupMs = performance.now() - t0;

    const rows: ContextRow[] = [];
    for (const c of contexts) rows.push(await benchContext(model, spec.name, c, opts, ceiling, io));
    return {
      key: spec.key,
      name: spec.name,
      dir: prepared.dir,
      provenance: prepared.provenance,
      numLayers: config.numLayers,
      dim: config.dim,
      parameterCount: parameterCount(config, plan),
      checkpointBytes: prepared.bytes,
      maxSeqLen: config.maxSeqLen,
      decoderStart: plan.decoderStart,
      threads: resolveIntraOpThreads(runtime, config.dim),
      loadMs,
      createMs: prepared.createMs,
      warmupMs,
      capNote,
      rows,
    };
  } finally {
    await model.dispose();
  }
}

/** Called as results arrive, so that long runs show their tables before the whole suite ends. */
export interface ModelBenchHooks {
  onCeiling?(ceiling: CeilingResult, machine: MachineFacts): void | Promise<void>;
  onModel?(model: ModelResult, soFar: ModelBenchResult): void | Promise<void>;
}

/** Runs the suite: the ceiling first, then each model in order. Progress goes to io.log. */
export async function runModelBench(opts: ModelBenchOptions, io: BenchIo, hooks: ModelBenchHooks = {}): Promise<ModelBenchResult> {
  const t0 = performance.now();
  const machine = machineFacts();
  io.log(`matmul ceiling: ${opts.ceilingShapes.map((s) => `${s.m}×${s.k}·${s.k}×${s.n}`).join(', ')} on ${opts.ceilingThreads} threads`);
  const ceiling = await measureMatmulCeiling({
    shapes: opts.ceilingShapes,
    threads: opts.ceilingThreads,
    runtime: { ...DEFAULT_RUNTIME_OPTIONS, allowSpinning: opts.allowSpinning, graphOptimization: opts.graphOptimization },
    budgetMsPerShape: opts.ceilingBudgetMsPerShape,
  });
  io.log(`matmul ceiling: best ${fmtSig(ceiling.best.gflops)} GFLOP/s (M=${ceiling.best.m})`);
  await hooks.onCeiling?.(ceiling, machine);
  const models: ModelResult[] = [];
  for (const key of opts.models) {
    const m = await benchModel(MODEL_SPECS[key], opts, ceiling, io);
    models.push(m);
    await hooks.onModel?.(m, { machine, ceiling, options: opts, models: [...models], totalMs: performance.now() - t0 });
  }
  return { machine, ceiling, options: opts, models, totalMs: performance.now() - t0 };
}

// ------------------------------------------------------------------ printing

/** The model table's columns (the smoke test checks these). */
export function modelTableColumns(replayTokens: number): Column[] {
  return [
    { header: 'context', align: 'left' },
    { header: 'runs' },
    { header: 'exact prefill tok/s' },
    { header: 'exact GFLOP/s (% ceil)' },
    { header: 'encode tok/s' },
    { header: 'encode GFLOP/s (% ceil)' },
    { header: 'encode ÷ exact' },
    { header: `CED tok/s (encode + replay ${replayTokens})` },
    { header: 'decode tok/s' },
    { header: 'decode p50 ms/tok' },
    { header: 'decode GFLOP/s (% ceil)' },
    { header: 'peak RSS' },
  ];
}

const gflopsCell = (p: PhaseResult): string => `${fmtSig(p.gflops)} (${fmtPercent(p.ceilingFraction, 2)})`;
const DASH = '—';

export function renderCeilingTable(ceiling: CeilingResult, machine: MachineFacts): string {
  const rows = ceiling.shapes.map((s) => [`${s.m}×${s.k} · ${s.k}×${s.n}`, String(s.runs), fmtSig(s.bestMs), fmtSig(s.medianMs), fmtSig(s.gflops)]);
  return [
    `### matmul ceiling (fp32 ONNX MatMul through onnxruntime-node ${machine.onnxruntimeVersion}, ${ceiling.threads} intra-op threads)`,
    '',
    markdownTable(
      [{ header: 'M×K · K×N', align: 'left' }, { header: 'runs' }, { header: 'best ms' }, { header: 'median ms' }, { header: 'GFLOP/s (best)' }],
      rows,
    ),
    '',
    `ceiling = ${fmtSig(ceiling.best.gflops)} GFLOP/s (M=${ceiling.best.m}); "% ceil" below is a fraction of it.`,
  ].join('\n');
}

export function renderModelTable(m: ModelResult, result: ModelBenchResult): string {
  const { machine, ceiling, options: o } = result;
  const params = m.parameterCount >= 1e6 ? `${fmtSig(m.parameterCount / 1e6)}M` : m.parameterCount.toLocaleString('en-US');
  const size = m.checkpointBytes === null ? '' : `, ${(m.checkpointBytes / 1e9).toFixed(2)} GB bf16`;
  const lines = [
    `### ${m.name}: ${m.numLayers} layers, dim ${m.dim}, ${params} parameters${size}; ${m.provenance}`,
    '',
    `- machine: ${machine.cpuModel} · ${machine.cores} cores · ${fmtGiB(machine.totalMemoryBytes)} RAM · ${machine.platform} · node ${machine.nodeVersion} · ` +
      `onnxruntime-node ${machine.onnxruntimeVersion} · load average ${machine.loadAverage1m.toFixed(2)} at start (shared machine: timings are noisy)`,
    `- runtime: ${m.threads} intra-op thread${m.threads === 1 ? '' : 's'}${o.threads === 'auto' ? ' (auto)' : ''} · spinning ${o.allowSpinning ? 'on' : 'off'} · ` +
      `graph optimization ${o.graphOptimization} · chunk ${o.chunkTokens} tokens · attention budget ${o.attentionBudgetValues} values` +
      (o.attentionBudgetValues === DEFAULT_MODEL_OPTIONS.attentionBudgetValues ? '' : ` (csa2-core's default: ${DEFAULT_MODEL_OPTIONS.attentionBudgetValues})`),
    `- ceiling: ${fmtSig(ceiling.best.gflops)} GFLOP/s (fp32 MatMul ${ceiling.best.m}×${ceiling.best.k}·${ceiling.best.k}×${ceiling.best.n}, ${ceiling.threads} threads); ` +
      `M=1: ${fmtSig(ceiling.shapes.find((s) => s.m === 1)?.gflops ?? Number.NaN)} GFLOP/s`,
    `- load ${fmtDuration(m.loadMs)}${m.createMs > 0 ? ` (+ ${fmtDuration(m.createMs)} making the checkpoint)` : ''} · warm-up ${fmtDuration(m.warmupMs)} · ` +
      `decode: ${o.decodeSteps} greedy steps after the exact prefill · encoder = layers 0..${m.decoderStart === null ? '?' : m.decoderStart - 1}` +
      (m.decoderStart === null ? '' : ` + layer ${m.decoderStart}'s compressor`),
  ];
  lines.push(
    `- each phase: the fastest of "runs" measurements (a context is measured again, on fresh sequences, while under ` +
      `${fmtDuration(o.repeatUntilMs)} went into it, at most ${o.maxRepeats}×); GFLOP/s = analytic model FLOPs (bench/src/flops.ts) ÷ time; ` +
      `peak RSS = process maximum so far`,
  );
  if (m.capNote !== null) lines.push(`- ${m.capNote}`);
  const rows = m.rows.map((r) => [
    `${fmtTokens(r.context)}${r.capped ? ` (capped from ${fmtTokens(r.requested)})` : ''}`,
    String(r.runs),
    fmtSig(r.exact.tokensPerS),
    gflopsCell(r.exact),
    r.encode === null ? DASH : fmtSig(r.encode.tokensPerS),
    r.encode === null ? DASH : gflopsCell(r.encode),
    r.encodeSpeedup === null ? DASH : `${fmtSig(r.encodeSpeedup)}×`,
    r.ced === null ? DASH : fmtSig(r.ced.tokensPerS),
    fmtSig(r.decode.tokensPerS),
    fmtSig(r.decode.p50Ms),
    gflopsCell(r.decode),
    fmtGiB(r.peakRssBytes),
  ]);
  lines.push('', markdownTable(modelTableColumns(o.replayTokens), rows));
  return lines.join('\n');
}

/** The whole suite's output: the ceiling table, then one table per model. */
export function renderModelBench(result: ModelBenchResult): string {
  const parts = [renderCeilingTable(result.ceiling, result.machine), ...result.models.map((m) => renderModelTable(m, result))];
  return `${parts.join('\n\n')}\n\n${renderTotal(result)}\n`;
}

function renderTotal(result: ModelBenchResult): string {
  return `(model suite: ${fmtDuration(result.totalMs)} in all)`;
}

// ------------------------------------------------------------------ command line

function positiveInt(text: string, name: string): number {
  const m = /^(\d+)([kK]?)$/.exec(text.trim());
  const n = m === null ? Number.NaN : Number(m[1]) * (m[2] === '' ? 1 : 1024);
  if (!Number.isSafeInteger(n) || n < 1) throw new UsageError(`--${name}: "${text}" is not a positive integer`);
  return n;
}

function stringOpt(values: OptionValues, name: string): string | undefined {
  const v = values[name];
  return typeof v === 'string' ? v : undefined;
}

/** Options from the command line (values as parsed by node:util parseArgs with `modelSuite.options`). */
export function parseModelBenchOptions(values: OptionValues): ModelBenchOptions {
  const d = DEFAULT_MODEL_BENCH_OPTIONS;
  const quick = values['quick'] === true;
  const modelsText = stringOpt(values, 'models');
  const models = modelsText === undefined ? d.models : modelsText.split(',').map((s) => s.trim());
  for (const k of models)
    if (!(MODEL_KEYS as readonly string[]).includes(k)) throw new UsageError(`--models: unknown model "${k}" (known: ${MODEL_KEYS.join(', ')})`);
  const contextsText = stringOpt(values, 'contexts');
  const contexts = contextsText !== undefined ? contextsText.split(',').map((s) => positiveInt(s, 'contexts')) : quick ? [1024] : d.contexts;
  const threadsText = stringOpt(values, 'threads');
  const spin = stringOpt(values, 'spin');
  if (spin !== undefined && spin !== 'on' && spin !== 'off') throw new UsageError(`--spin must be on or off, got "${spin}"`);
  const opt = stringOpt(values, 'graph-opt');
  const levels: readonly GraphOptimization[] = ['disabled', 'basic', 'extended', 'all'];
  if (opt !== undefined && !(levels as readonly string[]).includes(opt)) throw new UsageError(`--graph-opt must be one of ${levels.join(', ')}, got "${opt}"`);
  const intOr = (name: string, fallback: number): number => {
    const t = stringOpt(values, name);
    return t === undefined ? fallback : positiveInt(t, name);
  };
  return {
    ...d,
    models: models as ModelKey[],
    contexts,
    decodeSteps: intOr('decode-steps', d.decodeSteps),
    threads: threadsText === undefined || threadsText === 'auto' ? 'auto' : positiveInt(threadsText, 'threads'),
    allowSpinning: spin === undefined ? d.allowSpinning : spin === 'on',
    graphOptimization: (opt as GraphOptimization | undefined) ?? d.graphOptimization,
    chunkTokens: intOr('chunk-tokens', d.chunkTokens),
    attentionBudgetValues: intOr('attention-budget', d.attentionBudgetValues),
    replayTokens: intOr('replay', d.replayTokens),
    seed: intOr('seed', d.seed),
    ceilingThreads: intOr('ceiling-threads', d.ceilingThreads),
    cacheRoot: stringOpt(values, 'cache-dir') ?? d.cacheRoot,
    maxRepeats: intOr('max-repeats', d.maxRepeats),
  };
}

export const modelSuite: BenchSuite = {
  name: 'model',
  summary: 'exact prefill, encoder-only (CED) prefill and decode tok/s of tiny-a and a seeded 40-layer dim-1024 model, against the matmul ceiling',
  options: {
    models: { type: 'string', valueName: 'tiny,1024', description: `models to run (${MODEL_KEYS.join(', ')})`, defaultText: 'tiny,1024' },
    contexts: {
      type: 'string',
      valueName: 'N,N,...',
      description: 'context lengths in tokens (1K = 1024); capped at max_seq_len − decode steps',
      defaultText: 'tiny: 48,128,240; 1024: 1K,4K,16K',
    },
    'decode-steps': { type: 'string', valueName: 'N', description: 'decode steps timed after each exact prefill', defaultText: '16' },
    threads: {
      type: 'string',
      valueName: 'N|auto',
      description: "intra-op threads of the model's sessions",
      defaultText: "auto (csa2-core's choice: 1 below dim 512, else all cores)",
    },
    spin: {
      type: 'string',
      valueName: 'on|off',
      description: 'let idle intra-op threads spin',
      defaultText: DEFAULT_RUNTIME_OPTIONS.allowSpinning ? 'on' : 'off',
    },
    'graph-opt': {
      type: 'string',
      valueName: 'LEVEL',
      description: 'ORT graph optimization: disabled, basic, extended, all',
      defaultText: DEFAULT_RUNTIME_OPTIONS.graphOptimization,
    },
    'chunk-tokens': { type: 'string', valueName: 'N', description: 'token rows per forward chunk', defaultText: String(DEFAULT_MODEL_OPTIONS.chunkTokens) },
    'attention-budget': {
      type: 'string',
      valueName: 'N',
      description: `float32 values live in one attention graph run (csa2-core's default ${DEFAULT_MODEL_OPTIONS.attentionBudgetValues}); longer chunks run in row blocks`,
      defaultText: String(BENCH_ATTENTION_BUDGET_VALUES),
    },
    replay: { type: 'string', valueName: 'R', description: 'decoder replay tokens of the CED column', defaultText: '128' },
    seed: { type: 'string', valueName: 'S', description: 'seed of the prompt ids and of the seeded checkpoint', defaultText: '1' },
    'ceiling-threads': { type: 'string', valueName: 'N', description: 'intra-op threads of the matmul ceiling', defaultText: 'all cores' },
    'cache-dir': { type: 'string', valueName: 'DIR', description: 'where seeded checkpoints are cached', defaultText: '.csa2/bench' },
    'max-repeats': { type: 'string', valueName: 'N', description: 'measure a context up to N times while under 5 s went into it (1: once)', defaultText: '5' },
    json: { type: 'string', valueName: 'FILE', description: 'also write the raw results as JSON' },
    quick: { type: 'boolean', description: 'smoke run: contexts 1K only (tiny capped to 240)' },
  },
  async run(values, io) {
    const opts = parseModelBenchOptions(values);
    const json = stringOpt(values, 'json');
    // tables are printed as they are measured; the JSON file is rewritten after every model
    const result = await runModelBench(opts, io, {
      onCeiling: (ceiling, machine) => io.out(`${renderCeilingTable(ceiling, machine)}\n\n`),
      onModel: async (m, soFar) => {
        io.out(`${renderModelTable(m, soFar)}\n\n`);
        if (json !== undefined) await writeFile(json, `${JSON.stringify(soFar, null, 2)}\n`);
      },
    });
    io.out(`${renderTotal(result)}\n`);
    if (json !== undefined) {
      await writeFile(json, `${JSON.stringify(result, null, 2)}\n`);
      io.log(`wrote ${json}`);
    }
  },
};
