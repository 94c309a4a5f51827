/**
 * @module batch-bench
 * The `batch` suite: what continuous batching buys (issue "batching", Measure), side by side in one run.
 *
 * 1. Decode at batch B = 1, 2, 4, … (one forward call per step with B decode rows, csa2-core's
 *    Csa2Model.forward), per model and context: aggregate tokens/s, the ratio to B = 1, and each
 *    sequence's inter-token latency (step time) p50 / p99. The B sequences are forks of one prefilled
 *    and frozen context (CED prefill, R = 128; frozen as the engine's document cache holds a document,
 *    so the forks read its rows in place), so every batch size decodes the same contexts; they sample with
 *    distinct seeds, so their selections diverge.
 * 2. Prefill interference through the engine's scheduler (Engine, what the workers run): `streams`
 *    generations decode; then a long prompt arrives; their inter-token latency p50 / p99 before and
 *    while it is prefilled, and how long its prefill took.
 *
 * Models: tiny (bench/configs/v41-tiny-40k.json, 6 layers, dim 64) and 1024 (v41-bench-1024.json, the
 * released 40-layer schedule at dim 1024), seeded checkpoints cached like the model suite's.
 */
import { join } from 'node:path';
import { Sampler, TokenHistory, loadModel, type Csa2Model, type Sequence, type Span } from '@csa2/core';
import { Engine } from '@csa2/engine';
import { ensureSeededCheckpoint } from './checkpoint-cache.js';
import { BENCH_1024_CONFIG, DEFAULT_CACHE_ROOT, seededTokenIds } from './model-bench.js';
import { peakRssBytes } from './machine.js';
import { percentile } from './stats.js';
import { UsageError, positiveIntOption, type BenchIo, type BenchSuite, type OptionValues } from './suite.js';
import { fmtDuration, fmtGiB, fmtSig, fmtTokens, markdownTable } from './table.js';

const TINY_CONFIG = join(BENCH_1024_CONFIG, '..', 'v41-tiny-40k.json');

export interface BatchBenchOptions {
  readonly models: readonly ('tiny' | '1024')[];
  readonly contexts: readonly number[];
  readonly batchSizes: readonly number[];
  /** Decode steps per batch size at least… */
  readonly steps: number;
  /** …and at least this much measured time (ms), within the model's context. */
  readonly minMs: number;
  readonly streams: number;
  readonly interferenceTokens: number;
  readonly seed: number;
  readonly cacheRoot: string;
}

export const DEFAULT_BATCH_BENCH_OPTIONS: BatchBenchOptions = {
  models: ['tiny', '1024'],
  contexts: [1024, 16384],
  batchSizes: [1, 2, 4, 8, 16, 32],
  steps: 12,
  minMs: 2000,
  streams: 8,
  interferenceTokens: 16384,
  seed: 1,
  cacheRoot: DEFAULT_CACHE_ROOT,
};

interface BatchRow {
  readonly batch: number;
  readonly stepMs: readonly number[];
  readonly tokensPerS: number;
}

async function prefillContext(model: Csa2Model, ids: readonly number[]): Promise<{ seq: Sequence; logits: Float32Array }> {
  const seq = model.createSequence();
  const R = Math.min(128, ids.length);
  const logits = await model.decoderReplay(seq, await model.encode(seq, ids, { replayTokens: R, keepRows: R }));
  // frozen, as the engine's document cache holds a document: the forks read its rows in place
  seq.freeze();
  return { seq, logits };
}

/**
 * Decodes at least `steps` steps, and on until `minMs` of them were measured (at most `maxSteps` ≥ `steps`), with
 * `batch` forks of the prefilled context in one forward call a step. A tiny model's step at B = 1 is ~3 ms:
 * 12 steps alone measured ~40 ms, and its ratios moved by up to 3× between runs.
 */
