/**
 * @module testing/harness
 * Test support (not exported from the package): a gateway app around a private redis-server and a
 * temporary filesystem store, plus fakes of the WORKERS (real BullMQ workers on the real queues that
 * write real stream entries) — never a fake of Redis.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { pino } from 'pino';
import { fixturesRoot } from '@csa2/core/testing';
import { FsObjectStore, encodeManifest, manifestObjectKey, type DocumentManifest } from '@csa2/artifacts';
import {
  DECODE_QUEUE,
  PREFILL_QUEUE,
  Worker,
  connectRedis,
  createServiceLogger,
  encodeStreamEntry,
  startLocalRedis,
  streamKey,
  type DecodeJob,
  type DecodeResult,
  type Env,
  type Job,
  type LocalRedis,
  type PrefillJob,
  type PrefillResult,
  type Redis,
  type StreamEntry,
} from '@csa2/jobs';
import { createApp, type GatewayApp } from '../app.js';
import { loadGatewayConfig } from '../config.js';
import type { GatewayDeps } from '../capabilities.js';
import { connectGatewayDeps, type ConnectedDeps } from '../composition-root.js';
import { pollUntil } from '@csa2/jobs/testing';

export const MODEL_DIR = join(fixturesRoot(), 'deepseek-v41-tiny-a');
export const MODEL_NAME = 'tiny-a';
export const KEY_A = 'sk-test-tenant-a-0001';
export const KEY_B = 'sk-test-tenant-b-0002';
export const TENANT_A = 'tenant-a';
export const TENANT_B = 'tenant-b';

export interface Harness {
  readonly localRedis: LocalRedis;
  readonly storeDir: string;
  readonly store: FsObjectStore;
  readonly env: Env;
  readonly connected: ConnectedDeps;
  readonly deps: GatewayDeps;
  readonly app: GatewayApp;
  /** A plain connection for the test's own reads and writes. */
  readonly redis: Redis;
  /** Closes the workers started through the harness, the deps, Redis and the store directory. */
  close(): Promise<void>;
  /** Registers something to close with the harness. */
  track(closer: () => Promise<unknown>): void;
}

/** Env for the gateway around `redisUrl` and `storeDir`, with test-sized limits. */
export function testEnv(redisUrl: string, storeDir: string, overrides: Env = {}): Env {
  return {
    REDIS_URL: redisUrl,
    CSA2_STORE_URL: pathToFileURL(storeDir).href,
    CSA2_MODEL_DIR: MODEL_DIR,
    CSA2_MODEL_NAME: MODEL_NAME,
    CSA2_API_KEYS: `${KEY_A}:${TENANT_A},${KEY_B}:${TENANT_B}`,
    CSA2_LOG_LEVEL: 'silent',
    CSA2_MAX_BODY_BYTES: '65536',
    CSA2_MAX_TOKENS: '64',
    CSA2_DEFAULT_MAX_TOKENS: '16',
    CSA2_PREFILL_THRESHOLD_TOKENS: '100',
    CSA2_JOB_POLL_MS: '200',
    CSA2_READY_TIMEOUT_MS: '500',
    CSA2_REQUEST_TIMEOUT_MS: '20000',
    CSA2_SHUTDOWN_GRACE_MS: '500',
    PORT: '0',
    ...overrides,
  };
}

export interface HarnessOptions {
  /** Collect the gateway's log lines (parsed JSON, level debug and up) here instead of discarding them. */
  readonly logLines?: Record<string, unknown>[];
}

