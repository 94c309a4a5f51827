/**
 * @module documents/million-tokens.test
 * The 1M test: a 1,048,576-token document (the released config's context) is
 * ingested and answered at tiny width as the pipeline runs it, the encoder role and the decoder role
 * in separate processes (children of this test, documents/million-role) with the glibc allocator
 * settings the worker images set (WORKER_MALLOC_ENV), the document's token list travelling through the object store as
 * a TokenListRef (as the gateway hands it to the encoder). Not timed: figures are diagnostics.
 *
 * Model: tiny-a's width (dim 64, head_dim 64, index_head_dim 32, window 8) with compress_ratios
 * [0,1,1,1,1,1]: one window-only encoder layer, then the decoder (layer 1 Full: the KV, index and
 * candidate source; 2 and 4 Reuse; 3 and 5 Reindex, scoring the candidate pool). The encoder layers
 * must be window-only at this length: a compressed encoder layer would score every earlier entry per
 * row (quadratic); one of them rather than tiny-a's three keeps the 1M ingest near 45 s on 2 cores
 * (the encoder's cost per token does not depend on the position). Global cache 53 B/token
 * (main KV 64/2 + 64/16, index K 32/2 + 32/32), 57 B/token on the store with the token ids.
 *
 * What is checked, since no exact run is possible at 1M (the Full layer's prefill is quadratic):
 * - the artifact: tokens, 256 chunks of 4096, and its bytes as the store reports them equal to the
 *   format's formula: 256 × (header + SHA-256) + N × (4 + 53) + manifest;
 * - the answer: the same tokens and bit-identical logits (SHA-256 over every step's float32 logits)
 *   from four paths — the decoder worker's engine with the document fetched (cold document cache),
 *   the same again with the document cache warm, an engine with the document cache off (a private
 *   copy through the chunk cache), and csa2-core without the engine (Sequence loaded by the reader,
 *   encode + decoder replay + steps) with the indexer's other paths: every visible key scored then
 *   masked to the pool (indexerPool false), scans of 2^18 keys per run instead of 2^16, and the ONNX
 *   graphs' unpack, scores and TopK instead of the split scorer (indexerScores 'graph');
 *   cached_tokens = the document's tokens;
 * - peak RSS of each role against bounds stated here, before the run (see MEMORY BOUNDS).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { chunkObjectKey, manifestObjectKey, openStore, parseManifest, putTokenList, type DocumentManifest, type ObjectStore } from '@csa2/artifacts';
import { SeededRandom, initModel } from '@csa2/core';
import { fixturesRoot } from '@csa2/core/testing';
import { WORKER_MALLOC_ENV } from '@csa2/jobs';
import type { MillionAnswer, MillionQuestion, MillionRoleArgs, MillionRoleReport, MillionStep } from './million-role.js';

const TOKENS = 1_048_576;
/** A first, shorter document: it brings each role's working set at the engine's fixed budgets (one whole 65,536-key scan chunk) into the baseline. */
const SMALL_TOKENS = 65_536;
const CHUNK_TOKENS = 4096;
const QUESTION_TOKENS = 16;
const ANSWER_TOKENS = 8;
const REPLAY_TOKENS = 128;
const TENANT = 'acme';
const MIB = 1024 * 1024;
/** Global-cache bytes per token of the model below: one ratio-1 KV source, main KV 64/2 + 64/16, index K 32/2 + 32/32. */
const GLOBAL_CACHE_BYTES_PER_TOKEN = 53;
const TOKEN_ID_BYTES = 4;
const CHECKSUM_BYTES = 32;

