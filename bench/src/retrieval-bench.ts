/**
 * @module retrieval-bench
 * Retrieval and fidelity: RULER-style tasks on real text (retrieval-tasks.ts) at
 * several lengths and needle depths, answered by the served model
 *   (a) exact, in one process (the whole prompt prefilled, every layer over every token),
 *   (b) from the document ingested once (CED), with decoder replay R = 128, 512, 2560,
 *   (c) through the whole pipeline: the haystack posted to /v1/documents, the question asked by
 *       `document_id` through the gateway with the official `openai` client (the decoder's R = 128);
 * and, per index layer, whether the needles' entries were in the question's last row's top-k (Full and
 * Reindex layers) and in the candidate pool, as the CED path at R = 128 selected them; and KL(exact ‖
 * replay) of next-token distributions on held-out real text as R varies.
 *
 * Greedy decoding, answer tokens + 2 generated; an answer counts when every expected value appears in
 * the output (RULER's string match). Seeded: the same options give the same instances.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { klDivergence, type ForwardObserver } from '@csa2/core';
import { Engine } from '@csa2/engine';
import { API_KEY, Pipeline } from '@csa2/test';
import OpenAI from 'openai';
import {
  answerCorrect,
  instanceSeed,
  loadRetrievalCorpus,
  RETRIEVAL_TASKS,
  retrievalInstance,
  type RetrievalCorpus,
  type RetrievalInstance,
  type RetrievalTask,
} from './retrieval-tasks.js';
import type { BenchIo, BenchSuite, OptionValues } from './suite.js';
import { UsageError, positiveIntOption, tokenCount, tokenCountsOption } from './suite.js';
import { fmtDuration, markdownTable } from './table.js';

const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));
const GREEDY = { temperature: 0, topP: 1, seed: 0 } as const;
const MODES = ['exact', 'ced', 'pipeline'] as const;
type Mode = (typeof MODES)[number];

export interface RetrievalBenchOptions {
  readonly modelDir: string;
  readonly corpusDir: string;
  readonly tasks: readonly RetrievalTask[];
  /** Total prompt lengths in tokens (document + question). */
  readonly lengths: readonly number[];
  readonly depths: readonly number[];
  readonly samples: number;
  readonly replays: readonly number[];
  readonly modes: readonly Mode[];
  /** Lengths above this skip the exact mode (its prefill is the slowest part). */
  readonly exactMaxTokens: number;
  /** Held-out text of the KL comparison (0: skip it). */
  readonly klTokens: number;
  readonly klReplays: readonly number[];
  /** Held-out passages of the KL comparison (KL_PASSAGE_STARTS, the first n). */
  readonly klPassages: number;
  readonly seed: number;
  /** Also write every instance's outcome (outputs, correctness, selections) as JSON here. */
  readonly jsonPath: string | null;
}

/** One instance, tokenized: the document (BOS first), the question, and the needles' token spans. */
export interface PreparedInstance {
  readonly instance: RetrievalInstance;
  readonly length: number;
  readonly docIds: number[];
  readonly questionIds: number[];
  readonly answerTokens: number;
  /** [first, end) token positions of each value-carrying needle in the document. */
  readonly needleSpans: readonly (readonly [number, number])[];
}

interface Outcome {
  readonly task: RetrievalTask;
  readonly length: number;
  readonly promptTokens: number;
  readonly depth: number;
  readonly sample: number;
  /** mode key ('exact', 'R=128', ..., 'pipeline') → the output text and whether it counts. */
  readonly answers: Record<string, { readonly text: string; readonly correct: boolean; readonly ms: number }>;
  /** layer label → share of the value-carrying needles with an entry selected at the question's last row. */
  readonly selected: Record<string, number>;
}

/** The instance's document (BOS first) and question as token ids. */
function tokenizeInstance(engine: Engine, instance: RetrievalInstance): { docIds: number[]; questionIds: number[] } {
  const bos = engine.info().bosId;
  return { docIds: [...(bos === null ? [] : [bos]), ...engine.tokenize(instance.document)], questionIds: engine.tokenize(instance.question) };
}

/**
 * The value-carrying needles' token spans: a needle starts a sentence after a space, and the text before
 * it (without that space) tokenizes to the tokens before the needle's first token (byte-level BPE
 * attaches the space to the word after it).
 */
