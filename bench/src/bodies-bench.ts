/**
 * @module bodies-bench
 * The gateway under large bodies, through the whole pipeline as processes on the
 * served model (whose tokenizer is a tokenizer.json): N concurrent POST /v1/documents, each
 *
 * - **at the body limit**: a text just under CSA2_MAX_BODY_BYTES (16 MiB) — refused for its length;
 * - **at the token limit**: a text of just under the model's context in tokens (one digit a token),
 *   accepted and tokenized in the gateway's tokenizer thread;
 *
 * and a 4-token completion sent right after them. Prints the gateway's peak RSS (VmHWM, its whole
 * life), the answers' statuses and the slowest, and the small completion's time against its time
 * alone (goal: ≤ 1 GB and within 1 s of alone).
 *
 * `npm run bench -- bodies [--bodies-count 32]`
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { API_KEY, Pipeline } from '@csa2/test';
import { completion, secs } from './api-client.js';
import { SERVED_MODEL_DIR } from './recovery-bench.js';
import type { BenchIo, BenchSuite, OptionValues } from './suite.js';
import { positiveIntOption } from './suite.js';
import { markdownTable } from './table.js';

export interface BodiesBenchOptions {
  readonly modelDir: string;
  readonly count: number;
  readonly smallSamples: number;
}

function memoryMb(pid: number): { rssMb: number; peakMb: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? Number.NaN);
  return { rssMb: kb('VmRSS') / 1024, peakMb: kb('VmHWM') / 1024 };
}

async function postDocument(url: string, body: string): Promise<{ status: number | string; ms: number; code: string }> {
  const t0 = performance.now();
  try {
    const r = await fetch(`${url}/v1/documents`, {
      method: 'POST',
      headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
      body,
      signal: AbortSignal.timeout(300_000),
    });
    const text = await r.text();
    let code = '';
    try {
      code = (JSON.parse(text) as { error?: { code?: string } }).error?.code ?? '';
    } catch {
      code = text.slice(0, 40);
    }
    return { status: r.status, ms: performance.now() - t0, code };
  } catch (err) {
    return { status: err instanceof Error ? err.name : 'error', ms: performance.now() - t0, code: '' };
  }
}

async function oneCase(o: BodiesBenchOptions, what: string, body: string, io: BenchIo): Promise<string[]> {
  const pipe = await Pipeline.start({ modelDir: o.modelDir, env: { CSA2_THREADS: 'auto' } });
  try {
    const pid = pipe.processes('gateway')[0]?.pid as number;
    const small = { prompt: 'It is a truth', max_tokens: 4, ignore_eos: true };
    const alone: number[] = [];
    for (let i = 0; i < o.smallSamples + 1; i++) {
      const r = await completion(pipe.url, API_KEY, small);
      if (r.status !== 200) throw new Error(`small completion: ${r.status} ${r.body}`);
      if (i > 0) alone.push(r.ms); // the first warms the decoder up
    }
    const before = memoryMb(pid);
    io.log(`bodies: ${o.count} × ${what} (${(body.length / 2 ** 20).toFixed(2)} MiB each)`);
    const t0 = performance.now();
    const posts = Array.from({ length: o.count }, () => postDocument(pipe.url, body));
    await new Promise((r) => setTimeout(r, 200)); // the bodies are on their way
    const during = await completion(pipe.url, API_KEY, small, 300_000);
    const answers = await Promise.all(posts);
    const after = memoryMb(pid);
    const statuses = new Map<string, number>();
    for (const a of answers)
      statuses.set(`${a.status}${a.code !== '' ? ` ${a.code}` : ''}`, (statuses.get(`${a.status}${a.code !== '' ? ` ${a.code}` : ''}`) ?? 0) + 1);
    const aloneMed = [...alone].sort((a, b) => a - b)[Math.floor((alone.length - 1) / 2)] as number;
    return [
      `${o.count} × ${what}`,
      `${before.rssMb.toFixed(0)} MB → peak ${after.peakMb.toFixed(0)} MB`,
      [...statuses.entries()].map(([k, n]) => `${n} × ${k}`).join(', '),
      `${secs(Math.max(...answers.map((a) => a.ms)))} s (all: ${secs(performance.now() - t0)} s)`,
      `${during.status === 200 ? `${(during.ms / 1000).toFixed(2)} s` : `${during.status} ${during.body.slice(0, 60)}`} (alone: ${(aloneMed / 1000).toFixed(2)} s)`,
    ];
  } finally {
    await pipe.stop();
  }
}

export async function runBodiesBench(o: BodiesBenchOptions, io: BenchIo): Promise<string> {
  const cfg = JSON.parse(readFileSync(join(o.modelDir, 'config.json'), 'utf8')) as { max_seq_len?: number };
  const maxTokens = (cfg.max_seq_len ?? 131_072) - 1;
  const atBodyLimit = JSON.stringify({ text: 'It is a truth universally acknowledged. '.repeat(Math.ceil((16 * 2 ** 20) / 40)).slice(0, 16 * 2 ** 20 - 64) });
  // one token a digit (the tokenizer splits digits): just under the context
  const atTokenLimit = JSON.stringify({ text: '7'.repeat(maxTokens - 8) });
  const rows = [
    await oneCase(o, 'bodies just under 16 MiB of text', atBodyLimit, io),
    await oneCase(o, `texts of ${maxTokens - 8} tokens (one digit a token)`, atTokenLimit, io),
  ];
  return [
    `### The gateway under ${o.count} concurrent large documents (served model's tokenizer.json), and a 4-token completion sent with them`,
    '',
    markdownTable(
      [
        { header: 'bodies', align: 'left' },
        { header: 'gateway RSS → peak (VmHWM)', align: 'left' },
        { header: 'answers', align: 'left' },
        { header: 'slowest answer', align: 'left' },
        { header: '4-token completion', align: 'left' },
      ],
      rows,
    ),
    '',
  ].join('\n');
}

export function parseBodiesOptions(values: OptionValues): BodiesBenchOptions {
  return {
    modelDir: typeof values['bodies-model'] === 'string' ? values['bodies-model'] : SERVED_MODEL_DIR,
    count: positiveIntOption(values, 'bodies-count', 32),
    smallSamples: positiveIntOption(values, 'bodies-small-samples', 3),
  };
}

export const bodiesSuite: BenchSuite = {
  name: 'bodies',
  summary: "the gateway's memory and a small request's time under 32 concurrent documents at the body limit and at the token limit (~2 min)",
  options: {
    'bodies-model': { type: 'string', description: 'model directory', defaultText: 'models/v41-mini-128k', valueName: 'DIR' },
    'bodies-count': { type: 'string', description: 'concurrent documents', defaultText: '32', valueName: 'N' },
    'bodies-small-samples': { type: 'string', description: 'times the small completion is timed alone', defaultText: '3', valueName: 'N' },
  },
  async run(values, io) {
    io.out(await runBodiesBench(parseBodiesOptions(values), io));
  },
};
