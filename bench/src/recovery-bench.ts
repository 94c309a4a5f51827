/**
 * @module recovery-bench
 * Recovery after a worker is killed, through the whole pipeline as processes (the
 * @csa2/test harness: redis-server, gateway, one encoder, one decoder), on the served model
 * (`models/v41-mini-128k`) with the services' own lock and stalled-check defaults unless given:
 *
 * 1. **decoder**: N streams decode; once each has some tokens the decoder is SIGKILLed and a new one
 *    started at once. Prints when the first stream got a token again and when the last one ended
 *    (from the kill), streams lost (no [DONE], an error) and streams whose text is not the text the same
 *    request gets undisturbed (run again afterwards: greedy decoding is deterministic), which a
 *    duplicated or skipped token would show.
 * 2. **encoder**: D documents encode; then L long prompts (the prefill route) and S short streams are
 *    sent; once the long prompts are queued or encoding the encoder is SIGKILLed and a new one started
 *    at once. Prints when each long prompt's stream ended and when each document became ready (from
 *    the kill), and what was lost or not whole.
 *
 * `npm run bench -- recovery [--recovery-lock-ms MS --recovery-stalled-ms MS] [--recovery-reserved-slots N]`
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { API_KEY, Pipeline, REPO_ROOT, connectRedis } from '@csa2/test';
import { completion, documentStatus, documentsReady, postDocuments, secs, sleep, streamCompletion, tokenIds, type StreamOutcome } from './api-client.js';
import type { BenchIo, BenchSuite, OptionValues } from './suite.js';
import { UsageError, positiveIntOption } from './suite.js';
import { markdownTable } from './table.js';

export const SERVED_MODEL_DIR = join(REPO_ROOT, 'models/v41-mini-128k');

export interface RecoveryBenchOptions {
  readonly modelDir: string;
  /** CSA2_LOCK_DURATION_MS / CSA2_STALLED_INTERVAL_MS for the workers; null = their defaults. */
  readonly lockMs: number | null;
  readonly stalledMs: number | null;
  /** CSA2_PREFILL_RESERVED_SLOTS; null = the encoder's default. */
  readonly reservedSlots: number | null;
  readonly streams: number;
  readonly streamTokens: number;
  readonly documents: number;
  readonly documentTokens: number;
  readonly longPrompts: number;
  readonly longPromptTokens: number;
  readonly scenarios: readonly ('decoder' | 'encoder')[];
  /** More environment for every service (--recovery-env NAME=VALUE,…). */
  readonly extraEnv: Readonly<Record<string, string>>;
}

function pipelineEnv(o: RecoveryBenchOptions): Record<string, string> {
  return {
    // '' = unset: the services' defaults (the harness's own are test values)
    CSA2_LOCK_DURATION_MS: o.lockMs === null ? '' : String(o.lockMs),
    CSA2_STALLED_INTERVAL_MS: o.stalledMs === null ? '' : String(o.stalledMs),
    ...(o.reservedSlots !== null ? { CSA2_PREFILL_RESERVED_SLOTS: String(o.reservedSlots) } : {}),
    CSA2_THREADS: 'auto',
    ...o.extraEnv,
  };
}

const settings = (o: RecoveryBenchOptions): string =>
  `lock ${o.lockMs === null ? 'default' : `${o.lockMs} ms`}, stalled check ${o.stalledMs === null ? 'default' : `${o.stalledMs} ms`}${o.reservedSlots !== null ? `, reserved prefill slots ${o.reservedSlots}` : ''}${Object.entries(
    o.extraEnv,
  )
    .map(([k, v]) => `, ${k}=${v}`)
    .join('')}`;

function whole(s: StreamOutcome, tokens: number): boolean {
  return s.finished && s.error === null && s.completionTokens === tokens;
}