function needleSpans(engine: Engine, instance: RetrievalInstance): Array<readonly [number, number]> {
  const head = engine.info().bosId === null ? 0 : 1;
  return instance.needles.map(
    (n) =>
      [
        head + engine.tokenize(instance.document.slice(0, n.offset).trimEnd()).length,
        head + engine.tokenize(instance.document.slice(0, n.offset + n.text.length)).length,
      ] as const,
  );
}

/** An instance whose document + question come to about `length` tokens (the haystack scaled to fit). */
export function instanceOfLength(engine: Engine, corpus: RetrievalCorpus, task: RetrievalTask, length: number, depth: number, seed: number): PreparedInstance {
  let chars = Math.max(200, Math.round(length * 3.6));
  let best: { instance: RetrievalInstance; docIds: number[]; questionIds: number[]; total: number } | null = null;
  for (let attempt = 0; attempt < 4; attempt++) {
    const instance = retrievalInstance(corpus, task, chars, depth, seed);
    const ids = tokenizeInstance(engine, instance);
    const total = ids.docIds.length + ids.questionIds.length;
    if (total <= length && (best === null || total > best.total)) best = { instance, ...ids, total };
    if (total <= length && total >= 0.97 * length) break;
    chars = Math.max(200, Math.floor(chars * (length / total) * (total > length ? 0.99 : 1.0)));
  }
  if (best === null) throw new Error(`could not fit a ${task} instance into ${length} tokens`);
  const { instance, docIds, questionIds } = best;
  return { instance, length, docIds, questionIds, answerTokens: engine.tokenize(instance.answer).length, needleSpans: needleSpans(engine, instance) };
}

/** The chance that k entries drawn without replacement from n include at least one of m given ones. */
export function chanceOfAny(n: number, k: number, m: number): number {
  if (m <= 0 || k <= 0) return 0;
  if (k + m > n) return 1;
  let none = 1;
  for (let i = 0; i < m; i++) none *= (n - k - i) / (n - i);
  return 1 - none;
}

/** Records, for the row at position `row`, which needle spans had an entry in each index layer's top-k and candidate pool. */
function selectionRecorder(engine: Engine, row: number, spans: readonly (readonly [number, number])[]) {
  const plan = engine.model.plan;
  const blockSize = Math.max(1, engine.model.config.candidateBlockSize);
  const seen = new Map<string, number>();
  const label = (layer: number) => {
    const e = plan.entries[layer];
    return `${layer} ${e?.mode ?? '?'}`;
  };
  const observer: ForwardObserver = {
    topk(layer, p0, rows, kk, topk) {
      if (row < p0 || row >= p0 + rows) return;
      const ratio = plan.entries[layer]?.compressRatio ?? 1;
      const picks = topk.subarray((row - p0) * kk, (row - p0 + 1) * kk);
      const list = new Set(picks);
      const visible = Math.floor((row + 1) / ratio); // entries complete at this row
      const k = picks.filter((e) => e >= 0).length;
      let hit = 0;
      let chance = 0;
      for (const [a, b] of spans) {
        const first = Math.floor(a / ratio);
        const last = Math.floor((b - 1) / ratio);
        let found = false;
        for (let e = first; e <= last && !found; e++) found = list.has(e);
        if (found) hit++;
        chance += chanceOfAny(visible, k, Math.max(0, Math.min(last, visible - 1) - first + 1));
      }
      seen.set(label(layer), hit / spans.length);
      seen.set(`${label(layer)}|chance`, chance / spans.length);
    },
    candidates(layer, p0, rows, width, mask) {
      if (row < p0 || row >= p0 + rows) return;
      const ratio = plan.entries[layer]?.compressRatio ?? 1;
      const rowMask = mask.subarray((row - p0) * width, (row - p0 + 1) * width);
      const share = rowMask.reduce((a, v) => a + (v !== 0 ? 1 : 0), 0) / width;
      let hit = 0;
      let chance = 0;
      for (const [a, b] of spans) {
        const first = Math.floor(a / ratio);
        const last = Math.min(Math.floor((b - 1) / ratio), width - 1);
        let found = false;
        for (let e = first; e <= last && !found; e++) found = rowMask[e] !== 0;
        if (found) hit++;
        // the pool is whole blocks: the chance that as many blocks drawn at random include one of the needle's
        const blocks = Math.ceil(width / blockSize);
        chance += chanceOfAny(blocks, Math.round(share * blocks), Math.floor(last / blockSize) - Math.floor(first / blockSize) + 1);
      }
      seen.set(`${layer} candidate pool`, hit / spans.length);
      seen.set(`${layer} candidate pool|chance`, chance / spans.length);
    },
  };
  return { observer, seen };
}

