/**
 * @module documents/million-role
 * A child process of the million-token test (documents/million-tokens.test), in one pipeline role:
 *
 *   node million-role.js encode JSON   an encoder worker's work: the engine in a worker thread
 *                                      (EngineHost, warmed up, as encoderEngineOptions opens it), each
 *                                      document's token list read from the store (getTokenList, as the
 *                                      encoder processor reads a TokenListRef) and ingested;
 *   node million-role.js decode JSON   a decoder worker's work: EngineHost as decoderEngineOptions opens it
 *                                      (warm-up, document cache, chunk cache), questions on stored documents;
 *   node million-role.js core JSON     the same question without the engine: csa2-core's single-sequence
 *                                      entry points on a Sequence loaded by ArtifactReader, with model
 *                                      options of its own (other indexer paths).
 *
 * The argument is one JSON object (MillionRoleArgs). The process prints one JSON line (MillionRoleReport)
 * and exits; after every step it records the peak resident set so far (VmHWM, every thread of the
 * process), so the test can bound what each step added. The parent sets the glibc allocator
 * settings the worker images set (WORKER_MALLOC_ENV).
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { ArtifactReader, artifactLayout, getTokenList, openStore, type TokenListRef } from '@csa2/artifacts';
import { argmax, DECODE_ATTENTION_ARENA_ROWS, loadModel, modelFingerprint, type ModelOptions } from '@csa2/core';
import { EngineHost, type GenerateOutcome, type IngestOutcome } from '@csa2/engine';

export interface MillionDocument {
  readonly documentId: string;
  readonly tokensRef: TokenListRef;
}

export interface MillionQuestion {
  readonly documentId: string;
  readonly promptIds: readonly number[];
  readonly maxTokens: number;
  readonly replayTokens: number;
}

export type MillionRoleArgs =
  | { readonly role: 'encode'; readonly modelDir: string; readonly storeUrl: string; readonly tenant: string; readonly documents: readonly MillionDocument[] }
  | {
      readonly role: 'decode';
      readonly modelDir: string;
      readonly storeUrl: string;
      readonly tenant: string;
      /** Asked in order; the same question twice is answered once cold and once from the document cache. */
      readonly questions: readonly MillionQuestion[];
      /** @defaultValue the engine's (the decoder worker's default) */
      readonly documentCacheBytes?: number;
    }
  | {
      readonly role: 'core';
      readonly modelDir: string;
      readonly storeUrl: string;
      readonly tenant: string;
      readonly question: MillionQuestion;
      readonly modelOptions: Partial<ModelOptions>;
    };

/** What one step did: its result and the peak RSS of the process once it was done. */
export interface MillionStep {
  readonly what: string;
  readonly maxRssBytes: number;
  readonly ms: number;
  readonly ingest?: IngestOutcome;
  readonly answer?: MillionAnswer;
}

export interface MillionAnswer {
  readonly tokens: readonly number[];
  /** SHA-256 over every step's logits (float32 bytes), to compare paths bit for bit. */
  readonly logitsSha256: string;
  readonly promptTokens: number;
  readonly cachedTokens: number;
  readonly prefillMs: number;
  readonly decodeMs: number;
}

export interface MillionRoleReport {
  readonly role: MillionRoleArgs['role'];
  /** Peak RSS once the engine (or model) was open and warmed up, before any document. */
  readonly warmMaxRssBytes: number;
  readonly steps: readonly MillionStep[];
  readonly documentCache?: unknown;
}

/**
 * Peak RSS of this process: VmHWM (/proc/self/status), every thread. Not process.resourceUsage().maxRSS:
 * Linux keeps maxrss across execve, so a child starts with its parent's peak at the fork (a 40 MB
 * child of a 500 MB process reports 481 MB).
 */
function maxRssBytes(): number {
  const m = /^VmHWM:\s+(\d+) kB$/m.exec(readFileSync('/proc/self/status', 'utf8'));
  if (m === null) throw new Error('no VmHWM in /proc/self/status');
  return Number(m[1]) * 1024;
}

function logitsSha256(rows: readonly Float32Array[]): string {
  const h = createHash('sha256');
  for (const r of rows) h.update(new Uint8Array(r.buffer, r.byteOffset, r.byteLength));
  return h.digest('hex');
}

function answerOf(out: GenerateOutcome): MillionAnswer {
  return {
    tokens: out.tokens,
    logitsSha256: logitsSha256(out.logits),
    promptTokens: out.promptTokens,
    cachedTokens: out.cachedTokens,
    prefillMs: out.timings.prefillMs,
    decodeMs: out.timings.decodeMs,
  };
}

async function timed<T>(fn: () => Promise<T>): Promise<{ value: T; ms: number }> {
  const t0 = performance.now();
  const value = await fn();
  return { value, ms: performance.now() - t0 };
}

