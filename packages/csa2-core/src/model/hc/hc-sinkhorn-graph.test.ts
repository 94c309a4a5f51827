/**
 * hc_split_sinkhorn as graph nodes (GraphOps.hcSplitSinkhorn, the CUDA provider's prefill path)
 * against the TypeScript split (model/hc/hc-sinkhorn, the CPU's), and a model whose attnIn/attnOut graphs
 * split their mixes against the TypeScript one.
 *
 * Bounds, with u = 2^-24 (graph-ops-hc.test derives each implementation's distance to the float64
 * split): comb entries are ≤ 1 and each of the 2T + 1 normalization steps (an n-term sum, + ε, a
 * division: n + 2 roundings) and the softmax (16 more) moves an entry by at most that many u, so two
 * implementations that round in different orders differ by at most 2 · ((2T + 1)(n + 2) + 16) · u.
 * pre and post: the same float32 operations except onnxruntime's Sigmoid, which is not correctly
 * rounded (within a few u): 64 u.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { f32 } from '../../runtime/ort-session.js';
import { SeededRandom } from '../../weights/init-model.js';
import { fixturesRoot } from '../../testing/fixtures.js';
import { U32, boundMismatches, normalF32, outF32, runEmitter } from '../../testing/graph-harness.js';
import { hcSplitSinkhorn, type HcSplitParams } from './hc-sinkhorn.js';
import { loadModel } from '../load-model.js';
import { openSafetensors } from '../../weights/safetensors.js';
import { argmax } from '../generation/sampler.js';

const n = 4;
const M = (2 + n) * n;

for (const iters of [1, 2, 20]) {
  test(`graph Sinkhorn (T = ${iters}) within 2((2T+1)(n+2)+16)u of the TypeScript split; pre and post within 64u`, async () => {
    const rng = new SeededRandom(900 + iters);
    const rows = 96;
    const p: HcSplitParams = { n, iters, eps: 1e-6, scale: Float32Array.from([0.7, 1.3, 2.1]), base: normalF32(rng, M, 0.5) };
    const mixes = normalF32(rng, rows * M, 2);
    const ts = hcSplitSinkhorn(mixes, p);
    const out = await runEmitter('hc_split', 'bf16', { mixes: f32(mixes, [rows, M]) }, ({ ops, inputs, output }) => {
      const s = ops.hcSplitSinkhorn(inputs['mixes'] as string, p, 'hc');
      output('pre', s.pre, [rows, n]);
      output('post', s.post, [rows, n]);
      output('comb', s.comb, [rows, n, n]);
    });
    const combBound = 2 * ((2 * iters + 1) * (n + 2) + 16) * U32;
    assert.deepEqual(
      boundMismatches(outF32(out, 'comb'), ts.comb, () => combBound),
      [],
      'comb',
    );
    assert.deepEqual(
      boundMismatches(outF32(out, 'pre'), ts.pre, () => 64 * U32),
      [],
      'pre',
    );
    assert.deepEqual(
      boundMismatches(outF32(out, 'post'), ts.post, () => 64 * U32),
      [],
      'post',
    );
  });
}

test("tiny-a with the split in its graphs: the official greedy ids, every logits row within the parity tests' bound", async () => {
  // The bound is reference-parity's: max(1e-3, 1.05 × the row's spread between the official GPU and CPU
  // executions). A last-place difference in the split can flip a bf16 rounding downstream (the window
  // KV), which is how the official code's two executions come to differ by that spread.
  const dir = join(fixturesRoot(), 'deepseek-v41-tiny-a');
  const golden = openSafetensors(join(dir, 'golden.safetensors'));
  const model = await loadModel(dir, { sinkhorn: 'graph' });
  try {
    const prompt = Array.from(golden.readTensorI32('prompt_ids'));
    const expected = Array.from(golden.readTensorI32('generated_ids'));
    const gpu = golden.readTensorF32('logits');
    const cpu = golden.readTensorF32('xcheck.logits_bf16_cpu');
    const V = model.config.vocabSize;
    const seq = model.createSequence();
    let last = await model.prefillExact(seq, prompt);
    const ids: number[] = [];
    for (let t = 0; t < expected.length; t++) {
      let d = 0;
      let spread = 0;
      for (let i = 0; i < V; i++) {
        d = Math.max(d, Math.abs((last[i] as number) - (gpu[t * V + i] as number)));
        spread = Math.max(spread, Math.abs((gpu[t * V + i] as number) - (cpu[t * V + i] as number)));
      }
      assert.ok(d <= Math.max(1e-3, 1.05 * spread), `row ${t}: ${d} from the official GPU run, its GPU–CPU spread ${spread}`);
      ids.push(argmax(last));
      if (t + 1 < expected.length) last = await model.step(seq, ids[t] as number);
    }
    assert.deepEqual(ids, expected);
  } finally {
    await model.dispose();
    golden.close();
  }
});