async function withObserver<T>(engine: Engine, observer: ForwardObserver, fn: () => Promise<T>): Promise<T> {
  engine.model.observer = observer;
  try {
    return await fn();
  } finally {
    engine.model.observer = null;
  }
}

function pct(n: number, d: number): string {
  return d === 0 ? '–' : `${Math.round((100 * n) / d)}% (${n}/${d})`;
}

export async function runRetrievalBench(opts: RetrievalBenchOptions, io: BenchIo): Promise<string> {
  const corpus = loadRetrievalCorpus(opts.corpusDir);
  const storeDir = mkdtempSync(join(tmpdir(), 'csa2-bench-retrieval-'));
  const engine = await Engine.open({ modelDir: opts.modelDir, store: pathToFileURL(storeDir).href });
  const outcomes: Outcome[] = [];
  const prepared: { p: PreparedInstance; documentId: string }[] = [];
  const maxLen = engine.model.config.maxSeqLen;
  let klSection = '';
  try {
    for (const length of opts.lengths) {
      if (length + 16 > maxLen) {
        io.log(`retrieval: ${length} tokens is beyond the model's context (${maxLen}); skipped`);
        continue;
      }
      for (const task of opts.tasks) {
        for (const depth of opts.depths) {
          for (let sample = 0; sample < opts.samples; sample++) {
            const p = instanceOfLength(engine, corpus, task, length, depth, instanceSeed(opts.seed, task, length, depth, sample));
            const documentId = `${task}-${length}-${Math.round(depth * 100)}-${sample}`;
            const promptTokens = p.docIds.length + p.questionIds.length;
            const answers: Record<string, { text: string; correct: boolean; ms: number }> = {};
            const maxTokens = p.answerTokens + 2;
            const lastRow = promptTokens - 1;
            let selected: Record<string, number> = {};
            if (opts.modes.includes('exact') && length <= opts.exactMaxTokens) {
              const t0 = performance.now();
              const r = await engine.generate({ promptIds: [...p.docIds, ...p.questionIds], exact: true, maxTokens, sampling: GREEDY });
              answers['exact'] = { text: r.text, correct: answerCorrect(p.instance, r.text), ms: performance.now() - t0 };
            }
            if (opts.modes.includes('ced')) {
              await engine.ingest({ tenant: 'bench', documentId, tokenIds: p.docIds });
              for (const R of opts.replays) {
                const rec = selectionRecorder(engine, lastRow, p.needleSpans);
                const t0 = performance.now();
                const r = await withObserver(engine, rec.observer, () =>
                  engine.generate({ promptIds: p.questionIds, document: { tenant: 'bench', documentId }, replayTokens: R, maxTokens, sampling: GREEDY }),
                );
                answers[`R=${R}`] = { text: r.text, correct: answerCorrect(p.instance, r.text), ms: performance.now() - t0 };
                if (R === 128 || Object.keys(selected).length === 0) selected = Object.fromEntries(rec.seen);
              }
            }
            outcomes.push({ task, length, promptTokens, depth, sample, answers, selected });
            prepared.push({ p, documentId });
            io.log(
              `retrieval: ${task} ${promptTokens} tokens depth ${depth}: ` +
                Object.entries(answers)
                  .map(([k, a]) => `${k} ${a.correct ? 'ok' : 'miss'} ${JSON.stringify(a.text.slice(0, 40))} (${fmtDuration(a.ms)})`)
                  .join('; '),
            );
          }
        }
      }
    }
    if (opts.klTokens > 0) klSection = await klOnRealText(engine, corpus, opts, io);
  } finally {
    await engine.close();
    rmSync(storeDir, { recursive: true, force: true });
  }
  if (opts.modes.includes('pipeline') && prepared.length > 0) await runThroughPipeline(opts, prepared, outcomes, io);
  if (opts.jsonPath !== null) writeFileSync(opts.jsonPath, `${JSON.stringify({ options: opts, outcomes }, null, 1)}\n`);
  return report(opts, outcomes, klSection);
}

