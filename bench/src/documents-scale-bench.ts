/**
 * @module documents-scale-bench
 * Documents from 4K to 1M tokens in one run: for each size, the artifact (MB,
 * bytes per token), the ingest rate, the time to first token of a question with the document fetched
 * (a fresh engine: document cache cold) and with the document cache warm, a decode step split by
 * layer kind (Full / Reindex / Reuse / window-only), and the decoder's peak RSS; then the scale
 * goals, met or not, with their figures.
 *
 * Model: the released 40-layer V4.1 schedule at tiny width (packages/csa2-core/configs/v41-tiny-40l.json:
 * dim 64, head_dim 64, index_head_dim 32, window 128, index_topk 512, 2,048 candidate blocks of 8,
 * 1M context), a seeded checkpoint. Its encoder has 18 compressed layers whose Full layers score every
 * earlier entry per row, so a real ingest is quadratic: ~240 tokens/s at 8K and ~170 at 32K here (a
 * 1M-token ingest would take most of a day). Documents up to `--scale-real-max` are really ingested
 * (Engine.ingest); larger ones are synthetic: a Sequence filled with random valid packed rows
 * (@csa2/core fillSyntheticCache) written through the real ArtifactWriter, so the decoder reads,
 * verifies, loads and decodes them exactly as a real artifact (the values are not a model's; no
 * cost of the decoder depends on them). The largest real size also gets a synthetic twin, to show
 * that both cost the same on the decoder side.
 *
 * Each decoder run is a child process (documents-scale-decoder) with the glibc allocator settings
 * the worker images set (WORKER_MALLOC_ENV), so its peak RSS is that of one decoder with one document. Runs are
 * repeated `--scale-repeats` times, every size once per round (sizes side by side in time, on a
 * machine shared with other work); tables give the median and the range over the rounds.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ArtifactWriter, encodeManifest, openStore, type ObjectStore } from '@csa2/artifacts';
import { MAX_SCAN_THREADS, resolveScanThreads, type LayerMode } from '@csa2/core';
import { fillSyntheticCache } from '@csa2/core/testing';
import { Engine } from '@csa2/engine';
import { WORKER_MALLOC_ENV } from '@csa2/test';
import { ensureSeededCheckpoint } from './checkpoint-cache.js';
import type { DecoderRunArgs, DecoderRunReport } from './documents-scale-decoder.js';
import { machineFacts, type MachineFacts } from './machine.js';
import { seededTokenIds } from './model-bench.js';
import { fmtSpread, median } from './stats.js';
import type { BenchIo, BenchSuite, OptionValues } from './suite.js';
import { UsageError, positiveIntOption, tokenCountsOption } from './suite.js';
import { fmtDuration, fmtTokens, markdownTable } from './table.js';

const BENCH_DIR = join(dirname(fileURLToPath(import.meta.url)), '..');
const MODEL_CONFIG = join(BENCH_DIR, '..', 'packages', 'csa2-core', 'configs', 'v41-tiny-40l.json');
const MODEL_LABEL =
  'the released 40-layer V4.1 schedule at tiny width (configs/v41-tiny-40l.json: dim 64, head_dim 64, index_head_dim 32, window 128, top-k 512, 2,048 candidate blocks of 8)';
const DECODER_SCRIPT = fileURLToPath(new URL('./documents-scale-decoder.js', import.meta.url));
const TENANT = 'bench';
const MB = 1e6;
/** The reference rates for the scale goals. */
const GOAL_IO_BYTES_PER_S = 1e9;
const GOAL_RSS_ARTIFACT_FACTOR = 1.2;
const GOAL_REINDEX_FACTOR = 1.1;

export interface ScaleBenchOptions {
  readonly sizes: readonly number[];
  /** Documents up to this many tokens are ingested; larger ones are synthetic. */
  readonly realMaxTokens: number;
  readonly repeats: number;
  readonly decodeSteps: number;
  readonly questionTokens: number;
  readonly replayTokens: number;
  readonly chunkTokens: number;
  readonly cacheRoot: string;
  /** The engines' scan threads (EngineOptions.scanThreads): a count or 'auto'. */
  readonly scanThreads: number | 'auto';
  /** Write the raw results here (JSON), when set. */
  readonly jsonPath: string | null;
}