async function decoderKill(o: RecoveryBenchOptions, io: BenchIo): Promise<string[][]> {
  const pipe = await Pipeline.start({ modelDir: o.modelDir, env: pipelineEnv(o) });
  try {
    const bodies = Array.from({ length: o.streams }, (_, i) => ({
      prompt: tokenIds(48, 100 + i),
      max_tokens: o.streamTokens,
      ignore_eos: true,
      temperature: 0,
    }));
    const running = bodies.map((b) => streamCompletion(pipe.url, API_KEY, b));
    // wait until every stream holds a few tokens (its Redis stream), then kill the decoder
    const redis = connectRedis(pipe.redis.url);
    try {
      const deadline = performance.now() + 300_000;
      for (;;) {
        const keys = await redis.keys('csa2:stream:*');
        const progress = await Promise.all(keys.map((k) => redis.xlen(k)));
        if (keys.length >= o.streams && progress.every((n) => n >= 8)) break;
        if (performance.now() > deadline) throw new Error('the streams did not start within 300 s');
        await sleep(50);
      }
    } finally {
      redis.disconnect();
    }
    io.log(`recovery/decoder: ${o.streams} streams running; SIGKILL the decoder`);
    await pipe.kill('decoder', 'SIGKILL');
    const killedAt = performance.now();
    const killedAtWallMs = Date.now();
    const restart = pipe.startService('decoder').then(() => performance.now());
    const outs = await Promise.all(running);
    const readyAt = await restart;
    const restarted = await attemptStarts(pipe, 'csa2-decode', killedAtWallMs);
    const resumed = outs.map((s) => s.tokenTimesMs.find((t) => t > killedAt) ?? null).filter((t): t is number => t !== null);
    const lastEnd = Math.max(...outs.map((s) => s.endedAtMs));
    const lost = outs.filter((s) => !s.finished || s.error !== null).length;
    // the same requests undisturbed, for their texts
    io.log('recovery/decoder: the same requests again, undisturbed');
    const t0 = performance.now();
    const again = await Promise.all(bodies.map((b) => completion(pipe.url, API_KEY, b)));
    const undisturbedMs = performance.now() - t0;
    const differing = outs.filter((s, i) => !whole(s, o.streamTokens) || s.text !== again[i]?.text).length;
    return [
      [
        `decoder SIGKILL under ${o.streams} streams × ${o.streamTokens} tokens`,
        settings(o),
        `new decoder ready ${secs(readyAt - killedAt)} s; jobs running again ${restarted}; first token again ${resumed.length > 0 ? `${secs(Math.min(...resumed) - killedAt)} s` : 'never'}`,
        `${secs(lastEnd - killedAt)} s (the same ${o.streams} requests undisturbed: ${secs(undisturbedMs)} s)`,
        `${lost} of ${o.streams}`,
        `${differing} of ${o.streams}`,
      ],
    ];
  } finally {
    await pipe.stop();
  }
}

