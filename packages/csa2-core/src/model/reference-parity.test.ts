/**
 * Parity with the official reference on every golden fixture (fixtures/*, as goldenFixtures() lists them): exact mode,
 * greedy, layer by layer. Block outputs within one bf16 ulp of the reference streams and their
 * ffn-side `pre` mixes within the fixture's documented spread; every top-k list, candidate mask,
 * window ring and cache row identical, in the prefill and at every decode step; generated ids identical.
 *
 * Logits. The official run is on a GPU, whose expf and sigmoid are not correctly rounded (measured on an
 * H200: 30% of expf results are 1–2 ulp off). The hc mixes and the gate compute their float32
 * transcendental functions correctly rounded, as the official code does on a CPU. One ulp in one exp of
 * the hc Sinkhorn can move a bf16 rounding and with it the window KV, so a faithful CPU execution follows
 * the GPU run only up to the first such flip. The fixture measures that spread itself: the official code
 * re-run on a CPU (`xcheck.logits_bf16_cpu`). The criteria (fixed by the parity issue, not fitted):
 *   - row 0 (the prefill's logits) within 1e-5 of the official run;
 *   - every row t within max(1e-3, 1.05 × that row's own GPU–CPU spread) of the official run;
 *   - at most 2 rows further than 1e-5 from both official executions.
 * Fixtures without the CPU cross-check are held to 1e-3 on every row and 1e-5 on row 0.
 * `pre_out` (fp32): within 1.05 × 2.5e-4, the largest difference the fixture's README documents between
 * two faithful executions (its float64-accumulation cross-check, whose streams differ by one bf16 ulp
 * in places, as ours may).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { basename } from 'node:path';
import { goldenFixtures } from '../testing/fixtures.js';
import { loadCheckpoint } from '../weights/checkpoint.js';
import { openSafetensors } from '../weights/safetensors.js';
import { Csa2Model } from './model.js';
import { argmax } from './generation/sampler.js';
import { BF16_ULP } from '../numerics/bf16.js';
import { dequantizeIndexKRows, dequantizeMainKvRows } from '../numerics/formats.js';

/** Logits: the floor of every row's bound, and the bound where no second official execution measures the spread. */
const LOGITS_ATOL = 1e-3;
/** Logits: row 0, and what counts as equal to an official execution. */
const LOGITS_TIGHT = 1e-5;
/** Rows that may be further than LOGITS_TIGHT from both official executions. */
const MAX_FLIPPED_ROWS = 2;
/** pre_out: 1.05 × the fixture's documented spread between two faithful executions (2.5e-4). */
const PRE_OUT_ATOL = 1.05 * 2.5e-4;

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
    const pres = new Map<number, Float32Array>();
    const prefillTopk = new Map<number, Int32Array>();
    const prefillCand = new Map<number, Uint8Array>();
    const decodeTopk = new Map<number, number[][]>();
    let decoding = false;
    model.observer = {
      layerOutput: (l, p0, rows, X, pre) => {
        if (decoding) return;
        const all = streams.get(l) ?? new Float32Array(prompt.length * n * d);
        all.set(X, p0 * n * d);
        streams.set(l, all);
        const allPre = pres.get(l) ?? new Float32Array(prompt.length * n);
        allPre.set(pre, p0 * n);
        pres.set(l, allPre);
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
      if (golden.tensors.has(`prefill.layer${e.layer}.pre_out`)) {
        const preDiff = maxAbsDiff(pres.get(e.layer)!, golden.readTensorF32(`prefill.layer${e.layer}.pre_out`));
        assert.ok(preDiff <= PRE_OUT_ATOL, `layer ${e.layer} pre_out differs by ${preDiff}`);
      }
      if (e.isIndexSource)
        assert.deepEqual(Array.from(prefillTopk.get(e.layer)!), Array.from(golden.readTensorI32(`prefill.layer${e.layer}.topk`)), `layer ${e.layer} top-k`);
      if (e.isCandidateSource)
        assert.deepEqual(
          Array.from(prefillCand.get(e.layer)!),
          Array.from(golden.readTensorU8(`prefill.layer${e.layer}.candidates`)),
          `layer ${e.layer} candidates`,
        );
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
      decodeTopk
        .get(e.layer)!
        .forEach((row, s) => assert.deepEqual(row, Array.from(ref.subarray(s * kk, (s + 1) * kk)), `layer ${e.layer} decode step ${s + 1} top-k`));
    }
    for (const e of ckpt.plan.entries) {
      if (!e.isKvSource) continue;
      // the cache holds packed rows: their values (unpacked) must be the official fake-quantized ones
      const c = seq.cache(e.layer);
      const mainKv = dequantizeMainKvRows(c.mainKv.view(), ckpt.config.headDim);
      const indexK = dequantizeIndexKRows(c.indexK.view(), ckpt.config.indexHeadDim);
      assert.equal(
        maxAbsDiff(mainKv, golden.readTensorF32(`cache.layer${e.layer}.compress_kv`).subarray(0, mainKv.length)),
        0,
        `layer ${e.layer} main KV cache`,
      );
      assert.equal(maxAbsDiff(indexK, golden.readTensorF32(`cache.layer${e.layer}.index_k`).subarray(0, indexK.length)), 0, `layer ${e.layer} index K cache`);
    }
    // logits (see the module comment)
    assert.ok((official[0] as number) <= LOGITS_TIGHT, `logits row 0 (the prefill) differs from the official run by ${official[0]}`);
    if (golden.tensors.has('xcheck.logits_bf16_cpu')) {
      const cpuRef = golden.readTensorF32('xcheck.logits_bf16_cpu');
      const cpu = rowDiffs(cpuRef);
      const spreads = rows.map((_, t) => maxAbsDiff(cpuRef.subarray(t * V, (t + 1) * V), refLogits.subarray(t * V, (t + 1) * V)));
      console.log(
        `${name}: logits max |diff| per row vs the official code on a CPU: ${cpu.map((x) => x.toExponential(1)).join(' ')}; GPU–CPU spread per row: ${spreads.map((x) => x.toExponential(1)).join(' ')}`,
      );
      official.forEach((x, t) => {
        const bound = Math.max(LOGITS_ATOL, 1.05 * (spreads[t] as number));
        assert.ok(x <= bound, `logits row ${t} differs from the official run by ${x}, more than max(1e-3, 1.05 × the row's GPU–CPU spread ${spreads[t]})`);
      });
      const flipped = official.filter((x, t) => x > LOGITS_TIGHT && (cpu[t] as number) > LOGITS_TIGHT).length;
      assert.ok(
        flipped <= MAX_FLIPPED_ROWS,
        `${flipped} of ${rows.length} logits rows are further than 1e-5 from both official executions (at most ${MAX_FLIPPED_ROWS})`,
      );
    } else {
      official.forEach((x, t) => assert.ok(x <= LOGITS_ATOL, `logits row ${t} differs from the official run by ${x}`));
    }
    ckpt.close();
    golden.close();
    await model.dispose();
  });
}