export const DEFAULT_SCALE_SIZES = [4096, 8192, 32768, 131072, 524288, 1048576] as const;

export const DEFAULT_SCALE_OPTIONS: ScaleBenchOptions = {
  sizes: DEFAULT_SCALE_SIZES,
  realMaxTokens: 32768,
  repeats: 3,
  decodeSteps: 16,
  questionTokens: 32,
  replayTokens: 128,
  chunkTokens: 4096,
  cacheRoot: join(BENCH_DIR, '..', '.csa2', 'bench'),
  scanThreads: 'auto',
  jsonPath: null,
};

export interface ScaleDocument {
  readonly documentId: string;
  readonly tokens: number;
  /** The size asked for; more than `tokens` when the document was capped to leave room in the context for the question and answer. */
  readonly requestedTokens: number;
  readonly source: 'ingest' | 'synthetic';
  /** Ingest: Engine.ingest (encode + write); synthetic: fill the sequence, then write it through ArtifactWriter. */
  readonly makeMs: number;
  /** Synthetic: the ArtifactWriter part alone (chunks + manifest). */
  readonly writeMs: number;
  /** Every chunk + the manifest, on the store. */
  readonly artifactBytes: number;
  /** Global-cache bytes per token of the layout. */
  readonly globalBytesPerToken: number;
}

export interface ScaleResult {
  readonly machine: MachineFacts;
  readonly options: ScaleBenchOptions;
  readonly documents: readonly ScaleDocument[];
  /** Per document id, one report per round. */
  readonly runs: Readonly<Record<string, readonly DecoderRunReport[]>>;
}

// ---------------------------------------------------------------- figures from the reports

const KIND_ORDER: readonly LayerMode[] = ['full', 'reindex', 'reuse', 'swa'];
export const KIND_LABEL: Readonly<Record<LayerMode, string>> = { full: 'Full', reindex: 'Reindex', reuse: 'Reuse', swa: 'window-only' };

/** One run's decode figures: the median step, and the mean per step of each layer kind (whole kind and per layer). */
export interface StepFigures {
  readonly stepMs: number;
  readonly kindMs: Readonly<Record<LayerMode, number>>;
  readonly perLayerMs: Readonly<Record<LayerMode, number>>;
  readonly headMs: number;
  /** Mean step wall time minus every timed part: scheduler, sampling, embedding, the loop's yield. */
  readonly untimedMs: number;
}

export function stepFigures(run: DecoderRunReport): StepFigures {
  const n = Math.max(1, run.steps.length);
  const mean = (f: (s: DecoderRunReport['steps'][number]) => number): number => run.steps.reduce((a, s) => a + f(s), 0) / n;
  const kindMs = { full: 0, reindex: 0, reuse: 0, swa: 0 } as Record<LayerMode, number>;
  const perLayerMs = { full: 0, reindex: 0, reuse: 0, swa: 0 } as Record<LayerMode, number>;
  for (const k of KIND_ORDER) {
    kindMs[k] = mean((s) => s.byKindMs[k]);
    perLayerMs[k] = run.layerCounts[k] > 0 ? kindMs[k] / run.layerCounts[k] : 0;
  }
  const headMs = mean((s) => s.headMs);
  const wall = mean((s) => s.wallMs);
  return {
    stepMs: median(run.steps.map((s) => s.wallMs)),
    kindMs,
    perLayerMs,
    headMs,
    untimedMs: wall - headMs - KIND_ORDER.reduce((a, k) => a + kindMs[k], 0),
  };
}

const fmtMs = (ms: number): string => (ms >= 1000 ? fmtDuration(ms) : ms >= 10 ? `${ms.toFixed(0)} ms` : `${ms.toFixed(2)} ms`);
const fmtMsBare = (ms: number): string => (ms >= 100 ? ms.toFixed(0) : ms >= 10 ? ms.toFixed(1) : ms.toFixed(2));
const fmtMB = (bytes: number): string => (bytes / MB).toFixed(bytes < 10 * MB ? 2 : 1);

