#!/usr/bin/env node
/**
 * Documents that evict each other, with the document cache's arena (EngineOptions.documentArena) on
 * and off: two synthetic documents of N tokens (whole chunks, @csa2/core fillSyntheticCache written
 * through the real ArtifactWriter, then ingested again so that each has its stored encoder tail) in a
 * filesystem store kept between runs (STORE_DIR); a decoder process (the workers' allocator settings)
 * whose document cache holds one of them asks questions on them in turn, so that every question loads
 * its document and evicts the other: its time to first token and the decoder's RSS after each. The
 * first load of a process is into new memory either way; from the second on, the arena writes into the
 * pages the evicted document used. Processes with the arena off and on alternate, ROUNDS of each. A
 * diagnostic (bench/README.md, "Document memory that stays").
 *
 *   npm run build && [MODES=off,on,prefault] node bench/tools/document-arena-ab.mjs MODEL_DIR N STORE_DIR [ROUNDS] [QUESTIONS]
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { fillSyntheticCache } from '@csa2/core/testing';
import { ArtifactWriter, openStore } from '@csa2/artifacts';
import { Engine } from '@csa2/engine';
import { WORKER_MALLOC_ENV } from '@csa2/jobs';

const [modelDir, nText, storeDir, a4, a5] = process.argv.slice(2);
if (modelDir === undefined || nText === undefined || storeDir === undefined) {
  console.error('usage: node bench/tools/document-arena-ab.mjs MODEL_DIR N STORE_DIR [ROUNDS] [QUESTIONS]');
  process.exit(2);
}
const N = Math.floor(Number(nText) / 4096) * 4096;
const storeUrl = pathToFileURL(storeDir).href;
const docs = [`arena-a-${N}`, `arena-b-${N}`];
const rssMb = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? 0) / 1024;

if (process.env.ARENA_CHILD !== undefined) {
  // one decoder process: the arena on or off, QUESTIONS questions alternating between the documents
  const mode = process.env.ARENA_CHILD;
  const on = mode !== 'off';
  const cacheBytes = Number(process.env.ARENA_CACHE_BYTES);
  const questions = Number(a5 ?? 6);
  const engine = await Engine.open({
    modelDir,
    store: storeUrl,
    warmUp: true,
    documentArena: on,
    documentCacheBytes: cacheBytes,
    ...(mode === 'prefault' ? { documentPrefaultBytes: cacheBytes } : {}),
  });
  const prompt = Array.from({ length: 32 }, (_, i) => (5 + i * 3) % engine.info().vocabSize);
  const out = [];
  for (let i = 0; i < questions; i++) {
    const t0 = performance.now();
    await engine.generate({
      promptIds: prompt,
      maxTokens: 1,
      sampling: { temperature: 0, topP: 1, seed: 0 },
      ignoreEos: true,
      replayTokens: 128,
      document: { tenant: 't', documentId: docs[i % 2] },
    });
    out.push({ ms: performance.now() - t0, rss: rssMb() });
  }
  const s = engine.stats().documentCache;
  console.log(JSON.stringify({ on, prefaultMs: engine.info().documentPrefaultMs, out, misses: s.misses, evictions: s.evictions, arena: s.arena }));
  await engine.close();
  process.exit(0);
}

mkdirSync(storeDir, { recursive: true });
for (const [i, documentId] of docs.entries()) {
  if (existsSync(`${storeDir}/tenants/t/documents/${documentId}/manifest.json`)) continue;
  const engine = await Engine.open({ modelDir, store: storeUrl, warmUp: false });
  const store = openStore(storeUrl);
  const seq = engine.model.createSequence();
  fillSyntheticCache(seq, N, engine.model.config.vocabSize, 11 + i);
  const writer = new ArtifactWriter({ store, layout: engine.layout, tenant: 't', documentId, chunkTokens: 4096 });
  await writer.writeAvailable(seq, N);
  await writer.finish(seq);
  await engine.ingest({ tenant: 't', documentId, tokenIds: Array.from(seq.tokens.view()), chunkTokens: 4096, tailReplayTokens: 128 });
  console.log(`made ${documentId}`);
  await store.close();
  await engine.close();
}
// a document's packed rows (N whole chunks: every compress ratio divides it); the cache holds one document and its tail, not two
const docBytes = await (async () => {
  const engine = await Engine.open({ modelDir, store: storeUrl, warmUp: false });
  const bytes = N * engine.info().bytesPerToken;
  await engine.close();
  return bytes;
})();
const rounds = Number(a4 ?? 2);
const self = fileURLToPath(import.meta.url);
for (let r = 0; r < rounds; r++) {
  // MODES: the settings to compare (off, on, prefault: the arena faulted in at open), in this order, reversed every other round
  const modes = (process.env.MODES ?? 'off,on').split(',');
  for (const mode of r % 2 === 0 ? modes : [...modes].reverse()) {
    const text = execFileSync(process.execPath, [self, modelDir, nText, storeDir, String(rounds), a5 ?? '6'], {
      env: { ...process.env, ...WORKER_MALLOC_ENV, ARENA_CHILD: mode, ARENA_CACHE_BYTES: String(Math.floor(docBytes * 1.5)) },
      maxBuffer: 16 << 20,
    }).toString();
    const rep = JSON.parse(text.trim().split('\n').at(-1));
    const q = rep.out.map((o) => `${(o.ms / 1000).toFixed(2)} s / ${o.rss.toFixed(0)} MB`).join(' | ');
    console.log(
      `round ${r + 1}, arena ${mode}${rep.prefaultMs !== null ? ` (prefault ${rep.prefaultMs.toFixed(0)} ms at open)` : ''}: TTFT / RSS after each question (documents alternating, every one loaded): ${q}; loads ${rep.misses}, evictions ${rep.evictions}${rep.arena !== null ? `, arena ${(rep.arena.touchedBytes / 1e6).toFixed(1)} MB touched, ${rep.arena.taken} regions taken, ${rep.arena.declined} declined` : ''}`,
    );
  }
}
