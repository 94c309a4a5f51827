#!/usr/bin/env node
/**
 * Where a decode step's time goes, by ONNX graph: decode steps on a synthetic global cache of N tokens
 * (@csa2/core fillSyntheticCache), after a question's encoder + decoder replay, with onnxruntime-node's
 * InferenceSession.prototype.run wrapped to time every run by its session's input and output names
 * (one signature per graph kind: scan, candidate-source scan, pool, attention, ...). A diagnostic, not a
 * bench suite (it patches onnxruntime's prototype; the suites use only @csa2/core's public API).
 *
 *   npm run build && MALLOC_MMAP_THRESHOLD_=131072 node bench/tools/decode-graph-times.mjs MODEL_DIR N [STEPS]
 *
 * MODEL_DIR: a checkpoint, e.g. the one the documents-scale suite makes under .csa2/bench/v41-tiny-40l-seed1-*.
 * Prints the step time, then per graph signature its ms per step, runs per step and the input shapes
 * that took the most time.
 */
import { createRequire } from 'node:module';
import { argmax, fillSyntheticCache, loadModel } from '@csa2/core';

const [dir, nText, stepsText] = process.argv.slice(2);
if (dir === undefined || nText === undefined) {
  console.error('usage: node bench/tools/decode-graph-times.mjs MODEL_DIR N [STEPS]');
  process.exit(2);
}
const N = Number(nText);
const steps = Number(stepsText ?? 4);
const ort = await import(createRequire(import.meta.resolve('@csa2/core')).resolve('onnxruntime-node'));
const proto = ort.InferenceSession.prototype;
const run = proto.run;
let timing = false;
const bySignature = new Map();
proto.run = async function timedRun(feeds, ...rest) {
  if (!timing) return run.call(this, feeds, ...rest);
  const t0 = performance.now();
  const out = await run.call(this, feeds, ...rest);
  const ms = performance.now() - t0;
  const key = `${this.inputNames.join(',')} -> ${this.outputNames.join(',')}`;
  const shapes = Object.values(feeds).map((t) => t.dims.join('x')).join(' ');
  const a = bySignature.get(key) ?? { ms: 0, runs: 0, shapes: new Map() };
  a.ms += ms;
  a.runs++;
  a.shapes.set(shapes, (a.shapes.get(shapes) ?? 0) + ms);
  bySignature.set(key, a);
  return out;
};

const model = await loadModel(dir);
const seq = model.createSequence();
seq.reserveTokens(N + 64);
fillSyntheticCache(seq, N, model.config.vocabSize, 3);
const question = Array.from({ length: 32 }, (_, i) => (i * 37) % model.config.vocabSize);
let logits = await model.decoderReplay(seq, await model.encode(seq, question, { replayTokens: 128, keepRows: 128 }));
logits = await model.step(seq, argmax(logits)); // one untimed step
timing = true;
const t0 = performance.now();
for (let i = 0; i < steps; i++) logits = await model.step(seq, argmax(logits));
const stepMs = (performance.now() - t0) / steps;
timing = false;
console.log(`N = ${N}: ${stepMs.toFixed(1)} ms per decode step; by graph signature (ms per step, runs per step, costliest input shapes):`);
for (const [key, a] of [...bySignature].sort((x, y) => y[1].ms - x[1].ms)) {
  const top = [...a.shapes].sort((x, y) => y[1] - x[1]).slice(0, 2).map(([s, ms]) => `${s} (${(ms / steps).toFixed(1)} ms)`).join('; ');
  console.log(`${(a.ms / steps).toFixed(1).padStart(8)} ms ${(a.runs / steps).toFixed(0).padStart(4)} runs  ${key}  [${top}]`);
}
await model.dispose();
