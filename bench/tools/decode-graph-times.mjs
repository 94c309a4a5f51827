#!/usr/bin/env node
/**
 * Where a decode step's time goes, by ONNX graph: decode steps on a synthetic global cache of N tokens
 * (@csa2/core fillSyntheticCache), after a question's encoder + decoder replay, with onnxruntime-node's
 * InferenceSession.prototype.run wrapped to time every run by its session's input and output names
 * (one signature per graph kind: scan, candidate-source scan, pool, attention, ...). A diagnostic, not a
 * bench suite (it patches onnxruntime's prototype; the suites use only @csa2/core's public API).
 *
 *   npm run build && MALLOC_MMAP_THRESHOLD_=1048576 node bench/tools/decode-graph-times.mjs MODEL_DIR N [STEPS]
 *
 * MODEL_DIR: a checkpoint, e.g. the one the documents-scale suite makes under .csa2/bench/v41-tiny-40l-seed1-*.
 * Prints the step time, then per graph signature its ms per step, runs per step and the input shapes
 * that took the most time.
 */
import { argmax, loadModel } from '@csa2/core';
import { fillSyntheticCache } from '@csa2/core/testing';
import { bySignatureLines, timeOrtRuns } from './ort-timing.mjs';

const [dir, nText, stepsText] = process.argv.slice(2);
if (dir === undefined || nText === undefined) {
  console.error('usage: node bench/tools/decode-graph-times.mjs MODEL_DIR N [STEPS]');
  process.exit(2);
}
const N = Number(nText);
const steps = Number(stepsText ?? 4);
const ortTimes = await timeOrtRuns();

const model = await loadModel(dir);
const seq = model.createSequence();
seq.reserveTokens(N + 64);
fillSyntheticCache(seq, N, model.config.vocabSize, 3);
const question = Array.from({ length: 32 }, (_, i) => (i * 37) % model.config.vocabSize);
let logits = await model.decoderReplay(seq, await model.encode(seq, question, { replayTokens: 128, keepRows: 128 }));
logits = await model.step(seq, argmax(logits)); // one untimed step
ortTimes.on = true;
const t0 = performance.now();
for (let i = 0; i < steps; i++) logits = await model.step(seq, argmax(logits));
const stepMs = (performance.now() - t0) / steps;
ortTimes.on = false;
console.log(`N = ${N}: ${stepMs.toFixed(1)} ms per decode step; by graph signature (ms per step, runs per step, costliest input shapes):`);
for (const line of bySignatureLines(ortTimes, steps)) console.log(line);
await model.dispose();