async function decodeBatch(
  model: Csa2Model,
  base: { seq: Sequence; logits: Float32Array },
  batch: number,
  steps: number,
  seed: number,
  minMs = 0,
  maxSteps = steps,
): Promise<BatchRow> {
  const L = model.config.numLayers;
  const runs = Array.from({ length: batch }, (_, b) => {
    const seq = base.seq.fork();
    const sampler = new Sampler({ temperature: 1, topP: 1, seed: seed + b }, model.config.vocabSize);
    return { seq, sampler, history: new TokenHistory(seq.tokens.view(), seq.length), logits: base.logits };
  });
  const stepMs: number[] = [];
  let measured = 0;
  for (let i = 0; i < maxSteps && (i < steps || measured < minMs); i++) {
    const spans: Span[] = runs.map((r) => {
      const id = r.sampler.next(r.logits, r.history, i);
      r.history.push(id);
      r.seq.tokens.push(id);
      return { seq: r.seq, layout: { kind: 'step' }, p0: r.seq.length - 1, p1: r.seq.length, l0: 0, l1: L, input: null, logits: true };
    });
    const t0 = performance.now();
    const outs = await model.forward(spans);
    const ms = performance.now() - t0;
    stepMs.push(ms);
    measured += ms;
    outs.forEach((o, b) => ((runs[b] as (typeof runs)[number]).logits = o.logits as Float32Array));
  }
  const total = stepMs.reduce((a, b) => a + b, 0);
  return { batch, stepMs, tokensPerS: (batch * stepMs.length * 1000) / total };
}

interface InterferenceResult {
  readonly streams: number;
  readonly promptTokens: number;
  readonly beforeMs: readonly number[];
  readonly duringMs: readonly number[];
  readonly prefillMs: number;
}

/** `streams` generations decode; a long prompt arrives; their token gaps before and during its prefill. */
async function interference(modelDir: string, streams: number, promptTokens: number, seed: number, io: BenchIo, tag: string): Promise<InterferenceResult> {
  const engine = await Engine.open({ modelDir, warmUp: true });
  try {
    const vocab = engine.info().vocabSize;
    const gaps: Array<{ atMs: number; gapMs: number }> = [];
    const last = new Map<number, number>();
    const ac = new AbortController();
    const gens = Array.from({ length: streams }, (_, s) =>
      engine.generate(
        {
          promptIds: seededTokenIds(seed + s, 16, vocab),
          maxTokens: Math.min(4096, engine.info().maxSeqLen - 64),
          sampling: { temperature: 1, topP: 1, seed: s },
          ignoreEos: true,
        },
        {
          signal: ac.signal,
          onToken: (t) => {
            const now = performance.now();
            const prev = last.get(s);
            if (prev !== undefined && t.index > 1) gaps.push({ atMs: now, gapMs: now - prev });
            last.set(s, now);
          },
        },
      ),
    );
    // settle into steady decoding, then measure a baseline
    await new Promise((r) => setTimeout(r, 3000));
    const baselineFrom = performance.now();
    await new Promise((r) => setTimeout(r, 4000));
    const arrive = performance.now();
    io.log(`${tag} a ${fmtTokens(promptTokens)}-token prompt arrives while ${streams} streams decode`);
    const long = await engine.generate({
      promptIds: seededTokenIds(seed + 99, promptTokens, vocab),
      maxTokens: 1,
      sampling: { temperature: 0, topP: 1, seed: 0 },
      ignoreEos: true,
    });
    const done = performance.now();
    ac.abort();
    await Promise.all(gens);
    return {
      streams,
      promptTokens,
      beforeMs: gaps.filter((g) => g.atMs >= baselineFrom && g.atMs < arrive).map((g) => g.gapMs),
      duringMs: gaps.filter((g) => g.atMs >= arrive && g.atMs <= done).map((g) => g.gapMs),
      prefillMs: long.timings.prefillMs,
    };
  } finally {
    await engine.close();
  }
}