/** The same instances through gateway → encoder worker → store → decoder worker, with the official client. */
async function runThroughPipeline(
  opts: RetrievalBenchOptions,
  prepared: readonly { p: PreparedInstance; documentId: string }[],
  outcomes: Outcome[],
  io: BenchIo,
): Promise<void> {
  io.log('retrieval: starting redis, gateway, encoder and decoder workers on the model');
  const pipe = await Pipeline.start({ modelDir: opts.modelDir, readyTimeoutMs: 600_000 });
  try {
    const client = new OpenAI({ baseURL: `${pipe.url}/v1`, apiKey: API_KEY, maxRetries: 0, timeout: 3_600_000 });
    for (const [i, { p, documentId }] of prepared.entries()) {
      const t0 = performance.now();
      const created = await fetch(`${pipe.url}/v1/documents`, {
        method: 'POST',
        headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({ id: documentId, text: p.instance.document }),
      });
      if (created.status !== 202) throw new Error(`ingest of ${documentId} failed: ${created.status} ${await created.text()}`);
      for (;;) {
        const st = (await (await fetch(`${pipe.url}/v1/documents/${documentId}`, { headers: { authorization: `Bearer ${API_KEY}` } })).json()) as {
          status: string;
          tokens?: number;
        };
        if (st.status === 'ready') break;
        if (st.status === 'failed') throw new Error(`document ${documentId} failed: ${JSON.stringify(st)}`);
        await new Promise((r) => setTimeout(r, 250));
      }
      const c = await client.completions.create({
        model: 'tiny',
        prompt: p.instance.question,
        max_tokens: p.answerTokens + 2,
        temperature: 0,
        document_id: documentId,
      } as OpenAI.CompletionCreateParamsNonStreaming);
      const text = c.choices[0]?.text ?? '';
      const o = outcomes[i] as Outcome;
      o.answers['pipeline'] = { text, correct: answerCorrect(p.instance, text), ms: performance.now() - t0 };
      io.log(`retrieval: pipeline ${documentId}: ${o.answers['pipeline'].correct ? 'ok' : 'miss'} ${JSON.stringify(text.slice(0, 40))}`);
      await fetch(`${pipe.url}/v1/documents/${documentId}`, { method: 'DELETE', headers: { authorization: `Bearer ${API_KEY}` } });
    }
  } finally {
    await pipe.stop();
  }
}

/**
 * Where the KL comparison's passages start: (held-out text, fraction), each at the first newline after
 * that fraction of the text (austen, mobydick, brown: SOURCES' order). The first is the passage this
 * suite once measured alone; the eight are training/train.py's kl_passages, so the GPU and
 * CPU figures are of the same text.
 */
export const KL_PASSAGE_STARTS: ReadonlyArray<readonly [number, number]> = [
  [0, 1 / 3],
  [0, 0.1],
  [0, 0.6],
  [1, 0.1],
  [1, 0.6],
  [2, 0.1],
  [2, 1 / 3],
  [2, 0.6],
];

/**
 * KL(exact ‖ replay) of next-token distributions on held-out real text, teacher-forced, as R varies:
 * per passage a klTokens-token document, the next 32 tokens as the question and 16 forced steps; the
 * goal (≤ 0.005 at R = 128) is checked on the mean over every row of every passage.
 */
