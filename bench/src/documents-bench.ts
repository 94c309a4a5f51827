/**
 * @module documents-bench
 * Time to first token for a question on a stored (ingested) document against prefilling the same
 * tokens from scratch, side by side in one run (issue "cache artifacts", Measure): ingest once, then
 *   - stored, fresh reader: a newly started engine, warmed up as a decoder worker is before it takes
 *     jobs; manifest + chunks fetched from the filesystem store and verified, encoder replay of the last
 *     R document tokens + the question, decoder replay of the last R tokens;
 *   - stored, cached chunks: the same with the engine's chunk cache warm (a decoder worker's repeat case);
 *   - cold CED prefill: encoder over all tokens + decoder replay of the last R (no artifact);
 *   - cold exact prefill: every layer over all tokens, as the official code does.
 * Models (`--doc-model`): `256`, a seeded 40-layer checkpoint with the released layer schedule at width
 * 256 (bench/configs/v41-bench-256-long.json; the released head and index widths are reduced, the ratios
 * are what this measures), or `tiny`, the 6-layer tiny-a architecture with a 40K context
 * (bench/configs/v41-tiny-40k.json), where a 32K-token exact prefill takes seconds rather than hours.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Engine } from '@csa2/engine';
import { ensureSeededCheckpoint } from './checkpoint-cache.js';
import { seededTokenIds } from './model-bench.js';
import type { BenchIo, BenchSuite, OptionValues } from './suite.js';
import { UsageError, positiveIntOption } from './suite.js';
import { fmtDuration, markdownTable } from './table.js';

const BENCH_DIR = join(dirname(fileURLToPath(import.meta.url)), '..');
/** The models this suite can run: the released schedule at width 256, or the 6-layer tiny architecture. */
export const DOCUMENTS_BENCH_MODELS = {
  '256': { config: join(BENCH_DIR, 'configs', 'v41-bench-256-long.json'), label: '40 layers, released schedule, dim 256' },
  tiny: { config: join(BENCH_DIR, 'configs', 'v41-tiny-40k.json'), label: '6 layers (tiny-a architecture), dim 64' },
} as const;
export type DocumentsBenchModel = keyof typeof DOCUMENTS_BENCH_MODELS;

export interface DocumentsBenchOptions {
  readonly docTokens: number;
  readonly questionTokens: number;
  readonly replayTokens: number;
  readonly cacheRoot: string;
  readonly skipExact: boolean;
  readonly model: DocumentsBenchModel;
}

interface Row {
  readonly path: string;
  readonly ttftMs: number;
}

/** Greedy sampling, for the suites that compare prefill paths. */
export const GREEDY = { temperature: 0, topP: 1, seed: 0 } as const;

/**
 * Runs `fn` with an engine on the seeded checkpoint of `model` and a temporary filesystem store (its URL
 * is passed on, for more engines on the same store); closes the engine and removes the store after.
 */
export async function withDocumentsEngine<T>(
  model: DocumentsBenchModel,
  cacheRoot: string,
  io: BenchIo,
  fn: (engine: Engine, env: { readonly modelDir: string; readonly storeUrl: string }) => Promise<T>,
): Promise<T> {
  const ckpt = await ensureSeededCheckpoint(DOCUMENTS_BENCH_MODELS[model].config, { seed: 1, cacheRoot, log: io.log });
  const storeDir = mkdtempSync(join(tmpdir(), 'csa2-bench-docs-'));
  const storeUrl = pathToFileURL(storeDir).href;
  const engine = await Engine.open({ modelDir: ckpt.dir, store: storeUrl });
  try {
    return await fn(engine, { modelDir: ckpt.dir, storeUrl });
  } finally {
    await engine.close();
    rmSync(storeDir, { recursive: true, force: true });
  }
}