export async function runBatchBench(opts: BatchBenchOptions, io: BenchIo): Promise<string> {
  const out: string[] = [];
  for (const key of opts.models) {
    const config = key === 'tiny' ? TINY_CONFIG : BENCH_1024_CONFIG;
    const ck = await ensureSeededCheckpoint(config, { seed: opts.seed, cacheRoot: opts.cacheRoot, log: (l) => io.log(`[${key}] ${l}`) });
    const model = await loadModel(ck.dir);
    const name = key === 'tiny' ? 'v41-tiny-40k (6 layers, dim 64)' : 'v41-bench-1024 (40 layers, dim 1024)';
    try {
      await model.warmUp();
      for (const N of opts.contexts) {
        if (N + opts.steps > model.config.maxSeqLen)
          throw new UsageError(`${key}: context ${N} + ${opts.steps} steps exceeds max_seq_len ${model.config.maxSeqLen}`);
        const tag = `[batch ${key} ${fmtTokens(N)}]`;
        io.log(`${tag} prefilling the shared context`);
        const t0 = performance.now();
        const base = await prefillContext(model, seededTokenIds(opts.seed, N, model.config.vocabSize));
        io.log(`${tag} prefilled in ${fmtDuration(performance.now() - t0)}`);
        await decodeBatch(model, base, Math.min(2, Math.max(...opts.batchSizes)), 2, opts.seed); // warm the batched shapes
        const rows: BatchRow[] = [];
        for (const B of opts.batchSizes) {
          const row = await decodeBatch(model, base, B, opts.steps, opts.seed, opts.minMs, Math.max(opts.steps, model.config.maxSeqLen - N - 1));
          io.log(`${tag} B=${B}: ${fmtSig(row.tokensPerS)} tok/s over ${row.stepMs.length} steps, step p50 ${fmtSig(percentile(row.stepMs, 50))} ms`);
          rows.push(row);
        }
        const one = rows.find((r) => r.batch === 1)?.tokensPerS ?? (rows[0] as BatchRow).tokensPerS;
        out.push(
          `### Decode at batch B — ${name}, context ${fmtTokens(N)} (peak RSS ${fmtGiB(peakRssBytes())})\n\n` +
            markdownTable(
              [
                { header: 'batch', align: 'right' },
                { header: 'aggregate tok/s', align: 'right' },
                { header: '× batch 1', align: 'right' },
                { header: 'inter-token p50 ms', align: 'right' },
                { header: 'inter-token p99 ms', align: 'right' },
                { header: 'steps', align: 'right' },
              ],
              rows.map((r) => [
                String(r.batch),
                fmtSig(r.tokensPerS),
                `${fmtSig(r.tokensPerS / one)}×`,
                fmtSig(percentile(r.stepMs, 50)),
                fmtSig(percentile(r.stepMs, 99)),
                String(r.stepMs.length),
              ]),
            ),
        );
        io.out(out[out.length - 1] as string);
      }
    } finally {
      await model.dispose();
    }
    if (opts.streams > 0 && opts.interferenceTokens > 0) {
      const promptTokens = Math.min(opts.interferenceTokens, model.config.maxSeqLen - 64);
      const r = await interference(ck.dir, opts.streams, promptTokens, opts.seed, io, `[interference ${key}]`);
      const p = (xs: readonly number[], q: number) => (xs.length === 0 ? NaN : percentile(xs, q));
      const text =
        `### A ${fmtTokens(r.promptTokens)}-token prompt arriving while ${r.streams} streams decode — ${name} (engine scheduler)\n\n` +
        markdownTable(
          [
            { header: '', align: 'left' },
            { header: 'gaps', align: 'right' },
            { header: 'inter-token p50 ms', align: 'right' },
            { header: 'inter-token p99 ms', align: 'right' },
          ],
          [
            ['streams alone', String(r.beforeMs.length), fmtSig(p(r.beforeMs, 50)), fmtSig(p(r.beforeMs, 99))],
            ['during the prefill', String(r.duringMs.length), fmtSig(p(r.duringMs, 50)), fmtSig(p(r.duringMs, 99))],
            ['ratio', '', `${fmtSig(p(r.duringMs, 50) / p(r.beforeMs, 50))}×`, `${fmtSig(p(r.duringMs, 99) / p(r.beforeMs, 99))}×`],
          ],
        ) +
        `\nThe prompt's prefill (time to its first token) took ${fmtDuration(r.prefillMs)}.\n`;
      out.push(text);
      io.out(text);
    }
  }
  return out.join('\n');
}