async function klOnRealText(engine: Engine, corpus: RetrievalCorpus, opts: RetrievalBenchOptions, io: BenchIo): Promise<string> {
  const bos = engine.info().bosId;
  const questionTokens = 32;
  const steps = 16;
  const passages = KL_PASSAGE_STARTS.slice(0, opts.klPassages);
  io.log(`retrieval: KL on ${passages.length} passage(s) of ${opts.klTokens} tokens of held-out text (exact, then R = ${opts.klReplays.join(', ')})`);
  // kls[R][passage] = the KL of each forced row
  const kls = new Map<number, number[][]>(opts.klReplays.map((R) => [R, []]));
  for (const [pi, [src, frac]] of passages.entries()) {
    const text = corpus.heldOut[src] as string;
    const start = text.indexOf('\n', Math.floor(text.length * frac)) + 1;
    const ids = [...(bos === null ? [] : [bos]), ...engine.tokenize(text.slice(start, start + Math.round(opts.klTokens * 5)))];
    if (ids.length < opts.klTokens + questionTokens + steps) throw new Error(`KL: held-out passage ${pi} too short for ${opts.klTokens} tokens`);
    const doc = ids.slice(0, opts.klTokens);
    const question = ids.slice(opts.klTokens, opts.klTokens + questionTokens);
    const forced = ids.slice(opts.klTokens + questionTokens, opts.klTokens + questionTokens + steps);
    const documentId = `kl-text-${pi}`;
    await engine.ingest({ tenant: 'bench', documentId, tokenIds: doc });
    const exact = await engine.generate({
      promptIds: [...doc, ...question],
      maxTokens: steps,
      sampling: GREEDY,
      exact: true,
      keepLogits: true,
      ignoreEos: true,
      forceIds: forced,
    });
    for (const R of opts.klReplays) {
      const r = await engine.generate({
        promptIds: question,
        document: { tenant: 'bench', documentId },
        replayTokens: R,
        maxTokens: steps,
        sampling: GREEDY,
        keepLogits: true,
        ignoreEos: true,
        forceIds: forced,
      });
      (kls.get(R) as number[][]).push(r.logits.map((row, i) => klDivergence(exact.logits[i] as Float32Array, row)));
    }
    io.log(`  passage ${pi + 1}/${passages.length} done`);
  }
  const mean = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;
  const rows = opts.klReplays.map((R) => {
    const per = kls.get(R) as number[][];
    const all = per.flat();
    const m = mean(all);
    const passageMeans = per.map(mean).sort((a, b) => a - b);
    return [
      String(R),
      m.toExponential(2),
      Math.max(...all).toExponential(2),
      mean(per[0] as number[]).toExponential(2),
      (passageMeans[Math.floor((passageMeans.length - 1) / 2)] as number).toExponential(2),
      R === 128 ? (m <= 0.005 ? 'yes' : 'no') : '',
    ];
  });
  return [
    `### KL(exact ‖ bounded replay) on real text: ${passages.length} held-out passage(s) of ${opts.klTokens} tokens, each stored as a document, the next ${questionTokens} tokens as the question, ${steps} teacher-forced steps of the text`,
    '',
    markdownTable(
      [
        { header: 'R' },
        { header: 'mean KL (nats), every row' },
        { header: 'max KL' },
        { header: 'passage 1 mean' },
        { header: 'median passage mean' },
        { header: 'goal ≤ 0.005 (R = 128, mean)' },
      ],
      rows,
    ),
  ].join('\n');
}

