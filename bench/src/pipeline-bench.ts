/**
 * @module pipeline-bench
 * Overhead of the pipeline (issue "pipeline", Measure), side by side in one run:
 *   1. a 1-token completion through gateway + queue + decoder worker (HTTP, official request shape)
 *      against the same generation in one process (Engine on this thread): p50/p99 and the ratio;
 *   2. 1, 8 and 32 concurrent streamed completions through the pipeline (one batching decoder worker):
 *      TTFT p50/p99, aggregate tokens/s and how long all took, against the same requests one at a time;
 *   3. time to first token for a question on an ingested document against sending the document's
 *      whole text as the prompt (routed through an encoder worker as a long prompt).
 * Processes: a private redis-server, the gateway, one encoder and one decoder worker (the test harness
 * of @csa2/test), on a seeded tiny model (v41-tiny config, byte vocabulary, context 40960).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Engine } from '@csa2/engine';
import { API_KEY, OTHER_API_KEY, Pipeline, seededTestModel } from '@csa2/test';
import type { BenchIo, BenchSuite, OptionValues } from './suite.js';
import { UsageError, positiveIntOption } from './suite.js';
import { percentile } from './stats.js';
import { fmtDuration, markdownTable } from './table.js';

export interface PipelineBenchOptions {
  readonly samples: number;
  /** Timed rounds of each concurrency level, after a first (reported apart). */
  readonly rounds: number;
  /** Concurrency levels of the streamed-completions comparison. */
  readonly concurrencyLevels: readonly number[];
  /** Tokens each streamed completion generates. */
  readonly streamTokens: number;
  readonly docTokens: number;
}

async function completion(
  url: string,
  body: Record<string, unknown>,
  apiKey = API_KEY,
): Promise<{ ms: number; ttftMs: number; json: Record<string, unknown> }> {
  const t0 = performance.now();
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', ...body }),
  });
  if (!r.ok) throw new Error(`completion failed: ${r.status} ${await r.text()}`);
  if (body['stream'] !== true) {
    const json = (await r.json()) as Record<string, unknown>;
    const ms = performance.now() - t0;
    return { ms, ttftMs: ms, json };
  }
  const reader = (r.body as ReadableStream<Uint8Array>).getReader();
  let ttftMs = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (ttftMs === 0 && value !== undefined && new TextDecoder().decode(value).includes('"text"')) ttftMs = performance.now() - t0;
  }
  return { ms: performance.now() - t0, ttftMs, json: {} };
}

/** CPU seconds (user + system) a process has used so far, from /proc (Linux); null where it cannot be read. */
function cpuSeconds(pid: number | undefined): number | null {
  if (pid === undefined) return null;
  try {
    // fields after the command name, which is in parentheses and may hold spaces: utime and stime are 14 and 15
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100; // USER_HZ is 100 on Linux
  } catch {
    return null;
  }
}