/** 1M for 1,048,576, else as the other tables (8K, 512K). */
function fmtSize(tokens: number): string {
  return tokens % 1048576 === 0 ? `${tokens / 1048576}M` : fmtTokens(tokens);
}

function docLabel(d: ScaleDocument): string {
  return `${fmtSize(d.requestedTokens)}${d.tokens !== d.requestedTokens ? '*' : ''}${d.source === 'synthetic' ? ' (synthetic)' : ''}`;
}

/** The document the goals use at a size: the ingested one when there is one. */
function documentAt(result: ScaleResult, tokens: number): ScaleDocument | null {
  const at = result.documents.filter((d) => d.tokens === tokens);
  return at.find((d) => d.source === 'ingest') ?? at[0] ?? null;
}

export interface GoalResult {
  readonly goal: string;
  /** The figures, medians over the rounds, with how many rounds met it. */
  readonly figure: string;
  /** null: not measured (a size it needs was not run). */
  readonly met: boolean | null;
}

/** The three scale goals, evaluated round by round (each round's sizes ran side by side) and over the medians. */
export function evaluateGoals(result: ScaleResult): GoalResult[] {
  const goals: GoalResult[] = [];
  const largest = Math.max(...result.documents.map((d) => d.tokens));
  const big = documentAt(result, largest);
  const d8k = documentAt(result, 8192);
  const d4k = documentAt(result, 4096);
  const at = big === null ? fmtSize(largest) : docLabel({ ...big, source: 'ingest' });
  const runsOf = (d: ScaleDocument | null): readonly DecoderRunReport[] => (d === null ? [] : (result.runs[d.documentId] ?? []));
  const rounds = (n: number): string => `${n} of ${result.options.repeats} rounds`;

  // decoder RSS ≤ model + 1.2 × artifact
  {
    const goal = `decoder peak RSS at ${at} ≤ model (RSS once warmed up) + ${GOAL_RSS_ARTIFACT_FACTOR} × artifact`;
    const rs = runsOf(big);
    if (big === null || rs.length === 0) goals.push({ goal, figure: 'not measured', met: null });
    else {
      const bound = (r: DecoderRunReport) => r.warmRssBytes + GOAL_RSS_ARTIFACT_FACTOR * big.artifactBytes;
      const ok = rs.filter((r) => r.peakRssBytes <= bound(r)).length;
      const peak = median(rs.map((r) => r.peakRssBytes));
      const warm = median(rs.map((r) => r.warmRssBytes));
      goals.push({
        goal,
        figure: `${fmtMB(peak)} MB ≤ ${fmtMB(warm)} + ${GOAL_RSS_ARTIFACT_FACTOR} × ${fmtMB(big.artifactBytes)} = ${fmtMB(warm + GOAL_RSS_ARTIFACT_FACTOR * big.artifactBytes)} MB (peak − warm = ${((peak - warm) / big.artifactBytes).toFixed(2)} × artifact); ${rounds(ok)}`,
        met: ok === rs.length,
      });
    }
  }
  // TTFT fetched at 1M ≤ TTFT fetched at 8K + artifact at 1 GB/s
  {
    const goal = `TTFT with chunks fetched at ${at} ≤ TTFT at 8K + artifact bytes at 1 GB/s`;
    const rb = runsOf(big);
    const r8 = runsOf(d8k);
    const n = Math.min(rb.length, r8.length);
    if (big === null || n === 0) goals.push({ goal, figure: 'not measured', met: null });
    else {
      const ioMs = (big.artifactBytes / GOAL_IO_BYTES_PER_S) * 1000;
      let ok = 0;
      for (let i = 0; i < n; i++) if ((rb[i] as DecoderRunReport).ttftFetchedMs <= (r8[i] as DecoderRunReport).ttftFetchedMs + ioMs) ok++;
      const tb = median(rb.map((r) => r.ttftFetchedMs));
      const t8 = median(r8.map((r) => r.ttftFetchedMs));
      const warmB = median(rb.map((r) => r.ttftWarmMs));
      const loadB = median(rb.map((r) => r.loadMs));
      goals.push({
        goal,
        figure:
          `${fmtMs(tb)} vs ${fmtMs(t8)} + ${fmtMs(ioMs)} = ${fmtMs(t8 + ioMs)}; TTFT with the document cache warm (the question's encode from the stored encoder tail, and the decoder replay) ${fmtMs(warmB)}; ` +
          `the fetch + verify + load alone ${fmtMs(loadB)} (${(big.artifactBytes / MB / (loadB / 1000)).toFixed(0)} MB/s); ${rounds(ok)}`,
        met: ok === n,
      });
    }
  }
  // Reindex per-layer step cost at 1M ≤ 1.1 × at 4K
  {
    const goal = `Reindex-layer step cost at ${at} ≤ ${GOAL_REINDEX_FACTOR} × its cost at 4K`;
    const rb = runsOf(big);
    const r4 = runsOf(d4k);
    const n = Math.min(rb.length, r4.length);
    if (big === null || n === 0 || (rb[0] as DecoderRunReport).layerCounts.reindex === 0) goals.push({ goal, figure: 'not measured', met: null });
    else {
      const ratios: number[] = [];
      for (let i = 0; i < n; i++)
        ratios.push(stepFigures(rb[i] as DecoderRunReport).perLayerMs.reindex / stepFigures(r4[i] as DecoderRunReport).perLayerMs.reindex);
      const ok = ratios.filter((x) => x <= GOAL_REINDEX_FACTOR).length;
      const mb = median(rb.map((r) => stepFigures(r).perLayerMs.reindex));
      const m4 = median(r4.map((r) => stepFigures(r).perLayerMs.reindex));
      goals.push({
        goal,
        figure: `${fmtMsBare(mb)} ms vs ${fmtMsBare(m4)} ms per layer per step: ${fmtSpread(ratios, (x) => `${x.toFixed(2)}×`)} (per round); ${rounds(ok)}`,
        met: ok === n,
      });
    }
  }
  return goals;
}

