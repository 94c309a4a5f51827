#!/usr/bin/env node
/**
 * Which float32 exp decides where csa2-core's logits leave the official GPU run's (README, "Parity with
 * the official reference"). Runs a golden fixture in exact mode, teacher-forced with the official
 * generated ids, and prints the largest logits difference per row against the official GPU run
 * (`logits`) and the official code's CPU run (`xcheck.logits_bf16_cpu`). Then, for decode step STEP,
 * it raises or lowers one Math.exp result at a time by one float32 ulp (the exps of the hc Sinkhorn and
 * the MoE gate, which csa2-core computes in TypeScript) and prints every single change after which all
 * rows equal the official GPU run within 1e-6.
 *
 *   npm run build && node tools/parity/exp-nudge.mjs [FIXTURE_DIR] [STEP]
 *   (defaults: fixtures/deepseek-v41-tiny-a, step 4; ~1 min on tiny-a)
 */
import { join } from 'node:path';
import { Csa2Model, loadCheckpoint, openSafetensors } from '@csa2/core';
import { fixturesRoot } from '@csa2/core/testing';

const dir = process.argv[2] ?? join(fixturesRoot(), 'deepseek-v41-tiny-a');
const step = Number(process.argv[3] ?? 4);
const ckpt = await loadCheckpoint(dir);
const model = await Csa2Model.create(ckpt.config, ckpt.plan, { get: (n) => ckpt.tensor(n).data });
const golden = openSafetensors(join(dir, 'golden.safetensors'));
const prompt = Array.from(golden.readTensorI32('prompt_ids'));
const ids = Array.from(golden.readTensorI32('generated_ids'));
const gpu = golden.readTensorF32('logits');
const cpu = golden.tensors.has('xcheck.logits_bf16_cpu') ? golden.readTensorF32('xcheck.logits_bf16_cpu') : null;
const V = ckpt.config.vocabSize;

const exp = Math.exp;
const cell = new Float32Array(1);
const bits = new Uint32Array(cell.buffer);
const bitsOf = (v) => ((cell[0] = v), bits[0].toString(16).padStart(8, '0'));

/** Teacher-forced run; `nudge` (call index, ±1) changes one exp result of the chosen step. */
async function run(nudge) {
  const inputs = [];
  const seq = model.createSequence();
  const rows = [await model.prefillExact(seq, prompt)];
  for (let t = 1; t < ids.length; t++) {
    if (t === step) {
      Math.exp = (x) => {
        const i = inputs.push(x) - 1;
        cell[0] = exp(x);
        if (nudge !== null && i === nudge.call && cell[0] !== 0 && Number.isFinite(cell[0])) bits[0] += nudge.dir;
        return nudge !== null && i === nudge.call ? cell[0] : exp(x);
      };
    }
    try {
      rows.push(await model.step(seq, ids[t - 1]));
    } finally {
      Math.exp = exp;
    }
  }
  const diffs = (ref) =>
    rows.map((r, t) => {
      let d = 0;
      for (let i = 0; i < V; i++) d = Math.max(d, Math.abs(r[i] - ref[t * V + i]));
      return d;
    });
  return { gpu: diffs(gpu), cpu: cpu === null ? null : diffs(cpu), inputs };
}

const fmt = (xs) => xs.map((x) => x.toExponential(1)).join(' ');
const base = await run(null);
console.log(`max |logits diff| per row vs the official GPU run:  ${fmt(base.gpu)}`);
if (base.cpu !== null) console.log(`max |logits diff| per row vs the official CPU run:  ${fmt(base.cpu)}`);
console.log(`decode step ${step} computes ${base.inputs.length} float32 exps in TypeScript; nudging each by ±1 ulp:`);
let found = 0;
for (let call = 0; call < base.inputs.length; call++) {
  for (const dir of [1, -1]) {
    const r = await run({ call, dir });
    if (Math.max(...r.gpu) <= 1e-6) {
      found++;
      const x = Math.fround(base.inputs[call]);
      console.log(
        `  exp #${call} ${dir > 0 ? '+1' : '-1'} ulp: all ${r.gpu.length} rows within ${Math.max(...r.gpu).toExponential(1)} of the GPU run (input ${x}, 0x${bitsOf(x)}; exp 0x${bitsOf(exp(x))})`,
      );
    }
  }
}
if (found === 0) console.log('  no single one-ulp change reproduces the GPU run');
await model.dispose();
ckpt.close();
golden.close();