function report(opts: RetrievalBenchOptions, outcomes: readonly Outcome[], klSection: string): string {
  const lengths = [...new Set(outcomes.map((o) => o.length))];
  const keys = [
    ...(opts.modes.includes('exact') ? ['exact'] : []),
    ...(opts.modes.includes('ced') ? opts.replays.map((R) => `R=${R}`) : []),
    ...(opts.modes.includes('pipeline') ? ['pipeline'] : []),
  ];
  const modeLabel = (k: string) =>
    k === 'exact' ? 'exact (one process)' : k === 'pipeline' ? 'pipeline (document_id, R = 128)' : `stored document, ${k.replace('=', ' = ')}`;
  const accRows: string[][] = [];
  for (const task of opts.tasks) {
    for (const k of keys) {
      const cells = lengths.map((L) => {
        const os = outcomes.filter((o) => o.task === task && o.length === L && o.answers[k] !== undefined);
        return pct(os.filter((o) => o.answers[k]?.correct === true).length, os.length);
      });
      accRows.push([task, modeLabel(k), ...cells]);
    }
  }
  const depthRows: string[][] = [];
  const depthKey = keys.includes('R=128') ? 'R=128' : (keys[0] ?? 'exact');
  for (const depth of opts.depths) {
    depthRows.push([
      String(depth),
      ...lengths.map((L) => {
        const os = outcomes.filter((o) => o.depth === depth && o.length === L && o.answers[depthKey] !== undefined);
        return pct(os.filter((o) => o.answers[depthKey]?.correct === true).length, os.length);
      }),
    ]);
  }
  const layerLabels = [...new Set(outcomes.flatMap((o) => Object.keys(o.selected)))]
    .filter((l) => !l.endsWith('|chance'))
    .sort((a, b) => parseInt(a, 10) - parseInt(b, 10) || a.localeCompare(b));
  const mean = (os: readonly Outcome[], key: string) => os.reduce((a, o) => a + (o.selected[key] ?? 0), 0) / os.length;
  const selRows = layerLabels.map((label) => [
    label,
    ...lengths.map((L) => {
      const os = outcomes.filter((o) => o.length === L && o.selected[label] !== undefined);
      if (os.length === 0) return '–';
      return `${Math.round(100 * mean(os, label))}% (chance ${Math.round(100 * mean(os, `${label}|chance`))}%)`;
    }),
  ]);
  const promptOf = (L: number) => {
    const ts = outcomes.filter((o) => o.length === L).map((o) => o.promptTokens);
    return `${L >= 1024 && L % 1024 === 0 ? `${L / 1024}K` : L} (${Math.min(...ts)}–${Math.max(...ts)})`;
  };
  const lengthHeaders = lengths.map((L) => ({ header: promptOf(L), align: 'right' as const }));
  const model = opts.modelDir.replace(REPO_ROOT, '');
  return [
    `### Retrieval accuracy on real-text haystacks — ${model}; depths ${opts.depths.join(', ')}; ${opts.samples} sample(s) per task, length and depth; greedy; columns: target length (prompt tokens)`,
    '',
    markdownTable([{ header: 'task', align: 'left' }, { header: 'path', align: 'left' }, ...lengthHeaders], accRows),
    '',
    `### By needle depth (all tasks, ${modeLabel(depthKey)})`,
    '',
    markdownTable([{ header: 'depth', align: 'left' }, ...lengthHeaders], depthRows),
    '',
    "### Needles selected at the question's last row, by index layer (stored document, R = 128): share of the value-carrying needles with at least one entry in the layer's top-k (Full, Reindex) or in the candidate pool; chance: the same share for a selection of as many entries (the pool: candidate blocks) drawn at random from all visible ones",
    '',
    selRows.length > 0 ? markdownTable([{ header: 'layer', align: 'left' }, ...lengthHeaders], selRows) : '(no CED runs)',
    ...(klSection === '' ? [] : ['', klSection]),
  ].join('\n');
}

function listOption(values: OptionValues, name: string, fallback: readonly number[], parse: (t: string) => number): number[] {
  const v = values[name];
  if (typeof v !== 'string') return [...fallback];
  return v.split(',').map((t) => parse(t.trim()));
}

export function parseRetrievalBenchOptions(values: OptionValues): RetrievalBenchOptions {
  const quick = values['quick'] === true;
  const tasksText = values['retrieval-tasks'];
  const tasks = typeof tasksText === 'string' ? tasksText.split(',').map((t) => t.trim()) : [...RETRIEVAL_TASKS];
  for (const t of tasks)
    if (!(RETRIEVAL_TASKS as readonly string[]).includes(t))
      throw new UsageError(`--retrieval-tasks: unknown task ${JSON.stringify(t)} (tasks: ${RETRIEVAL_TASKS.join(', ')})`);
  const modesText = values['retrieval-modes'];
  const modes = typeof modesText === 'string' ? modesText.split(',').map((t) => t.trim()) : [...MODES];
  for (const m of modes)
    if (!(MODES as readonly string[]).includes(m)) throw new UsageError(`--retrieval-modes: unknown mode ${JSON.stringify(m)} (modes: ${MODES.join(', ')})`);
  const depths = listOption(values, 'retrieval-depths', quick ? [0.5] : [0.1, 0.5, 0.9], (t) => {
    const d = Number(t);
    if (!(d >= 0 && d <= 1)) throw new UsageError(`--retrieval-depths: ${JSON.stringify(t)} is not within [0, 1]`);
    return d;
  });
  const positive = (name: string) => (t: string) => positiveIntOption({ [name]: t }, name, 1);
  const modelText = values['retrieval-model'];
  return {
    modelDir: typeof modelText === 'string' ? modelText : join(REPO_ROOT, 'models/v41-mini-128k'),
    corpusDir: join(REPO_ROOT, 'training/data/corpus'),
    tasks: tasks as RetrievalTask[],
    lengths: tokenCountsOption(values, 'retrieval-lengths', quick ? [1024] : [1024, 4096, 16384, 32768]),
    depths,
    samples: positiveIntOption(values, 'retrieval-samples', 1),
    replays: listOption(values, 'retrieval-replays', quick ? [128] : [128, 512, 2560], positive('retrieval-replays')),
    modes: modes as Mode[],
    exactMaxTokens: typeof values['retrieval-exact-max'] === 'string' ? tokenCount(values['retrieval-exact-max'], 'retrieval-exact-max') : 16384,
    klTokens: typeof values['retrieval-kl-tokens'] === 'string' ? tokenCount(values['retrieval-kl-tokens'], 'retrieval-kl-tokens', 0) : quick ? 1024 : 4096,
    klReplays: listOption(values, 'retrieval-kl-replays', quick ? [128] : [32, 128, 512, 2560], positive('retrieval-kl-replays')),
    klPassages: typeof values['retrieval-kl-passages'] === 'string' ? klPassagesOption(values['retrieval-kl-passages']) : quick ? 1 : KL_PASSAGE_STARTS.length,
    seed: positiveIntOption(values, 'seed', 1),
    jsonPath: typeof values['retrieval-json'] === 'string' ? values['retrieval-json'] : null,
  };
}

