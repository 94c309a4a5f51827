/**
 * Batch invariance: a sequence's results do not depend on what else is in its forward call. Three
 * sequences of different lengths and kinds — an exact prefill then greedy decode, a CED prompt (encode
 * chunks, decoder replay, decode), and a decode-only continuation — run once each alone and once
 * interleaved in shared forward calls (decode rows of one beside prefill, encode and replay chunks of
 * the others). Every logits row, every generated token and every cache byte must be identical: the
 * measured max |Δlogit| is 0. On the tiny-a fixture and on a seeded 40-layer released-schedule model.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { goldenFixtures } from '../testing/fixtures.js';
import { bundledConfig, withSeededCheckpoint } from '../testing/seeded-model.js';
import { loadCheckpoint, type Checkpoint } from '../weights/checkpoint.js';
import { SeededRandom } from '../weights/init-model.js';
import { Csa2Model } from './model.js';
import { sharedScanStats } from './indexer/indexer-scan.js';
import { argmax } from './generation/sampler.js';
import type { Sequence } from './sequence/sequence.js';
import type { Span, StreamRows } from './sequence/span.js';

/** A sequence driven call by call: each call contributes at most one span and consumes its output. */
interface Driver {
  readonly seq: Sequence;
  readonly logits: Float32Array[];
  /** The span of the next call, or null when done. */
  next(): Span | null;
  /** Takes the call's output for that span. */
  took(out: { stream: StreamRows; logits: Float32Array | null }): void;
}

function drivers(model: Csa2Model, rng: SeededRandom): Driver[] {
  const L = model.config.numLayers;
  const dec = model.decoderStart;
  const ids = (n: number) => Array.from({ length: n }, () => rng.nextU32() % model.config.vocabSize);
  const decodeSteps = 5;

  // a: exact prefill of 37 tokens in chunks of 16, then greedy decode
  const exact = (): Driver => {
    const seq = model.createSequence();
    const prompt = ids(37);
    seq.tokens.append(prompt);
    const logits: Float32Array[] = [];
    let p = 0;
    return {
      seq,
      logits,
      next: () => {
        if (p < prompt.length) {
          const p1 = Math.min(prompt.length, p + 16);
          return { seq, layout: { kind: 'segment', start: 0, end: prompt.length }, p0: p, p1, l0: 0, l1: L, input: null, logits: p1 === prompt.length };
        }
        if (logits.length > decodeSteps) return null;
        seq.tokens.push(argmax(logits[logits.length - 1] as Float32Array));
        return { seq, layout: { kind: 'step' }, p0: seq.length - 1, p1: seq.length, l0: 0, l1: L, input: null, logits: true };
      },
      took: (out) => {
        if (p < prompt.length) p = Math.min(prompt.length, p + 16);
        if (out.logits !== null) logits.push(out.logits);
      },
    };
  };

  // b: CED: encode 90 tokens in chunks of 30 (keep the last 24 rows), replay 24 rows, greedy decode
  const ced = (): Driver => {
    const seq = model.createSequence();
    const prompt = ids(90);
    seq.tokens.append(prompt);
    const R = 24;
    const logits: Float32Array[] = [];
    const { hcMult: n, dim: d } = model.config;
    const keptX = new Float32Array(R * n * d);
    const keptPre = new Float32Array(R * n);
    let p = 0;
    let replayed = false;
    return {
      seq,
      logits,
      next: () => {
        if (p < prompt.length)
          return {
            seq,
            layout: { kind: 'segment', start: 0, end: prompt.length },
            p0: p,
            p1: Math.min(prompt.length, p + 30),
            l0: 0,
            l1: dec,
            input: null,
            compressAtEnd: true,
          };
        if (!replayed) {
          const input = { start: prompt.length - R, rows: R, X: keptX, pre: keptPre };
          return {
            seq,
            layout: { kind: 'segment', start: prompt.length - R, end: prompt.length },
            p0: prompt.length - R,
            p1: prompt.length,
            l0: dec,
            l1: L,
            input,
            logits: true,
          };
        }
        if (logits.length > decodeSteps) return null;
        seq.tokens.push(argmax(logits[logits.length - 1] as Float32Array));
        return { seq, layout: { kind: 'step' }, p0: seq.length - 1, p1: seq.length, l0: 0, l1: L, input: null, logits: true };
      },
      took: (out) => {
        if (p < prompt.length) {
          const keepStart = prompt.length - R;
          for (let t = Math.max(p, keepStart); t < out.stream.start + out.stream.rows; t++) {
            const r = t - out.stream.start;
            keptX.set(out.stream.X.subarray(r * n * d, (r + 1) * n * d), (t - keepStart) * n * d);
            keptPre.set(out.stream.pre.subarray(r * n, (r + 1) * n), (t - keepStart) * n);
          }
          p = out.stream.start + out.stream.rows;
          return;
        }
        replayed = true;
        if (out.logits !== null) logits.push(out.logits);
      },
    };
  };

  // c: one short exact prefill (5 tokens) in a single chunk, then 12 decode steps
  const short = (): Driver => {
    const seq = model.createSequence();
    const prompt = ids(5);
    seq.tokens.append(prompt);
    const logits: Float32Array[] = [];
    return {
      seq,
      logits,
      next: () => {
        if (logits.length === 0) return { seq, layout: { kind: 'segment', start: 0, end: 5 }, p0: 0, p1: 5, l0: 0, l1: L, input: null, logits: true };
        if (logits.length > 12) return null;
        seq.tokens.push(argmax(logits[logits.length - 1] as Float32Array));
        return { seq, layout: { kind: 'step' }, p0: seq.length - 1, p1: seq.length, l0: 0, l1: L, input: null, logits: true };
      },
      took: (out) => {
        if (out.logits !== null) logits.push(out.logits);
      },
    };
  };
  return [exact(), ced(), short()];
}