function listOption(values: OptionValues, name: string, fallback: readonly number[]): number[] {
  const v = values[name];
  if (v === undefined) return [...fallback];
  const xs = String(v)
    .split(',')
    .map((s) => Number(s.trim().replace(/k$/i, '000')));
  if (xs.length === 0 || xs.some((x) => !Number.isSafeInteger(x) || x < 1))
    throw new UsageError(`--${name} must be a list of positive integers, got ${String(v)}`);
  return xs;
}

export const batchSuite: BenchSuite = {
  name: 'batch',
  summary: 'decode throughput and inter-token latency at batch 1..32 (one forward a step), and a long prompt arriving while streams decode (engine scheduler)',
  options: {
    'batch-models': { type: 'string', description: 'models: tiny, 1024', valueName: 'M,M', defaultText: 'tiny,1024' },
    'batch-contexts': { type: 'string', description: 'context lengths in tokens', valueName: 'N,N', defaultText: '1024,16384' },
    'batch-sizes': { type: 'string', description: 'decode batch sizes', valueName: 'B,B', defaultText: '1,2,4,8,16,32' },
    'batch-steps': { type: 'string', description: 'decode steps per batch size, at least', valueName: 'N', defaultText: '12' },
    'batch-min-seconds': {
      type: 'string',
      description: 'measured decode time per batch size, at least (more steps if needed)',
      valueName: 'S',
      defaultText: '2',
    },
    'batch-streams': { type: 'string', description: 'streams decoding when the long prompt arrives (0: skip that part)', valueName: 'N', defaultText: '8' },
    'batch-prompt-tokens': { type: 'string', description: 'tokens of the long prompt', valueName: 'N', defaultText: '16384' },
  },
  async run(values, io) {
    const models = (
      values['batch-models'] === undefined
        ? ['tiny', '1024']
        : String(values['batch-models'])
            .split(',')
            .map((s) => s.trim())
    ) as Array<'tiny' | '1024'>;
    for (const m of models) if (m !== 'tiny' && m !== '1024') throw new UsageError(`--batch-models: unknown model "${m}" (tiny, 1024)`);
    const streams = values['batch-streams'] === '0' ? 0 : positiveIntOption(values, 'batch-streams', DEFAULT_BATCH_BENCH_OPTIONS.streams);
    await runBatchBench(
      {
        ...DEFAULT_BATCH_BENCH_OPTIONS,
        models,
        contexts: listOption(values, 'batch-contexts', DEFAULT_BATCH_BENCH_OPTIONS.contexts),
        batchSizes: listOption(values, 'batch-sizes', DEFAULT_BATCH_BENCH_OPTIONS.batchSizes),
        steps: positiveIntOption(values, 'batch-steps', DEFAULT_BATCH_BENCH_OPTIONS.steps),
        minMs: values['batch-min-seconds'] === '0' ? 0 : positiveIntOption(values, 'batch-min-seconds', DEFAULT_BATCH_BENCH_OPTIONS.minMs / 1000) * 1000,
        streams,
        interferenceTokens: positiveIntOption(values, 'batch-prompt-tokens', DEFAULT_BATCH_BENCH_OPTIONS.interferenceTokens),
      },
      io,
    );
  },
};
