// The figures of fixtures/v41-mini-128k-official/README.md ("What it shows"), from its golden.safetensors
// and csa2-core (the compiled workspace: run `npm run build` first):
//
//   node training/fixture_stats.mjs [MODEL_DIR] [FIXTURE_DIR]
//
// Per teacher-forced row (the prefill row and the 72 decode steps along the official GPU run's greedy
// tokens), max |Δlogit| over the vocabulary, for: the official CPU run vs the official GPU run; csa2-core
// exact mode (bf16 numerics) vs both; csa2-core with decoder replay R = 128 (encode the prompt, replay
// the decoder over its last 128 rows, then decode steps) and with fp32 numerics, vs the GPU run. Then the
// free-running greedy agreement (how many leading tokens are equal) of the official GPU run, the official
// CPU run and csa2-core exact. Prints one JSON object.
import { fileURLToPath } from 'node:url';
import { Csa2Model, argmax, loadCheckpoint, openSafetensors } from '../packages/csa2-core/dist/index.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const MODEL_DIR = process.argv[2] ?? `${ROOT}models/v41-mini-128k`;
const FIXTURE_DIR = process.argv[3] ?? `${ROOT}fixtures/v41-mini-128k-official`;

const golden = openSafetensors(`${FIXTURE_DIR}/golden.safetensors`);
const prompt = Array.from(golden.readTensorI32('prompt_ids'));
const forced = Array.from(golden.readTensorI32('generated_ids'));
const cpuFree = Array.from(golden.readTensorI32('xcheck.generated_ids_cpu_free'));
const gpu = golden.readTensorF32('logits');
const cpu = golden.readTensorF32('xcheck.logits_bf16_cpu');
const ckpt = await loadCheckpoint(MODEL_DIR);
const V = ckpt.config.vocabSize;
const rows = forced.length;
const row = (a, t) => a.subarray(t * V, (t + 1) * V);

function maxAbsDiff(a, b) {
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
  return d;
}
function stats(d, same) {
  const s = [...d].sort((x, y) => x - y);
  const r = (x) => Math.round(x * 1000) / 1000;
  return {
    mean: r(d.reduce((a, x) => a + x, 0) / d.length),
    median: r(s[Math.floor(s.length / 2)]),
    max: r(s[s.length - 1]),
    row0: r(d[0]),
    sameArgmax: same === undefined ? undefined : `${same}/${d.length}`,
  };
}
const leading = (a, b) => {
  let n = 0;
  while (n < Math.min(a.length, b.length) && a[n] === b[n]) n++;
  return n;
};

/** Teacher-forced logits rows of csa2-core in one mode. */
async function forcedRows(numerics, replay) {
  const model = await Csa2Model.create(ckpt.config, ckpt.plan, { get: (n) => ckpt.tensor(n).data }, { numerics });
  const seq = model.createSequence();
  let logits;
  if (replay > 0) {
    const stream = await model.encode(seq, prompt, { replayTokens: replay, keepRows: replay });
    logits = await model.decoderReplay(seq, stream);
  } else {
    logits = await model.prefillExact(seq, prompt);
  }
  const out = [];
  for (let t = 0; t < rows; t++) {
    out.push(Float32Array.from(logits));
    if (t + 1 < rows) logits = await model.step(seq, forced[t]);
  }
  await model.dispose();
  return out;
}

async function freeGreedy() {
  const model = await Csa2Model.create(ckpt.config, ckpt.plan, { get: (n) => ckpt.tensor(n).data });
  const seq = model.createSequence();
  let logits = await model.prefillExact(seq, prompt);
  const ids = [];
  for (let t = 0; t < rows; t++) {
    const id = argmax(logits);
    ids.push(id);
    if (t + 1 < rows) logits = await model.step(seq, id);
  }
  await model.dispose();
  return ids;
}

const res = {};
const spread = [];
let sameCpu = 0;
for (let t = 0; t < rows; t++) {
  spread.push(maxAbsDiff(row(cpu, t), row(gpu, t)));
  if (argmax(row(cpu, t)) === argmax(row(gpu, t))) sameCpu++;
}
res['official CPU vs official GPU'] = stats(spread, sameCpu);
for (const [name, numerics, replay] of [
  ['csa2-core exact', 'bf16', 0],
  ['csa2-core replay R=128', 'bf16', 128],
  ['csa2-core fp32 numerics', 'fp32', 0],
]) {
  const t0 = Date.now();
  const mine = await forcedRows(numerics, replay);
  const dg = [],
    dc = [];
  let sg = 0,
    sc = 0;
  for (let t = 0; t < rows; t++) {
    dg.push(maxAbsDiff(mine[t], row(gpu, t)));
    dc.push(maxAbsDiff(mine[t], row(cpu, t)));
    if (argmax(mine[t]) === argmax(row(gpu, t))) sg++;
    if (argmax(mine[t]) === argmax(row(cpu, t))) sc++;
  }
  res[`${name} vs official GPU`] = stats(dg, sg);
  if (replay === 0 && numerics === 'bf16') res[`${name} vs official CPU`] = stats(dc, sc);
  console.error(`${name}: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}
const free = await freeGreedy();
res.freeRunning = { gpu_vs_cpu: leading(forced, cpuFree), csa2_exact_vs_gpu: leading(free, forced), csa2_exact_vs_cpu: leading(free, cpuFree), of: rows };
console.log(JSON.stringify(res, null, 1));