/*
 * MEMORY BOUNDS (stated before the run; peak RSS = VmHWM of the child, every thread: getrusage's
 * maxrss, process.resourceUsage().maxRSS, starts a child at its parent's peak, see million-role).
 * Each role first handles the 65,536-token document, so its baseline (peak RSS after that step)
 * holds the model, the warmed-up ONNX arenas at the engine's fixed budgets (256-row chunks; a whole
 * 65,536-key scan chunk with its score tensors, at most indexerBudgetValues each) and that document.
 * Everything the 1M document adds on top grows with its tokens:
 *
 * decoder (the decoder worker's engine, document cache on):
 *   peak ≤ baseline + 1.2 × artifact bytes + 8 B × N + 8 MiB
 *   - 1.2 × artifact: the loaded document in the document cache holds exactly the artifact's row bytes
 *     (53 B/token) and its token ids (4 B/token); the 20 % covers the reader's chunk buffers and the
 *     PackedRowStore's rounding;
 *   - 8 B × N: the question's fork copies the token ids (4 B/token) and reserves the context once
 *     more (another 4 B/token while both exist) — the rows themselves are read in place;
 *   - 8 MiB: allocator and V8 heap slack (the scans over 16 key chunks merge fixed-size rankings).
 * encoder (the encoder worker's engine):
 *   peak ≤ baseline + 1.2 × artifact bytes + 24 B × N + 8 MiB
 *   - 1.2 × artifact: the sequence being encoded holds the rows and ids the artifact stores; chunk
 *     buffers of the writer in flight;
 *   - 24 B × N: the token list as the processor gets it (a number[]: 8 B/token), its structured
 *     clone in the engine thread (8 B/token), the stored list's bytes (4 B/token) and the ingest's
 *     own Uint32Array of ids (4 B/token);
 *   - 8 MiB: as above.
 */
const DECODER_BYTES_PER_TOKEN_ALLOWANCE = 8;
const ENCODER_BYTES_PER_TOKEN_ALLOWANCE = 24;
const SLACK_BYTES = 8 * MIB;

const ROLE_SCRIPT = fileURLToPath(new URL('./million-role.js', import.meta.url));
const TEST_TIMEOUT_MS = 15 * 60_000;

function modelConfig(): Record<string, unknown> {
  const tinyA = JSON.parse(readFileSync(join(fixturesRoot(), 'deepseek-v41-tiny-a', 'config.json'), 'utf8')) as Record<string, unknown>;
  return {
    ...tinyA,
    compress_ratios: [0, 1, 1, 1, 1, 1],
    kv_source_layers: [1],
    index_source_layers: [1, 3, 5],
    candidate_source_layer: 1,
    max_seq_len: TOKENS + QUESTION_TOKENS + ANSWER_TOKENS,
  };
}

function seededIds(seed: number, count: number, vocab: number): number[] {
  const rng = new SeededRandom(seed);
  return Array.from({ length: count }, () => rng.nextU32() % vocab);
}

/** Runs one role in a child process (as a worker process runs: its own heap, the workers' allocator settings, WORKER_MALLOC_ENV) and returns its report. */
function runRole(args: MillionRoleArgs): Promise<MillionRoleReport> {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      [ROLE_SCRIPT, args.role, JSON.stringify(args)],
      { env: { ...process.env, ...WORKER_MALLOC_ENV }, maxBuffer: 16 * MIB, timeout: TEST_TIMEOUT_MS },
      (err, stdout, stderr) => {
        if (err !== null) {
          reject(new Error(`${args.role} role failed: ${err.message}\n${stderr}`));
          return;
        }
        const line = stdout.trim().split('\n').at(-1) ?? '';
        try {
          resolve(JSON.parse(line) as MillionRoleReport);
        } catch {
          reject(new Error(`${args.role} role printed no report:\n${stdout}\n${stderr}`));
        }
      },
    );
  });
}

function step(report: MillionRoleReport, i: number): MillionStep {
  const s = report.steps[i];
  assert.ok(s !== undefined, `${report.role} role reported no step ${i}`);
  return s;
}

function answer(s: MillionStep): MillionAnswer {
  assert.ok(s.answer !== undefined, `step "${s.what}" has no answer`);
  return s.answer;
}

const mb = (bytes: number): string => `${(bytes / 1e6).toFixed(1)} MB`;

/** Bytes of a document's objects as the store reports them: its chunks and its manifest. */
async function storedBytes(store: ObjectStore, manifest: DocumentManifest): Promise<{ chunks: number; manifest: number }> {
  let chunks = 0;
  for (const c of manifest.chunks) {
    const info = await store.head(chunkObjectKey(TENANT, c.key));
    assert.ok(info !== null, `chunk ${c.key} is not in the store`);
    chunks += info.sizeBytes;
  }
  const m = await store.head(manifestObjectKey(TENANT, manifest.documentId));
  assert.ok(m !== null, 'the manifest is not in the store');
  return { chunks, manifest: m.sizeBytes };
}

