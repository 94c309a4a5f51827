#!/usr/bin/env node
/**
 * What a question on a stored document costs in memory, layer by layer: a synthetic document of N
 * tokens (@csa2/core fillSyntheticCache) written through the real ArtifactWriter into a temporary
 * filesystem store (and its encoder tail, as an ingest stores it), an engine opened on it with the warm-up, then one question (32 tokens, R = 128)
 * with the document fetched and one with it in the document cache; after every layer of the replay
 * (Csa2Model.timer) the process's RSS, its peak since the question began (VmHWM, reset through
 * /proc/self/clear_refs) and the JS ArrayBuffers alive (process.memoryUsage). A diagnostic, not a
 * bench suite.
 *
 *   npm run build && MALLOC_MMAP_THRESHOLD_=1048576 node bench/tools/replay-memory.mjs MODEL_DIR N
 *
 * MODEL_DIR: e.g. the documents-scale suite's .csa2/bench/v41-tiny-40l-seed1-*.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { fillSyntheticCache } from '@csa2/core/testing';
import { ArtifactWriter, openStore } from '@csa2/artifacts';
import { Engine } from '@csa2/engine';

const [modelDir, nText, makeInto] = process.argv.slice(2);
if (modelDir === undefined || nText === undefined) {
  console.error('usage: node bench/tools/replay-memory.mjs MODEL_DIR N');
  process.exit(2);
}
const N = Number(nText);
const mb = (kb) => (kb / 1024).toFixed(0);
const status = () => {
  const s = readFileSync('/proc/self/status', 'utf8');
  const kb = (k) => Number(s.match(new RegExp(`${k}:\\s+(\\d+)`))?.[1] ?? NaN);
  return { rss: mb(kb('VmRSS')), peak: mb(kb('VmHWM')), arrayBuffers: (process.memoryUsage().arrayBuffers / 2 ** 20).toFixed(0) };
};
/** The document, written by a child process (this script with a third argument) so that its memory is not this process's. */
async function makeDocument(storeUrl) {
  const engine = await Engine.open({ modelDir, store: storeUrl, warmUp: false });
  const store = openStore(storeUrl);
  const seq = engine.model.createSequence();
  fillSyntheticCache(seq, N, engine.model.config.vocabSize, 7);
  const writer = new ArtifactWriter({ store, layout: engine.layout, tenant: 't', documentId: 'd', chunkTokens: 4096 });
  await writer.writeAvailable(seq, N);
  await writer.finish(seq);
  // the encoder tail an ingest stores (re-ingesting the same tokens re-uses every whole chunk and computes only the tail)
  const ing = await engine.ingest({ tenant: 't', documentId: 'd', tokenIds: Array.from(seq.tokens.view()), chunkTokens: 4096 });
  console.log(`document: ${N} tokens, ${ing.reusedTokens} re-used, encoder tail ${ing.tailBytes} bytes`);
  await store.close();
  await engine.close();
}
if (makeInto !== undefined) {
  await makeDocument(makeInto);
  process.exit(0);
}
const dir = mkdtempSync(join(tmpdir(), 'csa2-replay-memory-'));
try {
  const storeUrl = pathToFileURL(dir).href;
  execFileSync(process.execPath, [fileURLToPath(import.meta.url), modelDir, String(N), storeUrl], { stdio: 'inherit' });
  const engine = await Engine.open({ modelDir, store: storeUrl, warmUp: true });
  console.log('engine warmed up:', JSON.stringify(status()));
  const question = Array.from({ length: 32 }, (_, i) => (5 + i * 3) % engine.info().vocabSize);
  const request = {
    promptIds: question,
    maxTokens: 1,
    sampling: { temperature: 0, topP: 1, seed: 0 },
    ignoreEos: true,
    replayTokens: 128,
    document: { tenant: 't', documentId: 'd' },
  };
  for (const label of ['document fetched', 'document cache warm']) {
    writeFileSync('/proc/self/clear_refs', '5'); // VmHWM := VmRSS
    console.log(`\n${label}: start ${JSON.stringify(status())}`);
    let i = 0;
    engine.model.timer = {
      layer: (mode) => console.log(`  layer ${String(i++ % engine.model.config.numLayers).padStart(2)} ${mode.padEnd(7)} ${JSON.stringify(status())}`),
      other: () => undefined,
    };
    const out = await engine.generate(request);
    engine.model.timer = null;
    console.log(`  done (TTFT ${out.timings.prefillMs.toFixed(0)} ms) ${JSON.stringify(status())}`);
  }
  await engine.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
