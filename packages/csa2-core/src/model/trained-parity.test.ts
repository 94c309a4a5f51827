/**
 * The served checkpoint (models/v41-mini-128k) against the official `inference/model.py` run on it
 * (fixtures/v41-mini-128k-official: a 2,048-token held-out Austen prompt, prefill + 72 decode steps;
 * README there). Exact mode, teacher-forced along the official GPU run's greedy tokens, so that every
 * one of the 73 logits rows is comparable.
 *
 * What the fixture measured about this model (its README; step 1334, the served checkpoint): the official
 * code's own two executions, on the H200 and on that machine's CPU, differ by 0.20 in the prefill row and 0.229
 * per row on average (max 1.27), and their greedy paths part after 53 tokens (step 1020: 0.31, 0.165, 10 tokens;
 * step 537: 0.088, 0.18, 33 tokens). The cause is the model's quantizers, not a defect: the MXFP4
 * index queries and keys put the indexer's scores on a coarse grid (5,954 of 2,048 × 8 prefill rows
 * have a tie at the top-k boundary), so one last-place difference in the float32 hc mix
 * (where csa2-core and the official code first differ: layer 0's outputs are bit-identical, its
 * ffn-side pre mix differs by one float32 ulp in 2 of the last 8 rows) changes a bf16 rounding, an FP8
 * or FP4 rounding after it and then which entries are selected. The tiny-a fixture's criteria (row 0
 * within 1e-5, every row within max(1e-3, 1.05 × that row's GPU–CPU spread)) therefore cannot hold here
 * for any faithful execution: three such executions are mutually about equally far apart, so a third
 * one exceeds the distance of the other two on many rows.
 *
 * The criterion: csa2-core is no further from the official GPU run, on the mean over the rows, than
 * 1.05 × the official code on a CPU is (step 1334: 0.226 against 1.05 × 0.229 = 0.241; step 1020: 0.150
 * against 0.173). It is a weak test, and says so: on step 1334 plain fp32 numerics instead of the
 * reference's bf16 pass it too (0.202), and decoder replay with R = 128 does not (0.275); on step 537 it
 * was the other way round (fp32 0.192 failed, replay 0.184 passed). The bit-level parity is the tiny-a fixture's
 * (reference-parity.test.ts).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { loadCheckpoint } from '../weights/checkpoint.js';
import { openSafetensors } from '../weights/safetensors.js';
import { Csa2Model } from './model.js';
import { argmax } from './generation/sampler.js';

// dist/model -> packages/csa2-core -> the repository root
const ROOT = fileURLToPath(new URL('../../../../', import.meta.url));
const MODEL_DIR = `${ROOT}models/v41-mini-128k`;
const FIXTURE = `${ROOT}fixtures/v41-mini-128k-official/golden.safetensors`;
/** The mean row distance may be this multiple of the official GPU–CPU mean spread (the tiny-a criterion's factor). */
const SPREAD_FACTOR = 1.05;

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  assert.equal(a.length, b.length);
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs((a[i] as number) - (b[i] as number)));
  return d;
}

const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;

test("v41-mini-128k: exact mode within the official code's own GPU–CPU spread (2K prompt, 73 rows)", async () => {
  const golden = openSafetensors(FIXTURE);
  const sha = createHash('sha256')
    .update(readFileSync(`${MODEL_DIR}/model.safetensors`))
    .digest('hex');
  assert.equal(
    sha,
    golden.metadata['model_safetensors_sha256'],
    'models/v41-mini-128k changed since the fixture was made: regenerate it (fixtures/v41-mini-128k-official/README.md)',
  );

  const ckpt = await loadCheckpoint(MODEL_DIR);
  const model = await Csa2Model.create(ckpt.config, ckpt.plan, { get: (n) => ckpt.tensor(n).data });
  const prompt = Array.from(golden.readTensorI32('prompt_ids'));
  const forced = Array.from(golden.readTensorI32('generated_ids'));
  const gpu = golden.readTensorF32('logits');
  const cpu = golden.readTensorF32('xcheck.logits_bf16_cpu');
  const V = ckpt.config.vocabSize;
  const rows = forced.length;
  assert.equal(prompt.length, 2048);
  assert.equal(gpu.length, rows * V);

  const seq = model.createSequence();
  let logits = await model.prefillExact(seq, prompt);
  const mine: number[] = [];
  const spread: number[] = [];
  let sameArgmax = 0;
  for (let t = 0; t < rows; t++) {
    const ref = gpu.subarray(t * V, (t + 1) * V);
    mine.push(maxAbsDiff(logits, ref));
    spread.push(maxAbsDiff(cpu.subarray(t * V, (t + 1) * V), ref));
    if (argmax(logits) === argmax(ref)) sameArgmax++;
    if (t + 1 < rows) logits = await model.step(seq, forced[t] as number);
  }
  console.log(
    `v41-mini-128k vs the official GPU run: mean row max|Δlogit| ${mean(mine).toFixed(4)} (official CPU: ${mean(spread).toFixed(4)}), ` +
      `row 0 ${mine[0]!.toFixed(4)} (official CPU: ${spread[0]!.toFixed(4)}), argmax equal on ${sameArgmax}/${rows} rows`,
  );
  assert.ok(mean(spread) > 0, "the fixture's two official executions are identical: its xcheck is not a second execution");
  assert.ok(
    mean(mine) <= SPREAD_FACTOR * mean(spread),
    `mean row distance to the official run ${mean(mine)} exceeds ${SPREAD_FACTOR} × the official GPU–CPU spread ${mean(spread)}`,
  );
});