export function renderScaleBench(result: ScaleResult): string {
  const o = result.options;
  const m = result.machine;
  const docs = [...result.documents].sort((a, b) => a.tokens - b.tokens || (a.source === 'ingest' ? -1 : 1));
  const runs = (d: ScaleDocument): readonly DecoderRunReport[] => result.runs[d.documentId] ?? [];
  const spread = (d: ScaleDocument, f: (r: DecoderRunReport) => number, fmt: (x: number) => string): string => fmtSpread(runs(d).map(f), fmt);
  const docRows = docs.map((d) => [
    docLabel(d),
    d.tokens.toLocaleString('en-US'),
    fmtMB(d.artifactBytes),
    (d.artifactBytes / d.tokens).toFixed(2),
    d.source === 'ingest' ? `${((d.tokens * 1000) / d.makeMs).toFixed(0)} tok/s` : `(written ${(d.artifactBytes / MB / (d.writeMs / 1000)).toFixed(0)} MB/s)`,
    spread(d, (r) => r.ttftFetchedMs, fmtMs),
    spread(d, (r) => r.ttftWarmMs, fmtMs),
    spread(d, (r) => r.loadMs, fmtMs),
    spread(
      d,
      (r) => r.loadedBytes / MB / (r.loadMs / 1000),
      (x) => x.toFixed(0),
    ),
    spread(d, (r) => r.warmRssBytes, fmtMB),
    spread(d, (r) => r.peakRssBytes, fmtMB),
    spread(
      d,
      (r) => (r.peakRssBytes - r.warmRssBytes) / d.artifactBytes,
      (x) => `${x.toFixed(2)}×`,
    ),
  ]);
  const counts = Object.values(result.runs)[0]?.[0]?.layerCounts;
  const kindHeader = (k: LayerMode): string => `${KIND_LABEL[k]}${counts !== undefined ? ` ×${counts[k]}` : ''}`;
  const stepRows = docs.map((d) => {
    const f = runs(d).map(stepFigures);
    return [
      docLabel(d),
      fmtSpread(
        f.map((x) => x.stepMs),
        fmtMsBare,
      ),
      ...KIND_ORDER.map(
        (k) =>
          `${fmtSpread(
            f.map((x) => x.kindMs[k]),
            fmtMsBare,
          )} [${fmtSpread(
            f.map((x) => x.perLayerMs[k]),
            fmtMsBare,
          )}]`,
      ),
      fmtSpread(
        f.map((x) => x.headMs),
        fmtMsBare,
      ),
      fmtSpread(
        f.map((x) => x.untimedMs),
        fmtMsBare,
      ),
    ];
  });
  const goals = evaluateGoals(result);
  const firstTokensDiffer = Object.entries(result.runs)
    .filter(([, rs]) => rs.some((r) => !r.sameFirstToken))
    .map(([id]) => id);
  return [
    `### Documents from ${docLabel(docs[0] as ScaleDocument)} to ${docLabel({ ...(docs.at(-1) as ScaleDocument), source: 'ingest' })} tokens (${MODEL_LABEL}, seeded weights)`,
    '',
    `Machine: ${m.cpuModel}, ${m.cores} cores, ${(m.totalMemoryBytes / 2 ** 30).toFixed(1)} GiB, node ${m.nodeVersion}, onnxruntime-node ${m.onnxruntimeVersion}; load average ${m.loadAverage1m.toFixed(2)} at the start. ` +
      `Filesystem store in ${tmpdir()} (chunks of ${o.chunkTokens} tokens; reads come from the page cache: the chunks were just written). ` +
      `Question ${o.questionTokens} tokens, replay R = ${o.replayTokens}, ${o.decodeSteps} decode steps, greedy, scan threads ${o.scanThreads === 'auto' ? `auto (${resolveScanThreads('auto')})` : o.scanThreads}. ${o.repeats} round(s): each cell is the median over the rounds (range in brackets); each round ran every size once, in a fresh decoder process.`,
    '',
    ...(docs.some((d) => d.tokens !== d.requestedTokens)
      ? [
          `\\* ${docs
            .filter((d) => d.tokens !== d.requestedTokens)
            .map((d) => `${fmtSize(d.requestedTokens)}: ${d.tokens.toLocaleString('en-US')} tokens`)
            .join(', ')}: the document, the question and the answer fill the model's context (max_seq_len).`,
          '',
        ]
      : []),
    `Documents up to ${fmtTokens(o.realMaxTokens)} tokens were ingested (Engine.ingest: encoder + writer); larger ones are synthetic: random valid packed rows (fillSyntheticCache) written through the real ArtifactWriter — real artifacts for the decoder, not a model's values.`,
    '',
    markdownTable(
      [
        { header: 'document', align: 'left' },
        { header: 'tokens' },
        { header: 'artifact MB' },
        { header: 'B/token on store' },
        { header: 'ingest' },
        { header: 'TTFT, chunks fetched (fresh engine)' },
        { header: 'TTFT, document cache warm' },
        { header: 'fetch + verify + load alone' },
        { header: 'its MB/s' },
        { header: 'decoder RSS warm MB' },
        { header: 'decoder peak RSS MB' },
        { header: '(peak − warm) / artifact' },
      ],
      docRows,
    ),
    '',
    `"decoder RSS warm": the decoder process once its engine was open and warmed up, before any document (the model); "peak": after both questions and the decode steps. ` +
      `Both TTFTs include the encoder replay over the last R tokens + the question and the decoder replay; "fetch + verify + load alone": the document read again by an ArtifactReader into a new Sequence after the questions (as the document cache loads it; the difference of the two TTFTs is within their noise).`,
    '',
    `Decode step (ms, mean per step; per layer of that kind in [brackets]), by layer kind (Csa2Model.timer):`,
    '',
    markdownTable(
      [
        { header: 'document', align: 'left' },
        { header: 'step ms (median)' },
        ...KIND_ORDER.map((k) => ({ header: kindHeader(k) })),
        { header: 'head' },
        { header: 'untimed' },
      ],
      stepRows,
    ),
    '',
    `"untimed": the step's wall time (token to token) minus the layers and the head: embedding, the scheduler, sampling, the loop's yield to the event loop.`,
    '',
    'Goals:',
    '',
    markdownTable(
      [
        { header: 'goal', align: 'left' },
        { header: 'met', align: 'left' },
        { header: 'figures (medians over the rounds)', align: 'left' },
      ],
      goals.map((g) => [g.goal, g.met === null ? 'not measured' : g.met ? 'yes' : 'no', g.figure]),
    ),
    ...(firstTokensDiffer.length > 0
      ? ['', `WARNING: the fetched and the cached question chose different first tokens on ${firstTokensDiffer.join(', ')}`]
      : []),
  ].join('\n');
}