/** Starts Redis, a store directory and the app. Always `close()` it (in `after`). */
export async function startHarness(overrides: Env = {}, options: HarnessOptions = {}): Promise<Harness> {
  const localRedis = await startLocalRedis();
  const storeDir = mkdtempSync(join(tmpdir(), 'csa2-gateway-store-'));
  const closers: (() => Promise<unknown>)[] = [];
  try {
    const store = new FsObjectStore(storeDir, { durable: false });
    const env = testEnv(localRedis.url, storeDir, overrides);
    const lines = options.logLines;
    const logger =
      lines === undefined
        ? pino({ level: 'silent' })
        : createServiceLogger('gateway', 'debug', { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
    const connected = await connectGatewayDeps(loadGatewayConfig(env), { logger, store });
    const redis = connectRedis(localRedis.url);
    redis.on('error', () => undefined);
    const app = createApp(connected.deps);
    return {
      localRedis,
      storeDir,
      store,
      env,
      connected,
      deps: connected.deps,
      app,
      redis,
      track: (closer) => closers.push(closer),
      async close() {
        for (const c of closers.reverse()) await c().catch(() => undefined);
        redis.disconnect();
        await connected.close();
        await localRedis.stop();
        rmSync(storeDir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await localRedis.stop();
    rmSync(storeDir, { recursive: true, force: true });
    throw err;
  }
}

/** Appends entries to a request's stream the way the decoder does (XADD of encodeStreamEntry). */
export async function writeEntries(redis: Redis, requestId: string, entries: readonly StreamEntry[]): Promise<void> {
  for (const e of entries) await redis.xadd(streamKey(requestId), '*', ...encodeStreamEntry(e));
}

/** Token entries for `text` (one per UTF-16 unit, byte-tokenizer-like ids), starting at `from`. */
export function tokenEntries(text: string, from = 0): StreamEntry[] {
  return [...text].map((ch, i) => ({ kind: 'token', index: from + i, id: ch.charCodeAt(0) % 256, text: ch }));
}

export function finalEntry(
  job: DecodeJob,
  tokens: number,
  opts: { finishReason?: 'stop' | 'length' | 'cancelled'; cachedTokens?: number; promptTokens?: number; text?: string } = {},
): StreamEntry {
  const promptTokens = opts.promptTokens ?? job.promptIds.length;
  return {
    kind: 'final',
    finishReason: opts.finishReason ?? 'stop',
    usage: {
      prompt_tokens: promptTokens,
      completion_tokens: tokens,
      total_tokens: promptTokens + tokens,
      prompt_tokens_details: { cached_tokens: opts.cachedTokens ?? 0 },
    },
    tokens,
    ...(opts.text !== undefined ? { text: opts.text } : {}),
  };
}

/**
 * A fake decoder worker: a real BullMQ Worker on the decode queue whose processor is the test's.
 * The processor gets the job and a Redis connection to write the stream with.
 */
export function fakeDecoder(
  h: Harness,
  process: (job: Job<DecodeJob, DecodeResult>, redis: Redis) => Promise<DecodeResult | void>,
): Worker<DecodeJob, DecodeResult> {
  const connection = connectRedis(h.localRedis.url);
  connection.on('error', () => undefined);
  const worker = new Worker<DecodeJob, DecodeResult>(
    DECODE_QUEUE,
    async (job) => (await process(job, h.redis)) ?? { finishReason: 'stop', promptTokens: job.data.promptIds.length, cachedTokens: 0, completionTokens: 0 },
    { connection, concurrency: 4, drainDelay: 1 },
  );
  worker.on('error', () => undefined);
  h.track(async () => {
    await worker.close(true);
    connection.disconnect();
  });
  return worker;
}

/** A fake encoder worker on the prefill queue. */
export function fakeEncoder(
  h: Harness,
  process: (job: Job<PrefillJob, PrefillResult>, redis: Redis) => Promise<PrefillResult>,
): Worker<PrefillJob, PrefillResult> {
  const connection = connectRedis(h.localRedis.url);
  connection.on('error', () => undefined);
  const worker = new Worker<PrefillJob, PrefillResult>(PREFILL_QUEUE, async (job) => process(job, h.redis), { connection, concurrency: 4, drainDelay: 1 });
  worker.on('error', () => undefined);
  h.track(async () => {
    await worker.close(true);
    connection.disconnect();
  });
  return worker;
}

/**
 * Writes a valid manifest for (tenant, documentId) with `tokenCount` tokens in chunks of `chunkTokens`,
 * created at `createdAtMs` (the encoder writes the document's acceptedAtMs there).
 */
export async function writeManifest(
  h: Harness,
  tenant: string,
  documentId: string,
  tokenCount: number,
  chunkTokens = 64,
  createdAtMs = Date.now(),
): Promise<DocumentManifest> {
  const chunks = [];
  for (let start = 0, i = 0; start < tokenCount; start += chunkTokens, i++) {
    const end = Math.min(start + chunkTokens, tokenCount);
    chunks.push({ key: (i + 1).toString(16).padStart(64, 'a'), startToken: start, endToken: end, sizeBytes: 100 * (end - start), sha256: 'b'.repeat(64) });
  }
  const manifest: DocumentManifest = {
    formatVersion: 1,
    modelId: 'tiny-a',
    layoutId: 'test-layout',
    tenant,
    documentId,
    tokenCount,
    chunkTokens,
    chunks,
    createdAt: new Date(createdAtMs).toISOString(),
  };
  await h.store.put(manifestObjectKey(tenant, documentId), encodeManifest(manifest));
  return manifest;
}

/** A POST with JSON body and the key's Authorization header. */
export function post(path: string, body: unknown, key: string | null = KEY_A, init: RequestInit = {}): [string, RequestInit] {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (key !== null) headers['authorization'] = `Bearer ${key}`;
  return [`http://gateway.test${path}`, { method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body), ...init }];
}

export function get(path: string, key: string | null = KEY_A, method = 'GET'): [string, RequestInit] {
  return [`http://gateway.test${path}`, { method, headers: key !== null ? { authorization: `Bearer ${key}` } : {} }];
}

/** The data payloads of an SSE body, checking the framing: only `data: …\n\n` events and `: …` comments. */
export function parseSse(raw: string): string[] {
  const events = raw.split('\n\n');
  if (events.at(-1) !== '') throw new Error(`SSE body does not end with a blank line: ${JSON.stringify(raw.slice(-40))}`);
  events.pop();
  const data: string[] = [];
  for (const e of events) {
    if (e.startsWith(':')) continue;
    if (!e.startsWith('data: ') || e.includes('\n')) throw new Error(`malformed SSE event ${JSON.stringify(e)}`);
    data.push(e.slice('data: '.length));
  }
  return data;
}

/** Polls `check` until it returns a value other than undefined, or fails after `timeoutMs` (@csa2/jobs/testing pollUntil). */
export function waitFor<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 10_000): Promise<T> {
  return pollUntil(what, check, { timeoutMs });
}