test('a 1,048,576-token document: ingested by an encoder process and answered by decoder processes within the stated memory bounds, the same answer on every path', {
  timeout: TEST_TIMEOUT_MS,
}, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'csa2-million-'));
  const storeUrl = pathToFileURL(join(dir, 'store')).href;
  const store = openStore(storeUrl);
  try {
    const modelDir = join(dir, 'model');
    const config = modelConfig();
    await initModel(config, { seed: 14, outDir: modelDir });
    const vocab = config['vocab_size'] as number;
    const small = seededIds(1, SMALL_TOKENS, vocab);
    const million = seededIds(2, TOKENS, vocab);
    const documents = [
      { documentId: 'small', tokensRef: await putTokenList(store, TENANT, 'small', small) },
      { documentId: 'million', tokensRef: await putTokenList(store, TENANT, 'million', million) },
    ];

    // ---- encoder role
    const enc = await runRole({ role: 'encode', modelDir, storeUrl, tenant: TENANT, documents });
    const ingSmall = step(enc, 0).ingest;
    const ing = step(enc, 1).ingest;
    assert.ok(ingSmall !== undefined && ing !== undefined, 'the encoder reported its ingests');
    t.diagnostic(
      `encoder: ${TOKENS} tokens in ${(step(enc, 1).ms / 1000).toFixed(1)} s (${((TOKENS * 1000) / step(enc, 1).ms).toFixed(0)} tokens/s); peak RSS warm ${mb(enc.warmMaxRssBytes)}, after the 64K document ${mb(step(enc, 0).maxRssBytes)}, after 1M ${mb(step(enc, 1).maxRssBytes)}`,
    );
    assert.equal(ing.tokens, TOKENS);
    assert.equal(ing.reusedTokens, 0);
    assert.equal(ing.chunksWritten, TOKENS / CHUNK_TOKENS);
    assert.equal(ing.bytesPerToken, GLOBAL_CACHE_BYTES_PER_TOKEN);

    // ---- the artifact's bytes, as the store reports them, against the format's formula
    const manifestKey = manifestObjectKey(TENANT, 'million');
    const manifestRaw = parseManifest(manifestKey, await store.get(manifestKey));
    assert.equal(manifestRaw.tokenCount, TOKENS);
    assert.equal(manifestRaw.chunks.length, TOKENS / CHUNK_TOKENS);
    const header = await store.getRange(chunkObjectKey(TENANT, (manifestRaw.chunks[0] as DocumentManifest['chunks'][number]).key), { offset: 10, length: 4 });
    const headerBytes = new DataView(header.buffer, header.byteOffset, 4).getUint32(0, true);
    assert.equal(
      headerBytes,
      30 + manifestRaw.modelId.length + manifestRaw.layoutId.length + 12 * 1,
      'chunk header: 30 + model id + layout id + 12 per KV source',
    );
    const stored = await storedBytes(store, manifestRaw);
    assert.equal(stored.chunks, (TOKENS / CHUNK_TOKENS) * (headerBytes + CHECKSUM_BYTES) + TOKENS * (TOKEN_ID_BYTES + GLOBAL_CACHE_BYTES_PER_TOKEN));
    assert.equal(ing.artifactBytes, stored.chunks + stored.manifest);
    t.diagnostic(
      `artifact: ${ing.artifactBytes.toLocaleString('en-US')} bytes (${(ing.artifactBytes / TOKENS).toFixed(2)} per token; global cache ${GLOBAL_CACHE_BYTES_PER_TOKEN})`,
    );

    // ---- decoder role: the decoder worker's engine; the 64K question, then the 1M question twice
    const question = (documentId: string, seed: number): MillionQuestion => ({
      documentId,
      promptIds: seededIds(seed, QUESTION_TOKENS, vocab),
      maxTokens: ANSWER_TOKENS,
      replayTokens: REPLAY_TOKENS,
    });
    const q = question('million', 3);
    const dec = await runRole({ role: 'decode', modelDir, storeUrl, tenant: TENANT, questions: [question('small', 4), q, q] });
    const cold = answer(step(dec, 1));
    const warm = answer(step(dec, 2));
    t.diagnostic(
      `decoder: peak RSS warm ${mb(dec.warmMaxRssBytes)}, after the 64K question ${mb(step(dec, 0).maxRssBytes)}, after the 1M question ${mb(step(dec, 1).maxRssBytes)} (then ${mb(step(dec, 2).maxRssBytes)}); ` +
        `1M answer ${(step(dec, 1).ms / 1000).toFixed(1)} s with the document fetched (TTFT ${(cold.prefillMs / 1000).toFixed(1)} s), ${(step(dec, 2).ms / 1000).toFixed(1)} s with it cached (TTFT ${(warm.prefillMs / 1000).toFixed(1)} s), decode ${(cold.decodeMs / (ANSWER_TOKENS - 1)).toFixed(0)} ms/token`,
    );
    assert.equal(cold.cachedTokens, TOKENS, 'cached_tokens: the whole document');
    assert.equal(cold.promptTokens, TOKENS + QUESTION_TOKENS);
    assert.equal(cold.tokens.length, ANSWER_TOKENS);
    assert.deepEqual(warm, { ...cold, prefillMs: warm.prefillMs, decodeMs: warm.decodeMs }, 'the document cache gives the same answer, bit for bit');
    const cache = dec.documentCache as { hits: number; misses: number };
    assert.deepEqual([cache.misses, cache.hits], [2, 1], 'the second 1M question was served by the document cache');

    // ---- the same question on two other paths
    const off = await runRole({ role: 'decode', modelDir, storeUrl, tenant: TENANT, questions: [q], documentCacheBytes: 0 });
    assert.deepEqual(answer(step(off, 0)).tokens, cold.tokens, 'document cache off: the same tokens');
    assert.equal(answer(step(off, 0)).logitsSha256, cold.logitsSha256, 'document cache off: the same logits, bit for bit');
    const core = await runRole({
      role: 'core',
      modelDir,
      storeUrl,
      tenant: TENANT,
      question: q,
      modelOptions: { indexerPool: false, indexerKeyChunk: 1 << 18, indexerScores: 'graph' },
    });
    assert.deepEqual(answer(step(core, 0)).tokens, cold.tokens, 'csa2-core without the engine, other indexer paths: the same tokens');
    assert.equal(answer(step(core, 0)).logitsSha256, cold.logitsSha256, 'csa2-core without the engine, other indexer paths: the same logits, bit for bit');

    // ---- memory bounds (stated above)
    const decBase = step(dec, 0).maxRssBytes;
    const decBound = decBase + 1.2 * ing.artifactBytes + DECODER_BYTES_PER_TOKEN_ALLOWANCE * TOKENS + SLACK_BYTES;
    const decPeak = Math.max(step(dec, 1).maxRssBytes, step(dec, 2).maxRssBytes);
    t.diagnostic(
      `decoder peak ${mb(decPeak)} = baseline ${mb(decBase)} + ${mb(decPeak - decBase)} (${((decPeak - decBase) / ing.artifactBytes).toFixed(2)} × the artifact); bound ${mb(decBound)}`,
    );
    assert.ok(
      decPeak <= decBound,
      `decoder peak RSS ${mb(decPeak)} exceeds baseline ${mb(decBase)} + 1.2 × artifact ${mb(ing.artifactBytes)} + 8 B × N + 8 MiB = ${mb(decBound)}`,
    );
    const encBase = step(enc, 0).maxRssBytes;
    const encBound = encBase + 1.2 * ing.artifactBytes + ENCODER_BYTES_PER_TOKEN_ALLOWANCE * TOKENS + SLACK_BYTES;
    const encPeak = step(enc, 1).maxRssBytes;
    t.diagnostic(
      `encoder peak ${mb(encPeak)} = baseline ${mb(encBase)} + ${mb(encPeak - encBase)} (${((encPeak - encBase) / ing.artifactBytes).toFixed(2)} × the artifact); bound ${mb(encBound)}`,
    );
    assert.ok(
      encPeak <= encBound,
      `encoder peak RSS ${mb(encPeak)} exceeds baseline ${mb(encBase)} + 1.2 × artifact ${mb(ing.artifactBytes)} + 24 B × N + 8 MiB = ${mb(encBound)}`,
    );
  } finally {
    await store.close();
    await rm(dir, { recursive: true, force: true });
  }
});