// ---------------------------------------------------------------- running it

function runDecoderProcess(args: DecoderRunArgs): Promise<DecoderRunReport> {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      // CSA2_BENCH_DECODER_NODE_ARGS: node options for the decoder process (e.g. --cpu-prof, which NODE_OPTIONS refuses)
      [...(process.env['CSA2_BENCH_DECODER_NODE_ARGS'] ?? '').split(' ').filter((a) => a !== ''), DECODER_SCRIPT, JSON.stringify(args)],
      { env: { ...process.env, ...WORKER_MALLOC_ENV }, maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => {
        if (err !== null) reject(new Error(`decoder run on ${args.documentId} failed: ${err.message}\n${stderr}`));
        else {
          try {
            resolve(JSON.parse(stdout.trim().split('\n').at(-1) ?? '') as DecoderRunReport);
          } catch {
            reject(new Error(`decoder run on ${args.documentId} printed no report:\n${stdout}\n${stderr}`));
          }
        }
      },
    );
  });
}

/** Makes the documents: ingests up to realMaxTokens, synthetic artifacts above (and a synthetic twin of the largest real size). */
async function makeDocuments(engine: Engine, store: ObjectStore, opts: ScaleBenchOptions, io: BenchIo): Promise<ScaleDocument[]> {
  const V = engine.model.config.vocabSize;
  // the context holds the document, the question and the answer: a document of the whole context is cut to leave them room
  const room = engine.model.config.maxSeqLen - opts.questionTokens - opts.decodeSteps - 1;
  const out: ScaleDocument[] = [];
  const sizes = [...new Set(opts.sizes)].sort((a, b) => a - b);
  const realSizes = sizes.filter((n) => n <= opts.realMaxTokens);
  const twin = realSizes.at(-1);
  for (const [i, requested] of sizes.entries()) {
    const n = Math.min(requested, room);
    if (n <= opts.realMaxTokens) {
      const documentId = `doc-${n}`;
      io.log(`documents-scale: ingesting ${n} tokens`);
      const t0 = performance.now();
      let lastLog = t0;
      const ing = await engine.ingest(
        { tenant: TENANT, documentId, tokenIds: seededTokenIds(100 + i, n, V), chunkTokens: opts.chunkTokens },
        {
          onProgress: (p) => {
            if (performance.now() - lastLog > 30_000) {
              lastLog = performance.now();
              io.log(`  encoded ${p.tokensDone}/${p.tokensTotal} (${((p.tokensDone * 1000) / (lastLog - t0)).toFixed(0)} tok/s)`);
            }
          },
        },
      );
      const ms = performance.now() - t0;
      out.push({
        documentId,
        tokens: n,
        requestedTokens: requested,
        source: 'ingest',
        makeMs: ms,
        writeMs: ms,
        artifactBytes: ing.artifactBytes,
        globalBytesPerToken: ing.bytesPerToken,
      });
    }
    if (n > opts.realMaxTokens || requested === twin)
      out.push({ ...(await syntheticDocument(engine, store, n, opts.chunkTokens, 200 + i, io)), requestedTokens: requested });
  }
  return out;
}