/** Runs the drivers to the end; `together`: one forward call per round with every driver's span. */
async function run(model: Csa2Model, ds: Driver[], together: boolean): Promise<void> {
  for (;;) {
    const round = ds.map((d) => ({ d, span: d.next() })).filter((x): x is { d: Driver; span: Span } => x.span !== null);
    if (round.length === 0) return;
    if (together) {
      const outs = await model.forward(round.map((x) => x.span));
      round.forEach((x, i) => x.d.took(outs[i] as { stream: StreamRows; logits: Float32Array | null }));
    } else {
      for (const x of round) x.d.took((await model.forward([x.span]))[0] as { stream: StreamRows; logits: Float32Array | null });
    }
  }
}

async function checkInvariance(ckpt: Checkpoint): Promise<number> {
  const model = await Csa2Model.create(ckpt.config, ckpt.plan, { get: (n) => ckpt.tensor(n).data });
  const alone = drivers(model, new SeededRandom(77));
  const batched = drivers(model, new SeededRandom(77));
  await run(model, alone, false);
  await run(model, batched, true);
  let maxDiff = 0;
  alone.forEach((a, i) => {
    const b = batched[i] as Driver;
    assert.equal(a.logits.length, b.logits.length);
    a.logits.forEach((row, t) => {
      const other = b.logits[t] as Float32Array;
      for (let v = 0; v < row.length; v++) maxDiff = Math.max(maxDiff, Math.abs((row[v] as number) - (other[v] as number)));
    });
    assert.deepEqual(Array.from(b.seq.tokens.view()), Array.from(a.seq.tokens.view()), `sequence ${i}: tokens`);
    for (const [layer, c] of a.seq.caches) {
      assert.deepEqual(b.seq.cache(layer).mainKv.view(), c.mainKv.view(), `sequence ${i}: layer ${layer} main KV`);
      assert.deepEqual(b.seq.cache(layer).indexK.view(), c.indexK.view(), `sequence ${i}: layer ${layer} index K`);
    }
    a.seq.windows.forEach((w, l) => assert.deepEqual(b.seq.windows[l]?.rows, w.rows, `sequence ${i}: layer ${l} window`));
  });
  await model.dispose();
  return maxDiff;
}

test('tiny-a: each sequence gives the same logits, tokens and caches in a batch as alone (max |Δlogit| = 0)', async () => {
  const dir = goldenFixtures().find((d) => d.endsWith('deepseek-v41-tiny-a')) ?? (goldenFixtures()[0] as string);
  const ckpt = await loadCheckpoint(dir);
  const maxDiff = await checkInvariance(ckpt);
  console.log(`tiny-a: max |Δlogit| batched vs alone = ${maxDiff}`);
  assert.equal(maxDiff, 0);
  ckpt.close();
});

test('seeded 40-layer released schedule: the same in a batch as alone (max |Δlogit| = 0)', async () => {
  const config = { ...bundledConfig('v41-tiny-40l'), window_size: 16, index_topk: 12, candidate_topk_blocks: 3, candidate_block_size: 4, max_seq_len: 512 };
  await withSeededCheckpoint(config, 3, async (ckpt) => {
    const maxDiff = await checkInvariance(ckpt);
    console.log(`40-layer seeded: max |Δlogit| batched vs alone = ${maxDiff}`);
    assert.equal(maxDiff, 0);
  });
});

