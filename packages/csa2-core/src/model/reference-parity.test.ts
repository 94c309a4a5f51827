/**
 * Parity with the official reference on every golden fixture (../shared/fixtures/*): exact mode,
 * greedy, layer by layer. Block outputs within one bf16 ulp of the reference streams; every top-k list,
 * candidate mask, window ring and cache row identical; generated ids identical.
 *
 * Logits. The official run is on a GPU, whose expf and sigmoid are not correctly rounded (measured on an
 * H200: 30% of expf results are 1–2 ulp off). The hc mixes and the gate compute their float32
 * transcendental functions correctly rounded, as the official code does on a CPU. One ulp in one exp of
 * the hc Sinkhorn can move a bf16 rounding and with it the window KV, so a faithful CPU execution follows
 * the GPU run only up to the first such flip. The fixture measures that spread itself: the official code
 * re-run on a CPU (`xcheck.logits_bf16_cpu`) differs from `logits` by up to 0.0238. So every row of the
 * logits must be within that spread of the official GPU logits, and most rows must equal (1e-6) one of the
 * two official executions: the execution is bit-faithful apart from isolated flips (tiny-a: 16 of 17 rows,
 * all but row 8 equal to the CPU run, rows 0–3 to both). Fixtures without the CPU cross-check are held to
 * 1e-3 against the official logits.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { basename } from 'node:path';
import { goldenFixtures } from '../testing/fixtures.js';
import { loadCheckpoint } from '../weights/checkpoint.js';
import { openSafetensors } from '../weights/safetensors.js';
import { Csa2Model } from './model.js';
import { argmax } from './sampler.js';
import { BF16_ULP } from '../numerics/bf16.js';
import { dequantizeIndexKRows, dequantizeMainKvRows } from '../numerics/formats.js';

/** Logits tolerance where no second official execution measures the spread. */
const LOGITS_ATOL = 1e-3;
/** Last-place float32 differences of logits of magnitude ~4. */
const LOGITS_EXACT = 1e-6;

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length);
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs((a[i] as number) - (b[i] as number)));
  return d;
}

