/**
 * The forward modes agree with each other where they must: chunking never changes an encode, decoder
 * replay over the whole prompt equals exact prefill, encoder replay over the whole cached prefix equals
 * encoding everything at once, and the plain fp32 mode lands on the reference's fp32 variant.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { goldenFixtures } from '../testing/fixtures.js';
import { loadCheckpoint } from '../weights/checkpoint.js';
import { openSafetensors } from '../weights/safetensors.js';
import { Csa2Model, type ModelOptions } from './model.js';
import { runGreedy } from '../testing/greedy.js';
import { attentionTableStats } from './attention/attention.js';
import { DEFAULT_RUNTIME_OPTIONS } from '../runtime/ort-session.js';

const dir = goldenFixtures().find((d) => d.endsWith('deepseek-v41-tiny-a')) ?? (goldenFixtures()[0] as string);
const ckpt = await loadCheckpoint(dir);
const golden = openSafetensors(`${dir}/golden.safetensors`);
const prompt = Array.from(golden.readTensorI32('prompt_ids'));
const weights = { get: (n: string) => ckpt.tensor(n).data };
const open = (o: Partial<ModelOptions> = {}) => Csa2Model.create(ckpt.config, ckpt.plan, weights, o);

function same(a: Float32Array | Uint8Array, b: Float32Array | Uint8Array, label: string): void {
  assert.equal(a.length, b.length, `${label}: length`);
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) assert.fail(`${label}: differs at ${i}: ${a[i]} vs ${b[i]}`);
}

test('encode is identical whatever the chunking (odd chunk sizes included)', async () => {
  const results = [];
  for (const chunkTokens of [256, 7, 1, 13]) {
    const model = await open({ chunkTokens });
    const seq = model.createSequence();
    const stream = await model.encode(seq, prompt, { replayTokens: 128, keepRows: 16 });
    results.push({ seq, stream });
    await model.dispose();
  }
  const [base, ...rest] = results;
  for (const r of rest) {
    same(r.stream.X, base!.stream.X, 'decoder-input stream');
    for (const [layer, c] of base!.seq.caches) {
      same(r.seq.cache(layer).mainKv.view(), c.mainKv.view(), `layer ${layer} main KV`);
      same(r.seq.cache(layer).indexK.view(), c.indexK.view(), `layer ${layer} index K`);
    }
  }
});

test('decoder replay over at least the whole prompt equals exact prefill, token for token and logit for logit', async () => {
  const model = await open();
  const exact = await runGreedy(model, prompt, { maxTokens: 6, mode: 'exact' });
  for (const replayTokens of [prompt.length, 1000]) {
    const replay = await runGreedy(model, prompt, { maxTokens: 6, mode: { replayTokens } });
    assert.deepEqual(replay.tokens, exact.tokens);
    replay.logits.forEach((row, i) => same(row, exact.logits[i]!, `replay ${replayTokens} logits row ${i}`));
  }
  // a short replay is an approximation: it must still run and produce in-vocabulary tokens
  const short = await runGreedy(model, prompt, { maxTokens: 6, mode: { replayTokens: 4 } });
  assert.equal(short.tokens.length, 6);
  assert.ok(short.tokens.every((t) => t >= 0 && t < ckpt.config.vocabSize));
  await model.dispose();
});

test('encoder replay over the whole cached prefix equals encoding prefix and suffix at once', async () => {
  const model = await open({ chunkTokens: 16 });
  const all = model.createSequence();
  const once = await model.encode(all, prompt, { replayTokens: 1, keepRows: 8 });
  const split = model.createSequence();
  await model.encode(split, prompt.slice(0, 33), { replayTokens: 1, keepRows: 1 });
  const appended = await model.encode(split, prompt.slice(33), { replayTokens: 1000, keepRows: 8 });
  same(appended.X, once.X, 'decoder-input stream of the last rows');
  for (const [layer, c] of all.caches) same(split.cache(layer).mainKv.view(), c.mainKv.view(), `layer ${layer} main KV`);
  await model.dispose();
});

test('fp32 numerics mode lands on the reference fp32 variant (logits_fp32) within 1e-5', async () => {
  const model = await open({ numerics: 'fp32' });
  const ids = Array.from(golden.readTensorI32('generated_ids'));
  const ref = golden.readTensorF32('logits_fp32');
  const V = ckpt.config.vocabSize;
  const run = await runGreedy(model, prompt, { maxTokens: ids.length, mode: 'exact', forceIds: ids });
  run.logits.forEach((row, t) => {
    let d = 0;
    for (let v = 0; v < V; v++) d = Math.max(d, Math.abs((row[v] as number) - (ref[t * V + v] as number)));
    assert.ok(d < 1e-5, `row ${t}: max |diff| ${d}`);
  });
  await model.dispose();
});

test('windows wider than one attention block: short prompts run, and are exact (-1 padding is neutral)', async () => {
  // the same weights with window 8, 64 and 128. A 5-token prompt is laid out identically (5 window
  // columns, then the compressed ones) whatever the window, so the prefill logits must be
  // bit-identical; with window 128 a window-only layer's list spans two blocks of 64, the second all
  // -1. Decode steps use the ring layout, where a wider window moves the compressed columns to a later
  // block (a different blocked-softmax rounding, as in the reference; the quantizers and top-k then
  // amplify it), so they are only checked to run.
  const ids = prompt.slice(0, 5);
  const runs: Float32Array[][] = [];
  for (const windowSize of [8, 64, 128]) {
    const config = { ...ckpt.config, windowSize };
    const model = await Csa2Model.create(config, ckpt.plan, weights);
    const out = await runGreedy(model, ids, { maxTokens: 5, mode: 'exact' });
    runs.push(out.logits);
    await model.dispose();
  }
  const [base, ...rest] = runs;
  for (const [w, r] of rest.entries()) {
    same(r[0]!, base![0]!, `window ${[64, 128][w]} prefill logits`);
    assert.equal(r.length, 5);
    r.forEach((row, i) => assert.ok(row.every(Number.isFinite), `window ${[64, 128][w]} row ${i}: finite logits`));
  }
});

test("a decode batch's attention key tables, read in place after the selected entries or copied (a budget of 3 rows a run): the same logits, bit for bit", async () => {
  const whole = await open();
  const c = ckpt.config;
  const blocked = await open({ attentionBudgetValues: 3 * (64 + 3 * c.numHeads) * c.headDim });
  const base = whole.createSequence();
  await whole.prefillExact(base, prompt);
  const batch = (model: Csa2Model) => {
    const seqs = Array.from({ length: 7 }, (_, b) => {
      const s = base.fork(base.length + 1);
      s.tokens.push((b * 37 + 5) % c.vocabSize);
      return s;
    });
    return model.forward(
      seqs.map((seq) => ({ seq, layout: { kind: 'step' as const }, p0: seq.length - 1, p1: seq.length, l0: 0, l1: c.numLayers, input: null, logits: true })),
    );
  };
  const before = { ...attentionTableStats };
  const one = await batch(whole);
  const afterWhole = { ...attentionTableStats };
  const runs = await batch(blocked);
  assert.equal(afterWhole.copied, before.copied, 'one run a layer: every key table in place');
  assert.ok(afterWhole.inPlace > before.inPlace);
  assert.ok(
    attentionTableStats.copied > afterWhole.copied && attentionTableStats.inPlace > afterWhole.inPlace,
    'three runs a layer: the first copied, the last in place',
  );
  one.forEach((o, b) => same(runs[b]!.logits as Float32Array, o.logits as Float32Array, `sequence ${b} logits`));
  await whole.dispose();
  await blocked.dispose();
});

test('attention runs above attentionArenaMaxRows go to the sessions without an arena: the same prefill and decode-batch logits, bit for bit', async () => {
  const c = ckpt.config;
  const arena = await open();
  const split = await open({ runtime: { ...DEFAULT_RUNTIME_OPTIONS, attentionArenaMaxRows: 2 } });
  const a = arena.createSequence();
  const b = split.createSequence();
  const n0 = attentionTableStats.noArena;
  const prefillArena = await arena.prefillExact(a, prompt);
  assert.equal(attentionTableStats.noArena, n0, 'no row limit: every run in the arena');
  same(await split.prefillExact(b, prompt), prefillArena, 'prefill logits');
  const n1 = attentionTableStats.noArena;
  assert.ok(n1 >= n0 + c.numLayers, `a ${prompt.length}-row prefill: every layer's runs without the arena (${n1 - n0} runs)`);
  a.freeze();
  b.freeze();
  const batch = async (model: Csa2Model, base: typeof a, size: number) => {
    const seqs = Array.from({ length: size }, (_, i) => {
      const s = base.fork(base.length + 1);
      s.tokens.push((i * 37 + 5) % c.vocabSize);
      return s;
    });
    const outs = await model.forward(
      seqs.map((seq) => ({ seq, layout: { kind: 'step' as const }, p0: seq.length - 1, p1: seq.length, l0: 0, l1: c.numLayers, input: null, logits: true })),
    );
    return outs.map((o) => o.logits as Float32Array);
  };
  for (const size of [2, 5]) {
    const want = await batch(arena, a, size);
    const n2 = attentionTableStats.noArena;
    const got = await batch(split, b, size);
    const noArenaRuns = attentionTableStats.noArena - n2;
    if (size <= 2) assert.equal(noArenaRuns, 0, `a batch of ${size} rows: in the arena`);
    else assert.equal(noArenaRuns, c.numLayers, `a batch of ${size} rows: one run a layer without the arena`);
    got.forEach((g, i) => same(g, want[i] as Float32Array, `batch of ${size}, sequence ${i} logits`));
  }
  await assert.rejects(
    open({ runtime: { ...DEFAULT_RUNTIME_OPTIONS, attentionArenaMaxRows: 0 } }),
    /attentionArenaMaxRows must be a positive integer or Infinity, got 0/,
  );
  await arena.dispose();
  await split.dispose();
});

test('attention run in row blocks (a small attention budget) gives the same prefill and decode logits as one run per chunk', async () => {
  const whole = await open();
  // (64 + 3·heads)·head_dim values per row: this budget leaves 3 rows per attention run
  const c = ckpt.config;
  const blocked = await open({ attentionBudgetValues: 3 * (64 + 3 * c.numHeads) * c.headDim });
  const a = whole.createSequence();
  const b = blocked.createSequence();
  same(await blocked.prefillExact(b, prompt), await whole.prefillExact(a, prompt), 'prefill logits');
  same(await blocked.step(b, 7), await whole.step(a, 7), 'decode logits');
  await whole.dispose();
  await blocked.dispose();
});
