#!/usr/bin/env node
/**
 * Scan threads side by side in one process: two models on the same checkpoint, one with no scan
 * threads and one with SCAN_THREADS (default 1), a synthetic document of N tokens (fillSyntheticCache)
 * frozen and forked as the document cache does; per round, each model in turn (the order alternating)
 * asks a 32-token question on a fork (encode with encoder replay R = 128, decoder replay) and decodes
 * 16 steps. Prints the question's and the step's time and the Full layers' share of each, per round.
 * A diagnostic (the machine's noise is shared by both models, round by round).
 *
 *   npm run build && MALLOC_MMAP_THRESHOLD_=1048576 node bench/tools/scan-threads-ab.mjs MODEL_DIR N [ROUNDS]
 */
import { argmax, DECODE_ATTENTION_ARENA_ROWS, DEFAULT_RUNTIME_OPTIONS, loadModel, threadScanStats } from '@csa2/core';
import { fillSyntheticCache } from '@csa2/core/testing';
const [dir, nText, roundsText] = process.argv.slice(2);
if (dir === undefined || nText === undefined) {
  console.error('usage: node bench/tools/scan-threads-ab.mjs MODEL_DIR N [ROUNDS]');
  process.exit(2);
}
const threads = Number(process.env.SCAN_THREADS ?? 1);
const N = Number(nText);
const rt = { ...DEFAULT_RUNTIME_OPTIONS, attentionArenaMaxRows: DECODE_ATTENTION_ARENA_ROWS };
const models = [await loadModel(dir, { runtime: rt, scanThreads: 0 }), await loadModel(dir, { runtime: rt, scanThreads: threads })];
for (const m of models) await m.warmUp();
const doc = models[0].createSequence();
doc.reserveTokens(N);
fillSyntheticCache(doc, N, models[0].config.vocabSize, 3);
doc.freeze();
const question = Array.from({ length: 32 }, (_, i) => (i * 37) % models[0].config.vocabSize);
const res = [0, 1].map(() => ({ q: [], qFull: [], step: [], sFull: [] }));
for (let round = 0; round < Number(roundsText ?? 3); round++) {
  for (const i of round % 2 ? [1, 0] : [0, 1]) {
    const m = models[i];
    const seq = doc.fork();
    let full = 0;
    m.timer = {
      layer: (k, ms) => {
        if (k === 'full') full += ms;
      },
      other: () => {},
    };
    let t = performance.now();
    let logits = await m.decoderReplay(seq, await m.encode(seq, question, { replayTokens: 128, keepRows: 128 }));
    res[i].q.push(performance.now() - t);
    res[i].qFull.push(full);
    full = 0;
    t = performance.now();
    for (let s = 0; s < 16; s++) logits = await m.step(seq, argmax(logits));
    res[i].step.push((performance.now() - t) / 16);
    res[i].sFull.push(full / 16);
    m.timer = null;
  }
}
const f = (a) => a.map((x) => x.toFixed(0)).join(' / ');
const g = (a) => a.map((x) => x.toFixed(1)).join(' / ');
for (const i of [0, 1])
  console.log(
    `scan threads ${i === 0 ? 0 : threads}: question ${f(res[i].q)} ms (Full ${f(res[i].qFull)}); step ${g(res[i].step)} ms (Full ${g(res[i].sFull)})`,
  );
console.log(JSON.stringify(threadScanStats));
for (const m of models) await m.dispose();
