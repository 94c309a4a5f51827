/**
 * @module fairness-bench
 * Fair prefill between tenants, through the whole pipeline as processes on the
 * served model: tenant B's long prompt (the prefill route) and small document, each timed alone, then
 * again while tenant A floods the prefill queue with documents (its documents hold every base slot
 * of the encoder). Prints each time alone, under the flood, and their ratio (goal ≤ 2×), and how
 * many of A's documents were still waiting then.
 *
 * `npm run bench -- fairness [--fairness-reserved-slots 0]` (0: the encoder takes no job past its
 * concurrency, as the encoder had before its reserved slots).
 */
import { API_KEY, OTHER_API_KEY, Pipeline, connectRedis } from '@csa2/test';
import { completion, documentStatus, documentsReady, postDocuments, secs, sleep, tokenIds } from './api-client.js';
import { SERVED_MODEL_DIR } from './recovery-bench.js';
import type { BenchIo, BenchSuite, OptionValues } from './suite.js';
import { UsageError, positiveIntOption } from './suite.js';
import { markdownTable } from './table.js';

export interface FairnessBenchOptions {
  readonly modelDir: string;
  readonly reservedSlots: number | null;
  readonly floodDocuments: number;
  readonly floodTokens: number;
  readonly promptTokens: number;
  readonly documentTokens: number;
  readonly samples: number;
}

export async function runFairnessBench(o: FairnessBenchOptions, io: BenchIo): Promise<string> {
  const env: Record<string, string> = {
    CSA2_THREADS: 'auto',
    CSA2_PROGRESS_INTERVAL_MS: '0',
    ...(o.reservedSlots !== null ? { CSA2_PREFILL_RESERVED_SLOTS: String(o.reservedSlots) } : {}),
  };
  const pipe = await Pipeline.start({ modelDir: o.modelDir, env });
  const redis = connectRedis(pipe.redis.url);
  let seq = 0;
  /** Where a prefill job's time went: queued (added → started) and running (started → finished), from BullMQ's record. */
  const jobSplit = async (jobId: string): Promise<string> => {
    const [ts, p, f] = await redis.hmget(`bull:csa2-prefill:${jobId}`, 'timestamp', 'processedOn', 'finishedOn');
    // a document is ready once its manifest is written, a moment before its job is marked finished
    return `queued ${secs(Number(p) - Number(ts))} s + encoding ${f === null ? `until ready` : `${secs(Number(f) - Number(p))} s`}`;
  };
  const splits: string[] = [];
  const promptJobs = async (): Promise<Set<string>> =>
    new Set((await redis.keys('bull:csa2-prefill:req.*.prefill')).map((k) => k.slice('bull:csa2-prefill:'.length)));
  // B's requests: a long prompt (different ids each time, so no stored chunk is re-used) and a small document
  const promptOnce = async (): Promise<number> => {
    const before = await promptJobs();
    const r = await completion(pipe.url, OTHER_API_KEY, { prompt: tokenIds(o.promptTokens, 7000 + ++seq), max_tokens: 4, ignore_eos: true });
    if (r.status !== 200) throw new Error(`tenant B's prompt: ${r.status} ${r.body}`);
    for (const id of await promptJobs()) if (!before.has(id)) splits.push(`prompt ${seq}: ${await jobSplit(id)} of ${secs(r.ms)} s`);
    return r.ms;
  };
  const documentOnce = async (): Promise<number> => {
    const id = `b-doc-${++seq}`;
    const t0 = performance.now();
    await postDocuments(pipe.url, OTHER_API_KEY, [{ id, tokenIds: tokenIds(o.documentTokens, 9000 + seq) }]);
    const at = (await documentsReady(pipe.url, OTHER_API_KEY, [id], 900_000, 100)).get(id);
    if (typeof at !== 'number') throw new Error(`tenant B's document ${id}: ${String(at)}`);
    splits.push(`document ${seq}: ${await jobSplit(`doc.other.${id}`)} of ${secs(at - t0)} s`);
    return at - t0;
  };
  const best = async (f: () => Promise<number>): Promise<number[]> => {
    const out: number[] = [];
    for (let i = 0; i < o.samples; i++) out.push(await f());
    return out;
  };
  try {
    io.log('fairness: tenant B alone');
    const soloPrompt = await best(promptOnce);
    const soloDocument = await best(documentOnce);
    io.log(`fairness: tenant A floods the prefill queue with ${o.floodDocuments} documents`);
    const flood = Array.from({ length: o.floodDocuments }, (_, i) => ({ id: `a-flood-${i}`, tokenIds: tokenIds(o.floodTokens, 3000 + i) }));
    await postDocuments(pipe.url, API_KEY, flood);
    const deadline = performance.now() + 300_000;
    for (;;) {
      const s = await Promise.all(flood.slice(0, 8).map((d) => documentStatus(pipe.url, API_KEY, d.id)));
      if (s.filter((x) => x.status === 'encoding' && x.tokensDone > 0).length >= Math.min(4, o.floodDocuments)) break;
      if (performance.now() > deadline) throw new Error('the flood did not start encoding within 300 s');
      await sleep(100);
    }
    const floodPrompt = await best(promptOnce);
    const floodDocument = await best(documentOnce);
    const states = await Promise.all(flood.map((d) => documentStatus(pipe.url, API_KEY, d.id)));
    const waiting = states.filter((s) => s.status !== 'ready').length;
    const med = (xs: readonly number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)] as number;
    const row = (what: string, solo: number[], flooded: number[]) => [
      what,
      solo.map((ms) => secs(ms)).join(', '),
      flooded.map((ms) => secs(ms)).join(', '),
      `${(med(flooded) / med(solo)).toFixed(2)}×`,
    ];
    return [
      `### Prefill fairness: tenant B alone and while tenant A floods the prefill queue (${o.floodDocuments} × ${o.floodTokens}-token documents; reserved prefill slots: ${o.reservedSlots ?? 'default'})`,
      '',
      markdownTable(
        [
          { header: "tenant B's request", align: 'left' },
          { header: 'alone (s)', align: 'left' },
          { header: 'under the flood (s)', align: 'left' },
          { header: 'ratio (medians)', align: 'left' },
        ],
        [
          row(`${o.promptTokens}-token prompt, 4 tokens out (prefill route)`, soloPrompt, floodPrompt),
          row(`${o.documentTokens}-token document, POST to ready`, soloDocument, floodDocument),
        ],
      ),
      '',
      `Tenant A's documents not ready when B's last request ended: ${waiting} of ${o.floodDocuments}. Tenant B's prefill jobs (alone, then under the flood): ${splits.join('; ')}.`,
      '',
    ].join('\n');
  } finally {
    redis.disconnect();
    await pipe.stop();
  }
}