function klPassagesOption(text: string): number {
  const n = Number(text);
  if (!(Number.isInteger(n) && n >= 1 && n <= KL_PASSAGE_STARTS.length))
    throw new UsageError(`--retrieval-kl-passages must be an integer in [1, ${KL_PASSAGE_STARTS.length}], got ${text}`);
  return n;
}

export const retrievalSuite: BenchSuite = {
  name: 'retrieval',
  summary:
    "retrieval on real text (passkey, NIAH single/multi-key/multi-value, variable tracking): exact, stored document with R = 128/512/2560, through the pipeline; needles in each layer's top-k; KL(exact ‖ replay) on real text",
  options: {
    'retrieval-model': { type: 'string', description: 'model directory', defaultText: 'models/v41-mini-128k', valueName: 'DIR' },
    'retrieval-tasks': { type: 'string', description: 'tasks', defaultText: RETRIEVAL_TASKS.join(','), valueName: 'T,T' },
    'retrieval-lengths': {
      type: 'string',
      description: 'prompt lengths in tokens (K = 1024)',
      defaultText: '1K,4K,16K,32K (1K with --quick)',
      valueName: 'N,N',
    },
    'retrieval-depths': {
      type: 'string',
      description: 'depths of the first needle in the haystack, 0..1',
      defaultText: '0.1,0.5,0.9 (0.5 with --quick)',
      valueName: 'D,D',
    },
    'retrieval-samples': { type: 'string', description: 'instances per task, length and depth', defaultText: '1', valueName: 'N' },
    'retrieval-replays': {
      type: 'string',
      description: 'decoder replay lengths R of the stored-document path',
      defaultText: '128,512,2560 (128 with --quick)',
      valueName: 'R,R',
    },
    'retrieval-modes': { type: 'string', description: 'paths: exact, ced (stored document), pipeline', defaultText: MODES.join(','), valueName: 'M,M' },
    'retrieval-exact-max': { type: 'string', description: 'longest prompt the exact path runs', defaultText: '16K', valueName: 'N' },
    'retrieval-kl-tokens': {
      type: 'string',
      description: 'held-out text of the KL comparison (0 skips it)',
      defaultText: '4K (1K with --quick)',
      valueName: 'N',
    },
    'retrieval-kl-replays': {
      type: 'string',
      description: 'R values of the KL comparison',
      defaultText: '32,128,512,2560 (128 with --quick)',
      valueName: 'R,R',
    },
    'retrieval-kl-passages': {
      type: 'string',
      description: `held-out passages of the KL comparison (1–${KL_PASSAGE_STARTS.length})`,
      defaultText: `${KL_PASSAGE_STARTS.length} (1 with --quick)`,
      valueName: 'N',
    },
    seed: { type: 'string', description: 'seed of the instances', defaultText: '1', valueName: 'S' },
    'retrieval-json': { type: 'string', description: "write every instance's outputs, correctness and selections to FILE", valueName: 'FILE' },
    quick: { type: 'boolean', description: 'smoke run: 1K, depth 0.5, R = 128' },
  },
  async run(values, io) {
    io.out(await runRetrievalBench(parseRetrievalBenchOptions(values), io));
  },
};