async function syntheticDocument(
  engine: Engine,
  store: ObjectStore,
  tokens: number,
  chunkTokens: number,
  seed: number,
  io: BenchIo,
): Promise<Omit<ScaleDocument, 'requestedTokens'>> {
  // whole chunks, so that the ingest below finds every chunk stored and computes only the encoder tail (a
  // document shorter than a chunk keeps its length and gets no tail: its questions compute it)
  const whole = Math.floor(tokens / chunkTokens) * chunkTokens;
  if (whole > 0) tokens = whole;
  const documentId = `synthetic-${tokens}`;
  io.log(`documents-scale: synthetic artifact of ${tokens} tokens`);
  const t0 = performance.now();
  const seq = engine.model.createSequence();
  fillSyntheticCache(seq, tokens, engine.model.config.vocabSize, seed);
  const t1 = performance.now();
  const writer = new ArtifactWriter({ store, layout: engine.layout, tenant: TENANT, documentId, chunkTokens });
  await writer.writeAvailable(seq, tokens);
  const manifest = await writer.finish(seq);
  const t2 = performance.now();
  const artifactBytes = manifest.chunks.reduce((a, c) => a + c.sizeBytes, 0) + encodeManifest(manifest).length;
  // the encoder tail, as an ingest stores it: ingesting the same tokens again re-uses every chunk (each is
  // read and verified) and computes only the tail, which the manifest then names
  if (whole > 0) {
    const ing = await engine.ingest({ tenant: TENANT, documentId, tokenIds: Array.from(seq.tokens.view()), chunkTokens });
    const t3 = performance.now();
    if (ing.reusedTokens !== tokens) throw new Error(`the synthetic artifact of ${tokens} tokens was not re-used whole (${ing.reusedTokens})`);
    io.log(
      `  its encoder tail: ${(ing.tailBytes / MB).toFixed(2)} MB (replay ${ing.tailReplayTokens}) in ${((t3 - t2) / 1000).toFixed(1)} s, the chunks' reading and verification included`,
    );
  } else io.log(`  shorter than a chunk: no stored encoder tail`);
  return { documentId, tokens, source: 'synthetic', makeMs: t2 - t0, writeMs: t2 - t1, artifactBytes, globalBytesPerToken: engine.info().bytesPerToken };
}