async function encoderKill(o: RecoveryBenchOptions, io: BenchIo): Promise<string[][]> {
  const pipe = await Pipeline.start({ modelDir: o.modelDir, env: { ...pipelineEnv(o), CSA2_PROGRESS_INTERVAL_MS: '0' } });
  try {
    const docs = Array.from({ length: o.documents }, (_, i) => ({ id: `recovery-doc-${i}`, tokenIds: tokenIds(o.documentTokens, 1000 + i) }));
    await postDocuments(pipe.url, API_KEY, docs);
    const deadline = performance.now() + 300_000;
    for (;;) {
      const s = await Promise.all(docs.map((d) => documentStatus(pipe.url, API_KEY, d.id)));
      // all taken by the encoder, at least one under way (an engine may run one tenant's documents one at a time)
      if (s.filter((x) => x.status === 'encoding').length >= Math.min(o.documents, 4) && s.some((x) => x.tokensDone > 0)) break;
      if (performance.now() > deadline) throw new Error('the documents did not start encoding within 300 s');
      await sleep(100);
    }
    const tokens = 32;
    const long = Array.from({ length: o.longPrompts }, (_, i) =>
      streamCompletion(pipe.url, API_KEY, { prompt: tokenIds(o.longPromptTokens, 500 + i), max_tokens: tokens, ignore_eos: true, temperature: 0 }),
    );
    const short = Array.from({ length: o.streams - o.longPrompts }, (_, i) =>
      streamCompletion(pipe.url, API_KEY, { prompt: tokenIds(48, 200 + i), max_tokens: tokens, ignore_eos: true, temperature: 0 }),
    );
    await sleep(1500); // the long prompts are on the prefill queue, or encoding
    io.log(`recovery/encoder: ${o.documents} documents encoding, ${o.longPrompts} long prompts sent; SIGKILL the encoder`);
    await pipe.kill('encoder', 'SIGKILL');
    const killedAt = performance.now();
    const killedAtWallMs = Date.now();
    const restart = pipe.startService('encoder').then(() => performance.now());
    const longOut = await Promise.all(long);
    const shortOut = await Promise.all(short);
    const ready = await documentsReady(
      pipe.url,
      API_KEY,
      docs.map((d) => d.id),
      900_000,
      250,
    );
    const readyAt = await restart;
    const restarted = await attemptStarts(pipe, 'csa2-prefill', killedAtWallMs);
    // the same long prompts again with nothing else running: the least they take on this machine
    const alone = await Promise.all(
      Array.from({ length: o.longPrompts }, (_, i) =>
        completion(pipe.url, API_KEY, { prompt: tokenIds(o.longPromptTokens, 500 + i), max_tokens: tokens, ignore_eos: true, temperature: 0 }),
      ),
    );
    const aloneMs = alone.map((r) => r.ms);
    const readyTimes = [...ready.values()].filter((v): v is number => typeof v === 'number');
    const docsLost = [...ready.values()].filter((v) => typeof v !== 'number').length;
    const fmtLong = longOut.map((s) => (whole(s, tokens) ? secs(s.endedAtMs - killedAt) : 'lost')).join(', ');
    return [
      [
        `encoder SIGKILL with ${o.documents} × ${o.documentTokens}-token documents encoding, ${o.longPrompts} × ${o.longPromptTokens}-token prompts and ${o.streams - o.longPrompts} short streams`,
        settings(o),
        `new encoder ready ${secs(readyAt - killedAt)} s; prefill jobs running again ${restarted}; long prompts done ${fmtLong} s (the same ${o.longPrompts} at once, nothing else running: ${aloneMs.map((ms) => secs(ms)).join(', ')} s); short streams by ${secs(Math.max(...shortOut.map((s) => s.endedAtMs)) - killedAt)} s`,
        `documents ready ${readyTimes.map((t) => secs(t - killedAt)).join(', ')} s`,
        `${longOut.concat(shortOut).filter((s) => !s.finished || s.error !== null).length} streams, ${docsLost} documents`,
        `${longOut.concat(shortOut).filter((s) => !whole(s, tokens)).length} streams not whole`,
      ],
    ];
  } finally {
    await pipe.stop();
  }
}

/** When the jobs of `queue` that started again after the kill did so (BullMQ's processedOn of their last attempt), from the kill. */
async function attemptStarts(pipe: Pipeline, queue: string, killedAtWallMs: number): Promise<string> {
  const redis = connectRedis(pipe.redis.url);
  try {
    const starts: number[] = [];
    for (const key of await redis.keys(`bull:${queue}:*`)) {
      if ((await redis.type(key)) !== 'hash') continue;
      const at = Number(await redis.hget(key, 'processedOn'));
      if (Number.isFinite(at) && at > killedAtWallMs) starts.push(at - killedAtWallMs);
    }
    starts.sort((a, b) => a - b);
    return starts.length === 0 ? 'none' : `${starts.length} from ${secs(starts[0] as number)} to ${secs(starts.at(-1) as number)} s`;
  } finally {
    redis.disconnect();
  }
}

export async function runRecoveryBench(o: RecoveryBenchOptions, io: BenchIo): Promise<string> {
  const rows: string[][] = [];
  if (o.scenarios.includes('decoder')) rows.push(...(await decoderKill(o, io)));
  if (o.scenarios.includes('encoder')) rows.push(...(await encoderKill(o, io)));
  const cfg = JSON.parse(readFileSync(join(o.modelDir, 'config.json'), 'utf8')) as { n_layers?: number; dim?: number };
  return [
    `### Recovery after SIGKILL (model ${o.modelDir.replace(`${REPO_ROOT}`, '')}: ${cfg.n_layers ?? '?'} layers, dim ${cfg.dim ?? '?'}; a new worker started at once)`,
    '',
    markdownTable(
      [
        { header: 'scenario', align: 'left' },
        { header: 'settings', align: 'left' },
        { header: 'first token again / streams done (from the kill)', align: 'left' },
        { header: 'all done / documents (from the kill)', align: 'left' },
        { header: 'lost', align: 'left' },
        { header: 'not identical / not whole', align: 'left' },
      ],
      rows,
    ),
    '',
  ].join('\n');
}

function optionalInt(values: OptionValues, name: string, min: number): number | null {
  const v = values[name];
  if (v === undefined) return null;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < min) throw new UsageError(`--${name} must be an integer ≥ ${min}, got ${String(v)}`);
  return n;
}

