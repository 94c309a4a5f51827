#!/usr/bin/env node
/**
 * Where a question's time to first token goes on a stored document: a synthetic document of N tokens
 * (whole chunks; @csa2/core fillSyntheticCache written through the real ArtifactWriter, then ingested
 * again so that the engine stores its encoder tail, as an ingest does) in a filesystem store kept
 * between runs (STORE_DIR), an engine opened with the warm-up, then the same question (32 tokens,
 * R = 128) with the document fetched and with it in the document cache, each timed by layer kind
 * (Csa2Model.timer) and in total, the warm one also by onnxruntime graph (ort-timing.mjs), then 8
 * decode steps by layer kind. A diagnostic, not a bench suite.
 *
 *   npm run build && node bench/tools/ttft-breakdown.mjs MODEL_DIR N STORE_DIR [--no-tail]
 *
 * MODEL_DIR: e.g. the documents-scale suite's .csa2/bench/v41-tiny-40l-seed1-*. --no-tail: the
 * document without a stored tail (the question computes it).
 */
import { existsSync, mkdirSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { fillSyntheticCache } from '@csa2/core/testing';
import { ArtifactWriter, openStore } from '@csa2/artifacts';
import { Engine } from '@csa2/engine';
import { timeOrtRuns } from './ort-timing.mjs';

// onnxruntime's runs timed by graph signature during the warm question
const ortTimes = await timeOrtRuns();
const bySignature = ortTimes.bySignature;

const [modelDir, nText, storeDir, flag] = process.argv.slice(2);
if (modelDir === undefined || nText === undefined || storeDir === undefined) {
  console.error('usage: node bench/tools/ttft-breakdown.mjs MODEL_DIR N STORE_DIR [--no-tail]');
  process.exit(2);
}
const N = Math.floor(Number(nText) / 4096) * 4096;
const tail = flag !== '--no-tail';
const documentId = `d${N}${tail ? '' : '-notail'}`;
const storeUrl = pathToFileURL(storeDir).href;
if (!existsSync(`${storeDir}/tenants/t/documents/${documentId}/manifest.json`)) {
  mkdirSync(storeDir, { recursive: true });
  const engine = await Engine.open({ modelDir, store: storeUrl, warmUp: false });
  const store = openStore(storeUrl);
  const seq = engine.model.createSequence();
  fillSyntheticCache(seq, N, engine.model.config.vocabSize, 7);
  const writer = new ArtifactWriter({ store, layout: engine.layout, tenant: 't', documentId, chunkTokens: 4096 });
  await writer.writeAvailable(seq, N);
  await writer.finish(seq);
  const t0 = performance.now();
  const ing = await engine.ingest({ tenant: 't', documentId, tokenIds: Array.from(seq.tokens.view()), chunkTokens: 4096, tailReplayTokens: tail ? 128 : 0 });
  console.log(`made ${documentId}: tail ${ing.tailBytes} bytes in ${(performance.now() - t0).toFixed(0)} ms (chunks re-read and verified)`);
  await store.close();
  await engine.close();
}
const engine = await Engine.open({ modelDir, store: storeUrl, warmUp: true });
const sums = new Map();
engine.model.timer = {
  layer: (mode, ms) => sums.set(mode, (sums.get(mode) ?? 0) + ms),
  other: (what, ms) => sums.set(what, (sums.get(what) ?? 0) + ms),
};
const question = Array.from({ length: 32 }, (_, i) => (5 + i * 3) % engine.info().vocabSize);
const request = {
  promptIds: question,
  maxTokens: 1,
  sampling: { temperature: 0, topP: 1, seed: 0 },
  ignoreEos: true,
  replayTokens: 128,
  document: { tenant: 't', documentId },
};
for (const label of ['document fetched', 'document cache warm']) {
  sums.clear();
  ortTimes.on = label === 'document cache warm';
  const t0 = performance.now();
  const out = await engine.generate(request);
  const total = performance.now() - t0;
  const timed = [...sums.values()].reduce((a, b) => a + b, 0);
  const parts = [...sums.entries()].map(([k, v]) => `${k} ${v.toFixed(0)}`).join(', ');
  console.log(
    `${label}: TTFT ${total.toFixed(0)} ms = layers+head ${timed.toFixed(0)} (${parts}) + untimed ${(total - timed).toFixed(0)}; token ${out.tokens[0]}`,
  );
}
ortTimes.on = false;
// decode steps after the same question (the document cache warm): ms a step, by layer kind
{
  const steps = Number(process.env.STEPS ?? 8);
  let n = 0;
  // the layer times of the decode steps only: reset at the first token
  const out = await engine.generate({ ...request, maxTokens: steps + 1 }, { onToken: () => n++ === 0 && sums.clear() });
  const perStep = [...sums.entries()].map(([k, v]) => `${k} ${(v / steps).toFixed(1)}`).join(', ');
  console.log(`decode: ${(out.timings.decodeMs / steps).toFixed(1)} ms a step (by layer kind: ${perStep})`);
}
for (const [k, a] of [...bySignature.entries()].sort((x, y) => y[1].ms - x[1].ms).slice(0, 12))
  console.log(`  onnxruntime ${a.ms.toFixed(0)} ms in ${a.runs} runs: ${k.slice(0, 150)}`);
const s = engine.stats().documentCache;
console.log(
  `tails: loaded ${s.tailsLoaded}, stored ${s.tailsStored}, used ${s.tailHits}, rejected ${s.tailsRejected}${s.lastTailRejection !== null ? ` (${s.lastTailRejection})` : ''}`,
);
await engine.close();