export async function runScaleBench(opts: ScaleBenchOptions, io: BenchIo): Promise<ScaleResult> {
  const machine = machineFacts();
  const ckpt = await ensureSeededCheckpoint(MODEL_CONFIG, { seed: 1, cacheRoot: opts.cacheRoot, log: io.log });
  const storeDir = mkdtempSync(join(tmpdir(), 'csa2-bench-scale-'));
  const storeUrl = pathToFileURL(storeDir).href;
  try {
    const engine = await Engine.open({ modelDir: ckpt.dir, store: storeUrl, warmUp: true, scanThreads: opts.scanThreads });
    const store = openStore(storeUrl);
    let documents: ScaleDocument[];
    let V: number;
    try {
      const max = Math.max(...opts.sizes);
      if (max > engine.model.config.maxSeqLen)
        throw new UsageError(`--scale-tokens: ${max} tokens exceed the model's max_seq_len ${engine.model.config.maxSeqLen}`);
      V = engine.model.config.vocabSize;
      documents = await makeDocuments(engine, store, opts, io);
    } finally {
      await store.close();
      await engine.close();
    }
    const runs: Record<string, DecoderRunReport[]> = {};
    const question = seededTokenIds(9, opts.questionTokens, V);
    for (let round = 1; round <= opts.repeats; round++) {
      for (const d of documents) {
        io.log(`documents-scale: round ${round}/${opts.repeats}, decoder on ${d.documentId}`);
        const report = await runDecoderProcess({
          modelDir: ckpt.dir,
          storeUrl,
          tenant: TENANT,
          documentId: d.documentId,
          promptIds: question,
          replayTokens: opts.replayTokens,
          decodeSteps: opts.decodeSteps,
          scanThreads: opts.scanThreads,
        });
        (runs[d.documentId] ??= []).push(report);
      }
      const partial: ScaleResult = { machine, options: opts, documents, runs };
      if (opts.jsonPath !== null) writeFileSync(opts.jsonPath, `${JSON.stringify(partial, null, 1)}\n`);
    }
    return { machine, options: opts, documents, runs };
  } finally {
    rmSync(storeDir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------- options

function scanThreadsOption(v: OptionValues[string]): number | 'auto' {
  if (v === undefined || v === 'auto') return 'auto';
  const n = typeof v === 'string' && /^\d+$/.test(v) ? Number(v) : Number.NaN;
  if (!(n <= MAX_SCAN_THREADS)) throw new UsageError(`--scale-scan-threads takes 'auto' or an integer from 0 to ${MAX_SCAN_THREADS}, got ${String(v)}`);
  return n;
}

export function parseScaleBenchOptions(values: OptionValues): ScaleBenchOptions {
  const d = DEFAULT_SCALE_OPTIONS;
  const quick = values['quick'] === true;
  const sizes = tokenCountsOption(values, 'scale-tokens', quick ? [4096, 8192, 65536] : d.sizes);
  const realMax = tokenCountsOption(values, 'scale-real-max', [quick ? 4096 : d.realMaxTokens]);
  if (realMax.length !== 1) throw new UsageError('--scale-real-max takes one token count');
  const json = values['scale-json'];
  return {
    ...d,
    sizes,
    realMaxTokens: realMax[0] as number,
    repeats: positiveIntOption(values, 'scale-repeats', quick ? 1 : d.repeats),
    decodeSteps: positiveIntOption(values, 'scale-steps', quick ? 4 : d.decodeSteps),
    questionTokens: positiveIntOption(values, 'question-tokens', d.questionTokens),
    replayTokens: positiveIntOption(values, 'replay', d.replayTokens),
    ...(typeof values['cache-dir'] === 'string' ? { cacheRoot: values['cache-dir'] } : {}),
    scanThreads: scanThreadsOption(values['scale-scan-threads']),
    jsonPath: typeof json === 'string' ? json : null,
  };
}

export const documentsScaleSuite: BenchSuite = {
  name: 'documents-scale',
  summary:
    'documents from 4K to 1M tokens (40-layer tiny model): artifact MB and bytes/token, ingest tok/s, TTFT fetched and cached, decode step by layer kind, decoder peak RSS, and the scale goals',
  options: {
    'scale-tokens': {
      type: 'string',
      description: 'document sizes (K = 1024, M = 1024²)',
      defaultText: '4K,8K,32K,128K,512K,1M (4K,8K,64K with --quick)',
      valueName: 'N,N,...',
    },
    'scale-real-max': {
      type: 'string',
      description: 'ingest documents up to this size; larger ones are synthetic artifacts',
      defaultText: '32K (4K with --quick)',
      valueName: 'N',
    },
    'scale-repeats': {
      type: 'string',
      description: 'rounds (every size once per round, a fresh decoder process each)',
      defaultText: '3 (1 with --quick)',
      valueName: 'N',
    },
    'scale-steps': { type: 'string', description: 'decode steps timed per run', defaultText: '16 (4 with --quick)', valueName: 'N' },
    'scale-json': { type: 'string', description: 'write the raw results (every run, every step) to FILE', valueName: 'FILE' },
    'question-tokens': { type: 'string', description: 'question length in tokens', defaultText: '32', valueName: 'N' },
    replay: { type: 'string', description: 'bounded replay R', defaultText: '128', valueName: 'R' },
    'cache-dir': { type: 'string', description: 'seeded checkpoints', defaultText: '.csa2/bench', valueName: 'DIR' },
    'scale-scan-threads': {
      type: 'string',
      description: 'scan threads of the ingesting engine and the decoders (CSA2_SCAN_THREADS)',
      defaultText: 'auto',
      valueName: 'N|auto',
    },
    quick: { type: 'boolean', description: 'small sizes for a smoke run' },
  },
  async run(values, io) {
    io.out(renderScaleBench(await runScaleBench(parseScaleBenchOptions(values), io)));
  },
};
