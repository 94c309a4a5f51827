/**
 * @module replay-bench
 * Replay fidelity: how far bounded replay over the last R tokens lands from exact
 * generation, as R varies, on a released-schedule model. A document is ingested once; for each R a
 * question is answered from the stored document (encoder replay of the last R cached tokens + the
 * question, decoder replay of the last R tokens) with the exact run's tokens forced at every step, and
 * the next-token distributions are compared with the exact run's: mean and max KL(exact ‖ replay),
 * max |Δlogit|, and how often the greedy token agrees. Time to first token is printed beside it.
 */
import { argmax, klDivergence } from '@csa2/core';
import { DOCUMENTS_BENCH_MODELS, GREEDY, parseDocModel, withDocumentsEngine, type DocumentsBenchModel } from './documents-bench.js';
import { DEFAULT_CACHE_ROOT, seededTokenIds } from './model-bench.js';
import type { BenchIo, BenchSuite, OptionValues } from './suite.js';
import { positiveIntOption } from './suite.js';
import { fmtDuration, markdownTable } from './table.js';

export interface ReplayBenchOptions {
  readonly docTokens: number;
  readonly questionTokens: number;
  readonly steps: number;
  readonly replays: readonly number[];
  readonly model: DocumentsBenchModel;
  readonly cacheRoot: string;
}

export async function runReplayBench(opts: ReplayBenchOptions, io: BenchIo): Promise<string> {
  const spec = DOCUMENTS_BENCH_MODELS[opts.model];
  return withDocumentsEngine(opts.model, opts.cacheRoot, io, async (engine) => {
    const V = engine.model.config.vocabSize;
    const doc = seededTokenIds(11, opts.docTokens, V);
    const question = seededTokenIds(12, opts.questionTokens, V);
    io.log(`replay: ingesting ${opts.docTokens} tokens`);
    await engine.ingest({ tenant: 'bench', documentId: 'doc', tokenIds: doc });
    io.log('replay: exact generation over document + question');
    const exact = await engine.generate({
      promptIds: [...doc, ...question],
      maxTokens: opts.steps,
      sampling: GREEDY,
      exact: true,
      keepLogits: true,
      ignoreEos: true,
    });
    const rows: string[][] = [];
    for (const R of opts.replays) {
      io.log(`replay: R = ${R}`);
      // a warm-up query first, so the TTFT column does not include one-time session growth
      await engine.generate({
        promptIds: question,
        document: { tenant: 'bench', documentId: 'doc' },
        maxTokens: 1,
        sampling: GREEDY,
        replayTokens: R,
        ignoreEos: true,
      });
      const r = await engine.generate({
        promptIds: question,
        document: { tenant: 'bench', documentId: 'doc' },
        maxTokens: opts.steps,
        sampling: GREEDY,
        replayTokens: R,
        keepLogits: true,
        ignoreEos: true,
        forceIds: exact.tokens,
      });
      const kls = r.logits.map((row, i) => klDivergence(exact.logits[i] as Float32Array, row));
      let maxDiff = 0;
      r.logits.forEach((row, i) => row.forEach((v, j) => (maxDiff = Math.max(maxDiff, Math.abs(v - ((exact.logits[i] as Float32Array)[j] as number))))));
      const agree = r.logits.filter((row, i) => argmax(row) === argmax(exact.logits[i] as Float32Array)).length;
      rows.push([
        String(R),
        (kls.reduce((a, b) => a + b, 0) / kls.length).toExponential(2),
        Math.max(...kls).toExponential(2),
        maxDiff.toExponential(2),
        `${agree}/${kls.length}`,
        fmtDuration(r.timings.prefillMs),
      ]);
    }
    return [
      `### Replay fidelity: ${opts.questionTokens}-token question on a stored ${opts.docTokens}-token document, ${opts.steps} teacher-forced steps (${spec.label})`,
      '',
      `exact generation: time to first token ${fmtDuration(exact.timings.prefillMs)}`,
      '',
      markdownTable(
        [{ header: 'R' }, { header: 'mean KL (nats)' }, { header: 'max KL' }, { header: 'max abs Δlogit' }, { header: 'greedy agrees' }, { header: 'TTFT' }],
        rows,
      ),
    ].join('\n');
  });
}

export function parseReplayBenchOptions(values: OptionValues, cacheRoot: string): ReplayBenchOptions {
  const quick = values['quick'] === true;
  const replaysText = values['replays'];
  const replays =
    typeof replaysText === 'string'
      ? replaysText.split(',').map((t) => positiveIntOption({ replays: t }, 'replays', 1))
      : quick
        ? [32, 128]
        : [32, 128, 512, 2048];
  return {
    docTokens: positiveIntOption(values, 'doc-tokens', quick ? 1024 : 4096),
    questionTokens: positiveIntOption(values, 'question-tokens', 32),
    steps: positiveIntOption(values, 'steps', 8),
    replays,
    model: parseDocModel(values),
    cacheRoot,
  };
}

export const replaySuite: BenchSuite = {
  name: 'replay',
  summary: 'replay fidelity: KL of next-token distributions, bounded replay vs exact, as R varies',
  options: {
    replays: { type: 'string', description: 'replay lengths R to compare', defaultText: '32,128,512,2048 (32,128 with --quick)', valueName: 'R,R,...' },
    steps: { type: 'string', description: 'teacher-forced steps compared', defaultText: '8', valueName: 'N' },
    'doc-tokens': { type: 'string', description: 'document length in tokens', defaultText: 'replay: 4096 (1024 with --quick)', valueName: 'N' },
    'question-tokens': { type: 'string', description: 'question length in tokens', defaultText: '32', valueName: 'N' },
    'doc-model': { type: 'string', description: 'model: 256 (40 layers, released schedule) or tiny (6 layers)', defaultText: '256', valueName: 'M' },
    quick: { type: 'boolean', description: 'smaller document and fewer R for a smoke run' },
  },
  async run(values, io) {
    io.out(await runReplayBench(parseReplayBenchOptions(values, DEFAULT_CACHE_ROOT), io));
  },
};
