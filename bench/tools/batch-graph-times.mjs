#!/usr/bin/env node
/**
 * Where a batched decode step's time goes, by ONNX graph: B forks of a synthetic global cache of N tokens
 * (@csa2/core fillSyntheticCache, frozen), one decode row each per forward call (as the batch suite runs
 * them), with onnxruntime-node's InferenceSession.prototype.run timed by signature (ort-timing.mjs). A
 * diagnostic, not a bench suite.
 *
 *   npm run build && node bench/tools/batch-graph-times.mjs MODEL_DIR N B [STEPS]
 */
import { argmax, loadModel } from '@csa2/core';
import { fillSyntheticCache } from '@csa2/core/testing';
import { bySignatureLines, timeOrtRuns } from './ort-timing.mjs';

const [dir, nText, bText, stepsText] = process.argv.slice(2);
if (dir === undefined || nText === undefined || bText === undefined) {
  console.error('usage: node bench/tools/batch-graph-times.mjs MODEL_DIR N B [STEPS]');
  process.exit(2);
}
const N = Number(nText);
const B = Number(bText);
const steps = Number(stepsText ?? 3);
const ortTimes = await timeOrtRuns();
const model = await loadModel(dir);
const L = model.config.numLayers;
const base = model.createSequence();
base.reserveTokens(N + steps + 2);
fillSyntheticCache(base, N - 32, model.config.vocabSize, 3);
// a 32-token question through the encoder and decoder replay (windows, open groups, the index-K slot)
const question = Array.from({ length: 32 }, (_, i) => (i * 37) % model.config.vocabSize);
await model.decoderReplay(base, await model.encode(base, question, { replayTokens: 128, keepRows: 128 }));
base.freeze();
const seqs = Array.from({ length: B }, (_, b) => {
  const s = base.fork(N + steps + 2);
  s.tokens.push((b * 131 + 7) % model.config.vocabSize);
  return s;
});
const stepOnce = async () => {
  const outs = await model.forward(
    seqs.map((seq) => ({ seq, layout: { kind: 'step' }, p0: seq.length - 1, p1: seq.length, l0: 0, l1: L, input: null, logits: true })),
  );
  outs.forEach((o, b) => seqs[b].tokens.push(argmax(o.logits)));
};
await stepOnce(); // untimed
ortTimes.on = true;
const t0 = performance.now();
for (let i = 0; i < steps; i++) await stepOnce();
const stepMs = (performance.now() - t0) / steps;
ortTimes.on = false;
let ortMs = 0;
for (const a of ortTimes.bySignature.values()) ortMs += a.ms;
console.log(
  `N = ${N}, B = ${B}: ${stepMs.toFixed(1)} ms per step (${(stepMs / B).toFixed(2)} ms a row), onnxruntime ${(ortMs / steps).toFixed(1)} ms of it; by graph signature (ms per step, runs per step, costliest shapes):`,
);
for (const line of bySignatureLines(ortTimes, steps)) console.log(line);