for (const dir of goldenFixtures()) {
  const name = basename(dir);
  test(`${name}: exact-mode parity with the official reference`, async () => {
    const ckpt = await loadCheckpoint(dir);
    const model = await Csa2Model.create(ckpt.config, ckpt.plan, { get: (n) => ckpt.tensor(n).data });
    const golden = openSafetensors(`${dir}/golden.safetensors`);
    const prompt = Array.from(golden.readTensorI32('prompt_ids'));
    const expectedIds = Array.from(golden.readTensorI32('generated_ids'));
    const refLogits = golden.readTensorF32('logits');
    const V = ckpt.config.vocabSize;
    const { hcMult: n, dim: d } = ckpt.config;

    const streams = new Map<number, Float32Array>();
    const prefillTopk = new Map<number, Int32Array>();
    const prefillCand = new Map<number, Uint8Array>();
    const decodeTopk = new Map<number, number[][]>();
    let decoding = false;
    model.observer = {
      layerOutput: (l, p0, rows, X) => {
        if (decoding) return;
        const all = streams.get(l) ?? new Float32Array(prompt.length * n * d);
        all.set(X, p0 * n * d);
        streams.set(l, all);
      },
      topk: (l, p0, rows, kk, t) => {
        if (decoding) (decodeTopk.get(l) ?? decodeTopk.set(l, []).get(l))!.push(Array.from(t));
        else prefillTopk.set(l, t.slice());
      },
      candidates: (l, _p0, _rows, _w, m) => {
        if (!decoding) prefillCand.set(l, m.slice());
      },
    };
    const seq = model.createSequence();
    let logits = await model.prefillExact(seq, prompt);

    // layer by layer: streams within one bf16 ulp; top-k, candidates, windows identical
    for (const e of ckpt.plan.entries) {
      const ref = golden.readTensorF32(`prefill.layer${e.layer}.hc_out`);
      const mine = streams.get(e.layer)!;
      let worst = 0;
      for (let i = 0; i < ref.length; i++) worst = Math.max(worst, Math.abs((mine[i] as number) - (ref[i] as number)) / BF16_ULP(ref[i] as number));
      assert.ok(worst <= 1, `layer ${e.layer} stream differs by ${worst} bf16 ulp`);
      if (e.isIndexSource) assert.deepEqual(Array.from(prefillTopk.get(e.layer)!), Array.from(golden.readTensorI32(`prefill.layer${e.layer}.topk`)), `layer ${e.layer} top-k`);
      if (e.isCandidateSource) assert.deepEqual(Array.from(prefillCand.get(e.layer)!), Array.from(golden.readTensorU8(`prefill.layer${e.layer}.candidates`)), `layer ${e.layer} candidates`);
      assert.equal(maxAbsDiff(seq.windows[e.layer]!.rows, golden.readTensorF32(`prefill.layer${e.layer}.window_kv`)), 0, `layer ${e.layer} window ring`);
    }

    // free-running greedy decode
    decoding = true;
    const ids: number[] = [];
    const rows: Float32Array[] = [];
    for (let t = 0; t < expectedIds.length; t++) {
      rows.push(logits);
      const id = argmax(logits);
      ids.push(id);
      if (t + 1 < expectedIds.length) logits = await model.step(seq, id);
    }
    const rowDiffs = (ref: Float32Array) => rows.map((r, t) => maxAbsDiff(r, ref.subarray(t * V, (t + 1) * V)));
    const official = rowDiffs(refLogits);
    console.log(`${name}: logits max |diff| per row vs the official (GPU) run: ${official.map((x) => x.toExponential(1)).join(' ')}`);
    assert.deepEqual(ids, expectedIds, 'generated ids');
    for (const e of ckpt.plan.entries) {
      if (!e.isIndexSource) continue;
      const ref = golden.readTensorI32(`decode.layer${e.layer}.topk`);
      const kk = ref.length / (expectedIds.length - 1);
      decodeTopk.get(e.layer)!.forEach((row, s) => assert.deepEqual(row, Array.from(ref.subarray(s * kk, (s + 1) * kk)), `layer ${e.layer} decode step ${s + 1} top-k`));
    }
    for (const e of ckpt.plan.entries) {
      if (!e.isKvSource) continue;
      // the cache holds packed rows: their values (unpacked) must be the official fake-quantized ones
      const c = seq.cache(e.layer);
      const mainKv = dequantizeMainKvRows(c.mainKv.view(), ckpt.config.headDim);
      const indexK = dequantizeIndexKRows(c.indexK.view(), ckpt.config.indexHeadDim);
      assert.equal(maxAbsDiff(mainKv, golden.readTensorF32(`cache.layer${e.layer}.compress_kv`).subarray(0, mainKv.length)), 0, `layer ${e.layer} main KV cache`);
      assert.equal(maxAbsDiff(indexK, golden.readTensorF32(`cache.layer${e.layer}.index_k`).subarray(0, indexK.length)), 0, `layer ${e.layer} index K cache`);
    }
    // logits (see the module comment)
    if (golden.tensors.has('xcheck.logits_bf16_cpu')) {
      const cpuRef = golden.readTensorF32('xcheck.logits_bf16_cpu');
      let spread = 0;
      for (let i = 0; i < cpuRef.length; i++) spread = Math.max(spread, Math.abs((cpuRef[i] as number) - (refLogits[i] as number)));
      const cpu = rowDiffs(cpuRef);
      console.log(`${name}: logits max |diff| per row vs the official code on a CPU: ${cpu.map((x) => x.toExponential(1)).join(' ')}; GPU–CPU spread ${spread.toExponential(2)}`);
      official.forEach((x, t) => assert.ok(x <= spread + LOGITS_EXACT, `logits row ${t} differs from the official run by ${x}, more than the official GPU–CPU spread ${spread}`));
      // bit-faithful apart from isolated flips: most rows equal one of the two official executions
      const exactRows = official.filter((x, t) => x <= LOGITS_EXACT || (cpu[t] as number) <= LOGITS_EXACT).length;
      assert.ok(2 * exactRows >= rows.length, `only ${exactRows} of ${rows.length} logits rows equal (1e-6) the official GPU or CPU run`);
    } else {
      official.forEach((x, t) => assert.ok(x <= LOGITS_ATOL, `logits row ${t} differs from the official run by ${x}`));
    }
    ckpt.close();
    golden.close();
    await model.dispose();
  });
}