/** CPU seconds per role of the pipeline's processes (and this process, the clients), for one measured span. */
function cpuByRole(pipe: Pipeline): Map<string, number | null> {
  const roles = new Map<string, number | null>();
  for (const [id, child] of pipe.procs) roles.set(id.replace(/#\d+$/, ''), cpuSeconds(child.pid));
  roles.set('redis', cpuSeconds(pipe.redis.process.pid));
  const self = process.cpuUsage();
  roles.set('clients (this process)', (self.user + self.system) / 1e6);
  return roles;
}

export async function runPipelineBench(opts: PipelineBenchOptions, io: BenchIo): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'csa2-bench-pipe-'));
  const modelDir = await seededTestModel(dir, 40960);
  io.log('pipeline: starting redis, gateway, encoder and decoder workers');
  const pipe = await Pipeline.start({ modelDir, env: { CSA2_LOG_LEVEL: 'info', CSA2_PREFILL_THRESHOLD_TOKENS: '2048', CSA2_MAX_TOKENS: '4096' } });
  const engine = await Engine.open({ modelDir, runtime: { intraOpThreads: 1 } });
  const out: string[] = [];
  try {
    // 1. one token: pipeline vs in-process
    const prompt = 'Overhead probe: ';
    const ids = engine.tokenize(prompt);
    for (let i = 0; i < 3; i++) await completion(pipe.url, { prompt, max_tokens: 1, temperature: 0 }); // warm-up
    await engine.generate({ promptIds: ids, maxTokens: 1, sampling: { temperature: 0, topP: 1, seed: 0 } });
    const viaPipe: number[] = [];
    const local: number[] = [];
    io.log(`pipeline: ${opts.samples} one-token completions each way`);
    for (let i = 0; i < opts.samples; i++) {
      viaPipe.push((await completion(pipe.url, { prompt, max_tokens: 1, temperature: 0 })).ms);
      const t0 = performance.now();
      await engine.generate({ promptIds: ids, maxTokens: 1, sampling: { temperature: 0, topP: 1, seed: 0 } });
      local.push(performance.now() - t0);
    }
    out.push(
      `### Pipeline overhead: a 1-token completion (${ids.length}-token prompt), ${opts.samples} samples`,
      '',
      markdownTable(
        [{ header: 'path', align: 'left' }, { header: 'p50' }, { header: 'p99' }],
        [
          ['gateway → queue → decoder worker → stream → HTTP', fmtDuration(percentile(viaPipe, 50)), fmtDuration(percentile(viaPipe, 99))],
          ['same generation in one process', fmtDuration(percentile(local, 50)), fmtDuration(percentile(local, 99))],
          ['ratio', `${(percentile(viaPipe, 50) / percentile(local, 50)).toFixed(1)}x`, `${(percentile(viaPipe, 99) / percentile(local, 99)).toFixed(1)}x`],
        ],
      ),
      '',
    );

    // 2. 1, 8, 32 … concurrent streamed completions against the same requests one at a time
    const streamTokens = opts.streamTokens;
    const request = (i: number) => ({
      prompt: `Stream ${i} of the concurrency probe: `,
      max_tokens: streamTokens,
      temperature: 0.8,
      seed: i,
      stream: true,
      ignore_eos: true,
    });
    const rows: string[][] = [];
    const cpuRows: string[][] = [];
    for (const n of opts.concurrencyLevels) {
      io.log(`pipeline: ${n} concurrent streamed ${streamTokens}-token completions (a first round, then ${opts.rounds} timed), then the same one at a time`);
      const round = () => Promise.all(Array.from({ length: n }, (_, i) => completion(pipe.url, request(i))));
      // the first round at this concurrency meets the batch shapes for the first time (onnxruntime's, the JIT's):
      // reported apart; the timed rounds after it are the steady state
      let t0 = performance.now();
      await round();
      const firstMs = performance.now() - t0;
      const cpu0 = cpuByRole(pipe);
      const roundMs: number[] = [];
      const ttft: number[] = [];
      for (let k = 0; k < opts.rounds; k++) {
        t0 = performance.now();
        const together = await round();
        roundMs.push(performance.now() - t0);
        ttft.push(...together.map((r) => r.ttftMs));
      }
      const togetherMs = percentile(roundMs, 50);
      const timedMs = roundMs.reduce((a, b) => a + b, 0);
      const cpu1 = cpuByRole(pipe);
      const used = [...cpu1].map(([role, v]) => [role, v === null || cpu0.get(role) == null ? null : (v - (cpu0.get(role) as number)) / opts.rounds] as const);
      const total = used.reduce((a, [, v]) => a + (v ?? 0), 0);
      cpuRows.push([
        String(n),
        fmtDuration(timedMs / opts.rounds),
        ...used.map(([role, v]) => (v === null ? `${role}: –` : `${role} ${v.toFixed(2)} s`)),
        `${total.toFixed(2)} s = ${((total * 1000 * opts.rounds) / timedMs).toFixed(2)} cores`,
      ]);
      t0 = performance.now();
      const serial: Array<{ ms: number; ttftMs: number }> = [];
      for (let i = 0; i < n; i++) serial.push(await completion(pipe.url, request(i)));
      const serialMs = performance.now() - t0;
      const oneMs = percentile(
        serial.map((r) => r.ms),
        50,
      );
      rows.push([
        String(n),
        fmtDuration(percentile(ttft, 50)),
        fmtDuration(percentile(ttft, 99)),
        ((n * streamTokens * 1000) / togetherMs).toFixed(0),
        ((n * streamTokens * 1000) / serialMs).toFixed(0),
        `${fmtDuration(togetherMs)} (${roundMs.map((ms) => fmtDuration(ms)).join(', ')})`,
        `${(togetherMs / oneMs).toFixed(2)}×`,
        `${fmtDuration(firstMs)} (${(firstMs / oneMs).toFixed(2)}×)`,
      ]);
    }
    out.push(
      `### Concurrent streamed ${streamTokens}-token completions through gateway → queue → one decoder worker (batching), against the same requests one at a time (${opts.rounds} timed rounds after a first one; TTFT over the timed rounds)`,
      '',
      markdownTable(
        [
          { header: 'concurrent' },
          { header: 'TTFT p50' },
          { header: 'TTFT p99' },
          { header: 'aggregate tok/s' },
          { header: 'one at a time tok/s' },
          { header: 'all done in: median (each timed round)' },
          { header: '÷ one request (p50)' },
          { header: 'first round (÷ one request)' },
        ],
        rows,
      ),
      '',
      `CPU time of each process while the concurrent completions ran (user + system, /proc; a timed round's mean), against the machine's ${availableParallelism()} cores:`,
      '',
      markdownTable(
        [
          { header: 'concurrent' },
          { header: 'wall' },
          ...(cpuRows[0] ?? []).slice(2, -1).map(() => ({ header: 'process', align: 'left' as const })),
          { header: 'all', align: 'left' },
        ],
        cpuRows,
      ),
      '',
    );

    // 3. a question on an ingested document vs the whole text as the prompt
    const text = Array.from({ length: Math.ceil(opts.docTokens / 32) }, (_, i) => `Section ${i} of the long document. `.padEnd(32, '.'))
      .join('')
      .slice(0, opts.docTokens);
    io.log(`pipeline: ingesting a ${text.length}-token document`);
    const created = await fetch(`${pipe.url}/v1/documents`, {
      method: 'POST',
      headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ id: 'bench-doc', text }),
    });
    if (created.status !== 202) throw new Error(`ingest failed: ${created.status} ${await created.text()}`);
    const tIngest = performance.now();
    for (;;) {
      const st = (await (await fetch(`${pipe.url}/v1/documents/bench-doc`, { headers: { authorization: `Bearer ${API_KEY}` } })).json()) as { status: string };
      if (st.status === 'ready') break;
      if (st.status === 'failed') throw new Error(`document failed: ${JSON.stringify(st)}`);
      await new Promise((r) => setTimeout(r, 200));
    }
    const ingestMs = performance.now() - tIngest;
    const question = ' Question: what does section 3 say?';
    io.log('pipeline: questions on the stored document');
    const storedFirst = await completion(pipe.url, { prompt: question, max_tokens: 4, temperature: 0, stream: true, document_id: 'bench-doc' });
    const stored = await completion(pipe.url, {
      prompt: ' Another question: and section 7?',
      max_tokens: 4,
      temperature: 0,
      stream: true,
      document_id: 'bench-doc',
    });
    // another tenant shares no chunks with the ingested document, so nothing is reused
    io.log('pipeline: the whole text as the prompt (another tenant)');
    const whole = await completion(pipe.url, { prompt: text + question, max_tokens: 4, temperature: 0, stream: true }, OTHER_API_KEY);
    out.push(
      `### Time to first token: a question on a ${text.length}-token document (ingested in ${fmtDuration(ingestMs)})`,
      '',
      markdownTable(
        [{ header: 'request', align: 'left' }, { header: 'TTFT' }],
        [
          ['first question with document_id (artifact fetched, worker cold for these shapes)', fmtDuration(storedFirst.ttftMs)],
          ['next question with document_id (chunk cache warm)', fmtDuration(stored.ttftMs)],
          ['whole text + question as the prompt, another tenant (encoder worker encodes it all first)', fmtDuration(whole.ttftMs)],
          ['ratio whole text / next question', `${(whole.ttftMs / stored.ttftMs).toFixed(1)}x`],
        ],
      ),
    );
    return out.join('\n');
  } finally {
    await engine.close();
    await pipe.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

export function parsePipelineBenchOptions(values: OptionValues): PipelineBenchOptions {
  const int = (name: string, fallback: number): number => positiveIntOption(values, name, fallback);
  const quick = values['quick'] === true;
  const levels =
    values['concurrency'] === undefined
      ? [1, 8, 32]
      : String(values['concurrency'])
          .split(',')
          .map((v) => Number(v));
  if (levels.some((n) => !Number.isSafeInteger(n) || n < 1))
    throw new UsageError(`--concurrency must be a list of positive integers, got ${String(values['concurrency'])}`);
  return {
    samples: int('samples', quick ? 10 : 50),
    rounds: int('pipeline-rounds', quick ? 1 : 3),
    concurrencyLevels: levels,
    streamTokens: int('stream-tokens', quick ? 16 : 64),
    docTokens: int('pipeline-doc-tokens', quick ? 2048 : 32768),
  };
}

export const pipelineSuite: BenchSuite = {
  name: 'pipeline',
  summary: 'gateway + queue + worker overhead against one process, concurrent throughput, TTFT on an ingested document',
  options: {
    samples: { type: 'string', description: 'one-token completions per path', defaultText: '50 (10 with --quick)', valueName: 'N' },
    'pipeline-rounds': {
      type: 'string',
      description: 'timed rounds of each concurrency level, after a first one reported apart',
      defaultText: '3 (1 with --quick)',
      valueName: 'N',
    },
    concurrency: { type: 'string', description: 'concurrency levels of the streamed-completions comparison', defaultText: '1,8,32', valueName: 'N,N' },
    'stream-tokens': { type: 'string', description: 'tokens per streamed completion', defaultText: '64 (16 with --quick)', valueName: 'N' },
    'pipeline-doc-tokens': { type: 'string', description: 'document length (byte tokens)', defaultText: '32768 (2048 with --quick)', valueName: 'N' },
  },
  async run(values, io) {
    io.out(await runPipelineBench(parsePipelineBenchOptions(values), io));
  },
};