export function parseFairnessOptions(values: OptionValues): FairnessBenchOptions {
  const rs = values['fairness-reserved-slots'];
  const reservedSlots = rs === undefined ? null : Number(rs);
  if (reservedSlots !== null && !(Number.isSafeInteger(reservedSlots) && reservedSlots >= 0))
    throw new UsageError(`--fairness-reserved-slots must be an integer ≥ 0, got ${String(rs)}`);
  return {
    modelDir: typeof values['fairness-model'] === 'string' ? values['fairness-model'] : SERVED_MODEL_DIR,
    reservedSlots,
    floodDocuments: positiveIntOption(values, 'fairness-flood-documents', 12),
    floodTokens: positiveIntOption(values, 'fairness-flood-tokens', 8000),
    promptTokens: positiveIntOption(values, 'fairness-prompt-tokens', 2500),
    documentTokens: positiveIntOption(values, 'fairness-document-tokens', 1000),
    samples: positiveIntOption(values, 'fairness-samples', 2),
  };
}

export const fairnessSuite: BenchSuite = {
  name: 'fairness',
  summary: "tenant B's long prompt and small document alone and while tenant A floods the prefill queue with documents (~4 min)",
  options: {
    'fairness-model': { type: 'string', description: 'model directory', defaultText: 'models/v41-mini-128k', valueName: 'DIR' },
    'fairness-reserved-slots': {
      type: 'string',
      description: 'CSA2_PREFILL_RESERVED_SLOTS of the encoder (0: none, as before)',
      defaultText: "the encoder's default",
      valueName: 'N',
    },
    'fairness-flood-documents': { type: 'string', description: 'documents tenant A queues', defaultText: '12', valueName: 'N' },
    'fairness-flood-tokens': { type: 'string', description: 'tokens per flood document', defaultText: '8000', valueName: 'N' },
    'fairness-prompt-tokens': { type: 'string', description: "tokens of tenant B's long prompt", defaultText: '2500', valueName: 'N' },
    'fairness-document-tokens': { type: 'string', description: "tokens of tenant B's small document", defaultText: '1000', valueName: 'N' },
    'fairness-samples': { type: 'string', description: "times each of B's requests is timed, alone and under the flood", defaultText: '2', valueName: 'N' },
  },
  async run(values, io) {
    io.out(await runFairnessBench(parseFairnessOptions(values), io));
  },
};