/** `NAME=VALUE,NAME=VALUE` (CSA2_* variables only) → an environment; UsageError naming the option otherwise. */
function parseEnvList(v: string | boolean | undefined): Record<string, string> {
  if (typeof v !== 'string' || v === '') return {};
  const out: Record<string, string> = {};
  for (const pair of v.split(',')) {
    const m = /^(CSA2_[A-Z0-9_]+)=([^,]*)$/.exec(pair.trim());
    if (m === null) throw new UsageError(`--recovery-env: NAME=VALUE pairs of CSA2_* variables, got "${pair}"`);
    out[m[1] as string] = m[2] as string;
  }
  return out;
}

export function parseRecoveryOptions(values: OptionValues): RecoveryBenchOptions {
  const scenarios = String(values['recovery-scenarios'] ?? 'decoder,encoder').split(',');
  for (const s of scenarios) if (s !== 'decoder' && s !== 'encoder') throw new UsageError(`--recovery-scenarios: decoder and/or encoder, got ${s}`);
  const o: RecoveryBenchOptions = {
    modelDir: typeof values['recovery-model'] === 'string' ? values['recovery-model'] : SERVED_MODEL_DIR,
    lockMs: optionalInt(values, 'recovery-lock-ms', 1000),
    stalledMs: optionalInt(values, 'recovery-stalled-ms', 100),
    reservedSlots: optionalInt(values, 'recovery-reserved-slots', 0),
    streams: positiveIntOption(values, 'recovery-streams', 20),
    streamTokens: positiveIntOption(values, 'recovery-stream-tokens', 200),
    documents: positiveIntOption(values, 'recovery-documents', 4),
    documentTokens: positiveIntOption(values, 'recovery-document-tokens', 15_000),
    longPrompts: positiveIntOption(values, 'recovery-long-prompts', 3),
    longPromptTokens: positiveIntOption(values, 'recovery-long-prompt-tokens', 2500),
    scenarios: scenarios as ('decoder' | 'encoder')[],
    extraEnv: parseEnvList(values['recovery-env']),
  };
  if (o.longPrompts > o.streams) throw new UsageError('--recovery-long-prompts must be at most --recovery-streams');
  return o;
}

export const recoverySuite: BenchSuite = {
  name: 'recovery',
  summary: 'a decoder or encoder SIGKILLed under load: time until every stream and document is done again, nothing lost or duplicated (~4 min)',
  options: {
    'recovery-model': { type: 'string', description: 'model directory', defaultText: 'models/v41-mini-128k', valueName: 'DIR' },
    'recovery-scenarios': { type: 'string', description: 'which worker to kill', defaultText: 'decoder,encoder', valueName: 'LIST' },
    'recovery-lock-ms': { type: 'string', description: 'CSA2_LOCK_DURATION_MS of the workers', defaultText: "the services' default", valueName: 'MS' },
    'recovery-stalled-ms': { type: 'string', description: 'CSA2_STALLED_INTERVAL_MS of the workers', defaultText: "the services' default", valueName: 'MS' },
    'recovery-reserved-slots': {
      type: 'string',
      description: 'CSA2_PREFILL_RESERVED_SLOTS of the encoder',
      defaultText: "the encoder's default",
      valueName: 'N',
    },
    'recovery-env': { type: 'string', description: 'more CSA2_* variables for every service, NAME=VALUE,…', defaultText: 'none', valueName: 'LIST' },
    'recovery-streams': { type: 'string', description: 'streams running when the worker is killed', defaultText: '20', valueName: 'N' },
    'recovery-stream-tokens': { type: 'string', description: 'tokens per stream (decoder scenario)', defaultText: '200', valueName: 'N' },
    'recovery-documents': { type: 'string', description: 'documents encoding when the encoder is killed', defaultText: '4', valueName: 'N' },
    'recovery-document-tokens': { type: 'string', description: 'tokens per document', defaultText: '15000', valueName: 'N' },
    'recovery-long-prompts': {
      type: 'string',
      description: 'streams with a long prompt (the prefill route), among the streams',
      defaultText: '3',
      valueName: 'N',
    },
    'recovery-long-prompt-tokens': { type: 'string', description: 'tokens per long prompt', defaultText: '2500', valueName: 'N' },
  },
  async run(values, io) {
    io.out(await runRecoveryBench(parseRecoveryOptions(values), io));
  },
};
