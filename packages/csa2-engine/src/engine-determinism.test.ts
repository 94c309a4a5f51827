/**
 * A chunk's bytes are a function of its key: the same document ingested into an empty store, after a
 * stored prefix of one chunk or of several, and in prefill steps that cut the compressor's groups
 * differently, leaves identical objects (chunks, partial chunk, encoder tail) and answers identically.
 *
 * Model: the seeded v41-tiny schedule (3 encoder layers, ratio-2 KV source) with a 64-token window,
 * so that the encoder's dependency cone before a continuation, 3 · 63 = 189 tokens, is longer than the
 * decoder's default replay of 128: an encoder that continued after only 128 replayed tokens writes
 * other bytes here.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { buildLayerPlan, encoderContinuationTokens, initModel, parseModelConfig, SeededRandom } from '@csa2/core';
import { Engine } from './engine.js';

const root = mkdtempSync(join(tmpdir(), 'csa2-determinism-'));
const modelDir = join(root, 'model');
const CHUNK = 64;
const greedy = { temperature: 0, topP: 1, seed: 0 };

function randomIds(n: number, seed: number): number[] {
  const rng = new SeededRandom(seed);
  return Array.from({ length: n }, () => 3 + Math.floor(rng.nextUniform() * 250));
}
const DOC = randomIds(9 * CHUNK + 37, 31); // 9 full chunks and a partial one
const QUESTION = randomIds(6, 32);

/** Every object under a store's root: relative path → sha256 of its bytes. */
function objectDigests(storeDir: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else out.set(relative(storeDir, path), createHash('sha256').update(readFileSync(path)).digest('hex'));
    }
  };
  walk(storeDir);
  return out;
}

interface History {
  readonly name: string;
  /** Prefixes ingested (as other documents) before the document itself. */
  readonly before: readonly number[];
  readonly prefillChunkTokens?: number;
  /** Tokens per chunk object (other chunk keys: only the answers compare). @defaultValue CHUNK */
  readonly chunkTokens?: number;
}

async function ingestWithHistory(h: History): Promise<{ dir: string; answer: { tokens: number[]; logits: Float32Array[] }; reused: number }> {
  const dir = join(root, `store-${h.name}`);
  const engine = await Engine.open({
    modelDir,
    store: pathToFileURL(dir).href,
    chunkTokens: h.chunkTokens ?? CHUNK,
    ...(h.prefillChunkTokens !== undefined ? { scheduler: { prefillChunkTokens: h.prefillChunkTokens } } : {}),
  });
  try {
    let i = 0;
    for (const n of h.before) await engine.ingest({ tenant: 't', documentId: `prefix-${i++}`, tokenIds: DOC.slice(0, n) });
    const outcome = await engine.ingest({ tenant: 't', documentId: 'doc', tokenIds: DOC });
    const r = await engine.generate({
      promptIds: QUESTION,
      document: { tenant: 't', documentId: 'doc' },
      maxTokens: 6,
      sampling: greedy,
      keepLogits: true,
      ignoreEos: true,
    });
    return { dir, answer: { tokens: r.tokens, logits: r.logits }, reused: outcome.reusedTokens };
  } finally {
    await engine.close();
  }
}

before(async () => {
  const config = JSON.parse(readFileSync(fileURLToPath(new URL('../../csa2-core/configs/v41-tiny.json', import.meta.url)), 'utf8')) as Record<string, unknown>;
  await initModel({ ...config, window_size: 64, max_seq_len: 2048 }, { seed: 7, outDir: modelDir });
});
after(() => rmSync(root, { recursive: true, force: true }));

test('the encoder continuation replays its whole dependency cone: 189 tokens for 3 encoder layers of window 64', () => {
  const config = parseModelConfig(JSON.parse(readFileSync(join(modelDir, 'config.json'), 'utf8')));
  assert.equal(encoderContinuationTokens(buildLayerPlan(config), config.windowSize), 189);
  assert.ok(189 > 128, 'longer than the default replay, so a shorter continuation would show');
});

test('identical objects and answers whatever the store held before and however prefill steps cut the groups (other chunk sizes: identical answers)', async () => {
  const histories: History[] = [
    { name: 'straight', before: [] },
    { name: 'after-one-chunk', before: [CHUNK] },
    { name: 'after-several-chunks', before: [4 * CHUNK] },
    { name: 'after-prefix-and-partial', before: [2 * CHUNK, 6 * CHUNK + 5] },
    { name: 'odd-prefill-steps', before: [], prefillChunkTokens: 13 },
    { name: 'odd-steps-after-prefix', before: [3 * CHUNK], prefillChunkTokens: 23 },
    { name: 'chunks-of-32-after-prefix', before: [5 * 32], chunkTokens: 32, prefillChunkTokens: 19 },
  ];
  const results = [];
  for (const h of histories) results.push({ h, ...(await ingestWithHistory(h)) });
  const base = results[0] as (typeof results)[number];
  assert.equal(base.reused, 0);
  const baseObjects = objectDigests(base.dir);
  const docObjects = [...baseObjects.keys()].filter((k) => !k.includes('prefix-'));
  assert.ok(docObjects.filter((k) => k.includes('chunks')).length >= 10, `the document's 10 chunks are stored: ${docObjects.join(', ')}`);
  for (const r of results.slice(1)) {
    if (r.h.before.length > 0) assert.ok(r.reused >= (r.h.chunkTokens ?? CHUNK), `${r.h.name}: the stored prefix was re-used (${r.reused} tokens)`);
    const objects = objectDigests(r.dir);
    for (const key of r.h.chunkTokens === undefined ? docObjects : []) {
      if (key.includes('manifest') || key.includes('documents/')) continue; // manifests carry creation times
      assert.equal(objects.get(key), baseObjects.get(key), `${r.h.name}: object ${key}`);
    }
    assert.deepEqual(r.answer.tokens, base.answer.tokens, `${r.h.name}: answer tokens`);
    r.answer.logits.forEach((row, i) => assert.deepEqual(row, base.answer.logits[i], `${r.h.name}: logits row ${i}, bit for bit`));
  }
});