/**
 * Forks of one frozen document decoding together: their Full layers score the shared prefix in one
 * product per run (scanSplitShared) — each fork's logits, tokens and private cache bytes must equal its
 * run alone, with key chunks small enough that the prefix spans several chunks and the private tail
 * starts in a chunk of its own.
 */
async function checkForks(ckpt: Checkpoint, options: { indexerKeyChunk: number }): Promise<{ maxDiff: number; groups: number }> {
  const model = await Csa2Model.create(ckpt.config, ckpt.plan, { get: (n) => ckpt.tensor(n).data }, options);
  const L = model.config.numLayers;
  const rng = new SeededRandom(91);
  const V = model.config.vocabSize;
  const doc = model.createSequence();
  const prompt = Array.from({ length: 203 }, () => rng.nextU32() % V);
  doc.tokens.append(prompt);
  for (let p = 0; p < prompt.length; p += 64) {
    const p1 = Math.min(prompt.length, p + 64);
    await model.forward([{ seq: doc, layout: { kind: 'segment', start: 0, end: prompt.length }, p0: p, p1, l0: 0, l1: L, input: null, logits: false }]);
  }
  doc.freeze();
  const firsts = [5, 17, 29, 41];
  const decodeTogether = async () => {
    const forks = firsts.map((t) => {
      const seq = doc.fork();
      seq.tokens.push(t);
      return { seq, logits: [] as Float32Array[] };
    });
    for (let step = 0; step < 5; step++) {
      const spans = forks.map((f) => ({
        seq: f.seq,
        layout: { kind: 'step' as const },
        p0: f.seq.length - 1,
        p1: f.seq.length,
        l0: 0,
        l1: L,
        input: null,
        logits: true,
      }));
      const outs = await model.forward(spans);
      outs.forEach((o, i) => {
        const f = forks[i] as (typeof forks)[number];
        const row = o?.logits as Float32Array;
        f.logits.push(row);
        f.seq.tokens.push(argmax(row));
      });
    }
    return forks;
  };
  const before = sharedScanStats.groups;
  const alone = [];
  for (let i = 0; i < firsts.length; i++) alone.push(...(await decodeOne(i)));
  async function decodeOne(i: number) {
    const seq = doc.fork();
    seq.tokens.push(firsts[i] as number);
    const f = { seq, logits: [] as Float32Array[] };
    for (let step = 0; step < 5; step++) {
      const out = (await model.forward([{ seq, layout: { kind: 'step' }, p0: seq.length - 1, p1: seq.length, l0: 0, l1: L, input: null, logits: true }]))[0];
      f.logits.push(out?.logits as Float32Array);
      seq.tokens.push(argmax(out?.logits as Float32Array));
    }
    return [f];
  }
  assert.equal(sharedScanStats.groups, before, 'a fork alone scores its prefix alone');
  const batched = await decodeTogether();
  const groups = sharedScanStats.groups - before;
  let maxDiff = 0;
  alone.forEach((a, i) => {
    const b = batched[i] as (typeof batched)[number];
    a.logits.forEach((row, t) => {
      const other = b.logits[t] as Float32Array;
      for (let v = 0; v < row.length; v++) maxDiff = Math.max(maxDiff, Math.abs((row[v] as number) - (other[v] as number)));
    });
    assert.deepEqual(Array.from(b.seq.tokens.view()), Array.from(a.seq.tokens.view()), `fork ${i}: tokens`);
    for (const [layer, c] of a.seq.caches) {
      assert.deepEqual(b.seq.cache(layer).mainKv.view(), c.mainKv.view(), `fork ${i}: layer ${layer} main KV`);
      assert.deepEqual(b.seq.cache(layer).indexK.view(), c.indexK.view(), `fork ${i}: layer ${layer} index K`);
    }
  });
  await model.dispose();
  return { maxDiff, groups };
}

test('forks of one frozen document: the shared prefix scored together for all forks, the same as each fork alone (max |Δlogit| = 0)', async () => {
  const config = { ...bundledConfig('v41-tiny-40l'), window_size: 16, index_topk: 12, candidate_topk_blocks: 3, candidate_block_size: 4, max_seq_len: 512 };
  await withSeededCheckpoint(config, 5, async (ckpt) => {
    for (const indexerKeyChunk of [65536, 24]) {
      const { maxDiff, groups } = await checkForks(ckpt, { indexerKeyChunk });
      console.log(`forks, key chunks of ${indexerKeyChunk}: max |Δlogit| together vs alone = ${maxDiff}; ${groups} shared scans`);
      assert.ok(groups > 0, 'the forks decoding together took the shared-prefix scan');
      assert.equal(maxDiff, 0);
    }
  });
});