export async function runDocumentsBench(opts: DocumentsBenchOptions, io: BenchIo): Promise<string> {
  return withDocumentsEngine(opts.model, opts.cacheRoot, io, async (engine, { modelDir, storeUrl }) => {
    const V = engine.model.config.vocabSize;
    const doc = seededTokenIds(7, opts.docTokens, V);
    const question = seededTokenIds(8, opts.questionTokens, V);
    io.log(`documents: ingesting ${opts.docTokens} tokens`);
    const t0 = performance.now();
    let lastLog = 0;
    const ing = await engine.ingest(
      { tenant: 'bench', documentId: 'doc', tokenIds: doc },
      {
        onProgress: (p) => {
          if (performance.now() - lastLog > 10_000) {
            lastLog = performance.now();
            io.log(`  encoded ${p.tokensDone}/${p.tokensTotal}`);
          }
        },
      },
    );
    const ingestMs = performance.now() - t0;
    const rows: Row[] = [];
    const first = async (on: Engine, req: Omit<Parameters<Engine['generate']>[0], 'maxTokens' | 'sampling'>) =>
      (await on.generate({ ...req, maxTokens: 1, sampling: GREEDY, ignoreEos: true })).timings.prefillMs;
    const stored = { promptIds: question, document: { tenant: 'bench', documentId: 'doc' }, replayTokens: opts.replayTokens };

    // a fresh engine (warmed up, as a decoder worker is) has an empty chunk cache: the first stored query
    // fetches and verifies every chunk
    const fresh = await Engine.open({ modelDir, store: storeUrl, warmUp: true });
    try {
      io.log('documents: stored document, fresh reader');
      rows.push({ path: 'stored document, chunks fetched + verified', ttftMs: await first(fresh, stored) });
      io.log('documents: stored document, cached chunks');
      rows.push({ path: 'stored document, chunk cache warm', ttftMs: await first(fresh, stored) });
    } finally {
      await fresh.close();
    }
    io.log('documents: cold CED prefill (encoder over everything + decoder replay)');
    rows.push({
      path: 'cold prefill, encoder + decoder replay',
      ttftMs: await first(engine, { promptIds: [...doc, ...question], replayTokens: opts.replayTokens }),
    });
    if (!opts.skipExact) {
      io.log('documents: cold exact prefill (every layer over everything)');
      rows.push({ path: 'cold prefill, exact (all layers)', ttftMs: await first(engine, { promptIds: [...doc, ...question], exact: true }) });
    }
    const base = rows.at(-1) as Row;
    const table = markdownTable(
      [{ header: 'time to first token', align: 'left' }, { header: 'TTFT' }, { header: `vs ${base.path.replace('cold prefill, ', '')}` }],
      rows.map((r) => [r.path, fmtDuration(r.ttftMs), `${(base.ttftMs / r.ttftMs).toFixed(1)}x faster`]),
    );
    return [
      `### Documents: a ${opts.questionTokens}-token question on a ${opts.docTokens}-token document (${DOCUMENTS_BENCH_MODELS[opts.model].label}; replay R = ${opts.replayTokens})`,
      '',
      `ingest: ${fmtDuration(ingestMs)} (${((opts.docTokens * 1000) / ingestMs).toFixed(0)} tokens/s), ${ing.artifactBytes.toLocaleString('en-US')} bytes on the store (${(ing.artifactBytes / ing.tokens).toFixed(1)} per token; global cache ${ing.bytesPerToken} per token at this width)`,
      '',
      table,
    ].join('\n');
  });
}

/** The `--doc-model` option (default '256'); UsageError for an unknown model. */
export function parseDocModel(values: OptionValues): DocumentsBenchModel {
  const model = (values['doc-model'] ?? '256') as string;
  if (!(model in DOCUMENTS_BENCH_MODELS)) throw new UsageError(`--doc-model takes ${Object.keys(DOCUMENTS_BENCH_MODELS).join(' or ')}, got "${model}"`);
  return model as DocumentsBenchModel;
}

export function parseDocumentsBenchOptions(values: OptionValues, cacheRoot: string): DocumentsBenchOptions {
  const int = (name: string, fallback: number): number => positiveIntOption(values, name, fallback);
  const quick = values['quick'] === true;
  return {
    model: parseDocModel(values),
    docTokens: int('doc-tokens', quick ? 2048 : 32768),
    questionTokens: int('question-tokens', 32),
    replayTokens: int('replay', 128),
    cacheRoot,
    skipExact: values['skip-exact'] === true,
  };
}

export const documentsSuite: BenchSuite = {
  name: 'documents',
  summary: 'time to first token for a question on a stored document vs cold prefill of the same tokens',
  options: {
    'doc-tokens': { type: 'string', description: 'document length in tokens', defaultText: '32768 (2048 with --quick)', valueName: 'N' },
    'question-tokens': { type: 'string', description: 'question length in tokens', defaultText: '32', valueName: 'N' },
    replay: { type: 'string', description: 'bounded replay R', defaultText: '128', valueName: 'R' },
    'skip-exact': { type: 'boolean', description: 'leave out the cold exact prefill (the slowest row)' },
    'doc-model': { type: 'string', description: 'model: 256 (40 layers, released schedule) or tiny (6 layers)', defaultText: '256', valueName: 'M' },
  },
  async run(values, io) {
    const cacheRoot = join(BENCH_DIR, '..', '.csa2', 'bench');
    io.out(await runDocumentsBench(parseDocumentsBenchOptions(values, cacheRoot), io));
  },
};
