#!/usr/bin/env node
/**
 * A decode step's time by layer kind and its JS/WebAssembly CPU profile alone (the question's replay is
 * not profiled): a synthetic global cache of N tokens (@csa2/core fillSyntheticCache), a question's
 * encoder + decoder replay, then STEPS decode steps timed by layer kind (Csa2Model.timer) under the
 * V8 profiler (node:inspector), written to OUT (a .cpuprofile file) when given. A diagnostic.
 *
 * The question (its encode and decoder replay) is timed too, by layer kind. SCAN_THREADS=N|auto sets
 * the model's scan threads (ModelOptions.scanThreads; default auto), for side-by-side runs.
 *
 *   npm run build && MALLOC_MMAP_THRESHOLD_=1048576 [SCAN_THREADS=0] node bench/tools/decode-profile.mjs MODEL_DIR N [STEPS] [OUT]
 */
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { argmax, DECODE_ATTENTION_ARENA_ROWS, DEFAULT_RUNTIME_OPTIONS, loadModel } from '@csa2/core';
import { fillSyntheticCache } from '@csa2/core/testing';

const [dir, nText, stepsText, out] = process.argv.slice(2);
if (dir === undefined || nText === undefined) {
  console.error('usage: node bench/tools/decode-profile.mjs MODEL_DIR N [STEPS] [OUT]');
  process.exit(2);
}
const N = Number(nText);
const steps = Number(stepsText ?? 16);
const scanEnv = process.env.SCAN_THREADS;
const scanThreads = scanEnv === undefined || scanEnv === 'auto' ? 'auto' : Number(scanEnv);
const model = await loadModel(dir, { runtime: { ...DEFAULT_RUNTIME_OPTIONS, attentionArenaMaxRows: DECODE_ATTENTION_ARENA_ROWS }, scanThreads });
await model.warmUp();
const seq = model.createSequence();
seq.reserveTokens(N + 64 + steps);
fillSyntheticCache(seq, N, model.config.vocabSize, 3);
const question = Array.from({ length: 32 }, (_, i) => (i * 37) % model.config.vocabSize);
const byKind = new Map();
const add = (kind, ms) => byKind.set(kind, (byKind.get(kind) ?? 0) + ms);
model.timer = { layer: add, other: add };
const q0 = performance.now();
let logits = await model.decoderReplay(seq, await model.encode(seq, question, { replayTokens: 128, keepRows: 128 }));
const questionMs = performance.now() - q0;
console.log(
  `N = ${N}, scan threads ${scanThreads}: the question (encode + decoder replay) ${questionMs.toFixed(0)} ms; by layer kind (ms): ${[...byKind].map(([k, ms]) => `${k} ${ms.toFixed(0)}`).join(', ')}`,
);
byKind.clear();
model.timer = null;
logits = await model.step(seq, argmax(logits)); // one untimed step
model.timer = { layer: add, other: add };
const session = new Session();
session.connect();
if (out !== undefined) {
  await session.post('Profiler.enable');
  await session.post('Profiler.setSamplingInterval', { interval: 100 });
  await session.post('Profiler.start');
}
const t0 = performance.now();
for (let i = 0; i < steps; i++) logits = await model.step(seq, argmax(logits));
const stepMs = (performance.now() - t0) / steps;
if (out !== undefined) {
  const { profile } = await session.post('Profiler.stop');
  writeFileSync(out, JSON.stringify(profile));
}
model.timer = null;
console.log(
  `N = ${N}, scan threads ${scanThreads}: ${stepMs.toFixed(2)} ms per decode step; by layer kind (ms per step): ${[...byKind].map(([k, ms]) => `${k} ${(ms / steps).toFixed(2)}`).join(', ')}`,
);
await model.dispose();