async function runEncode(args: Extract<MillionRoleArgs, { role: 'encode' }>): Promise<MillionRoleReport> {
  // encoderEngineOptions with the default environment: warm-up on, the engine's defaults otherwise
  const host = await EngineHost.start({ modelDir: args.modelDir, store: args.storeUrl, warmUp: true });
  const store = openStore(args.storeUrl);
  try {
    const warmMaxRssBytes = maxRssBytes();
    const steps: MillionStep[] = [];
    for (const doc of args.documents) {
      const { value, ms } = await timed(async () => {
        const tokenIds = await getTokenList(store, args.tenant, doc.tokensRef);
        return host.ingest({ tenant: args.tenant, documentId: doc.documentId, tokenIds });
      });
      steps.push({ what: `ingest ${doc.documentId}`, maxRssBytes: maxRssBytes(), ms, ingest: value });
    }
    return { role: 'encode', warmMaxRssBytes, steps };
  } finally {
    await store.close();
    await host.close();
  }
}

async function runDecode(args: Extract<MillionRoleArgs, { role: 'decode' }>): Promise<MillionRoleReport> {
  // as a decoder worker opens it (decoderEngineOptions): the replay's attention runs without the arena
  const host = await EngineHost.start({
    modelDir: args.modelDir,
    store: args.storeUrl,
    warmUp: true,
    runtime: { attentionArenaMaxRows: DECODE_ATTENTION_ARENA_ROWS },
    ...(args.documentCacheBytes !== undefined ? { documentCacheBytes: args.documentCacheBytes } : {}),
  });
  try {
    const warmMaxRssBytes = maxRssBytes();
    const steps: MillionStep[] = [];
    for (const q of args.questions) {
      const { value, ms } = await timed(() =>
        host.generate({
          promptIds: q.promptIds,
          maxTokens: q.maxTokens,
          replayTokens: q.replayTokens,
          sampling: { temperature: 0, topP: 1, seed: 0 },
          ignoreEos: true,
          keepLogits: true,
          document: { tenant: args.tenant, documentId: q.documentId },
        }),
      );
      steps.push({ what: `answer on ${q.documentId}`, maxRssBytes: maxRssBytes(), ms, answer: answerOf(value) });
    }
    return { role: 'decode', warmMaxRssBytes, steps, documentCache: (await host.stats()).documentCache };
  } finally {
    await host.close();
  }
}

async function runCore(args: Extract<MillionRoleArgs, { role: 'core' }>): Promise<MillionRoleReport> {
  const model = await loadModel(args.modelDir, args.modelOptions);
  const store = openStore(args.storeUrl);
  try {
    const warmMaxRssBytes = maxRssBytes();
    const layout = artifactLayout(model.config, model.plan, await modelFingerprint(args.modelDir));
    const q = args.question;
    const { value, ms } = await timed(async () => {
      const reader = new ArtifactReader({ store, layout });
      const manifest = await reader.readManifest(args.tenant, q.documentId);
      const seq = model.createSequence();
      seq.reserveTokens(manifest.tokenCount + q.promptIds.length + q.maxTokens);
      await reader.loadInto(seq, manifest);
      const t0 = performance.now();
      const stream = await model.encode(seq, q.promptIds, { replayTokens: q.replayTokens, keepRows: q.replayTokens });
      let logits = await model.decoderReplay(seq, stream);
      const prefillMs = performance.now() - t0;
      const tokens: number[] = [];
      const rows: Float32Array[] = [];
      for (let i = 0; i < q.maxTokens; i++) {
        rows.push(logits);
        tokens.push(argmax(logits));
        if (i + 1 < q.maxTokens) logits = await model.step(seq, tokens[i] as number);
      }
      const answer: MillionAnswer = {
        tokens,
        logitsSha256: logitsSha256(rows),
        promptTokens: manifest.tokenCount + q.promptIds.length,
        cachedTokens: manifest.tokenCount,
        prefillMs,
        decodeMs: performance.now() - t0 - prefillMs,
      };
      return answer;
    });
    return { role: 'core', warmMaxRssBytes, steps: [{ what: `answer on ${q.documentId} (csa2-core)`, maxRssBytes: maxRssBytes(), ms, answer: value }] };
  } finally {
    await store.close();
    await model.dispose();
  }
}

async function main(): Promise<void> {
  const [role, json] = process.argv.slice(2);
  if (json === undefined) throw new Error('usage: million-role.js encode|decode|core JSON');
  const args = JSON.parse(json) as MillionRoleArgs;
  if (args.role !== role) throw new Error(`role ${String(role)} does not match the arguments' role ${args.role}`);
  const report = args.role === 'encode' ? await runEncode(args) : args.role === 'decode' ? await runDecode(args) : await runCore(args);
  process.stdout.write(`${JSON.stringify(report)}\n`);
}

await main();
