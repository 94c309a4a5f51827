/**
 * The split indexer (model/indexer/indexer-scores: keys unpacked in TypeScript, one Gemm, the bf16 einsum
 * finished and the picks made in TypeScript) gives the ONNX graphs' results bit for bit:
 * - unpackIndexKeys and IndexerKernels (WebAssembly) = graphs/packed-ops unpackIndexK for every
 *   payload and scale byte;
 * - whole runs (indexerScores 'split' vs 'graph'): every layer's top-k lists, the candidate blocks
 *   and the logits, in prefill chunks and decode, on the tiny-a fixture and on seeded 40-layer models
 *   whose pools are smaller than top-k, with scans in key chunks and over a shared prefix, in fp32
 *   numerics, with 1, 3 and 8 index heads (8: the head sum in the graph) and with ties everywhere
 *   (a model whose index scores are mostly equal).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GraphBuilder } from '../../onnx/graph-builder.js';
import { openGraphSession, u8 } from '../../runtime/ort-session.js';
import { goldenFixtures } from '../../testing/fixtures.js';
import { bundledConfig, withSeededCheckpoint } from '../../testing/seeded-model.js';
import { loadCheckpoint, type Checkpoint } from '../../weights/checkpoint.js';
import { SeededRandom } from '../../weights/init-model.js';
import { unpackIndexK } from '../graphs/packed-ops.js';
import { IndexerKernels, unpackIndexKeys } from './indexer-kernels.js';
import { Csa2Model, type ModelOptions } from '../model.js';
import { argmax } from '../generation/sampler.js';

test('unpackIndexKeys gives the graph unpack of packed index keys bit for bit (every payload and scale byte)', async () => {
  for (const d of [32, 128]) {
    const rowBytes = d / 2 + d / 32;
    const rows = 256 * 4;
    const rng = new SeededRandom(d);
    const packed = new Uint8Array(rows * rowBytes);
    for (let i = 0; i < rows; i++) {
      for (let j = 0; j < d / 2; j++) packed[i * rowBytes + j] = (i * 7 + j * 31 + (rng.nextU32() % 3)) & 0xff;
      // every scale byte, 0 and 0xff (value 0) and 0xfe (values overflow to ±inf) included
      for (let b = 0; b < d / 32; b++) packed[i * rowBytes + d / 2 + b] = (i + b * 97) & 0xff;
    }
    const g = new GraphBuilder('unpack');
    g.output(unpackIndexK(g, g.input('K', 'uint8', ['N', rowBytes]), d), 'v', 'float32', ['N', d]);
    const session = await openGraphSession('unpack', g.toBytes());
    const want = (await session.run({ K: u8(packed, [rows, rowBytes]) }))['v']?.data as Float32Array;
    await session.dispose();
    const js = new Float32Array(rows * d);
    unpackIndexKeys(packed, rows, d, js);
    // the WebAssembly unpacker twice (its memory reused), with padding rows after the keys
    const unpacker = new IndexerKernels(d);
    unpacker.unpack(packed.subarray(0, 3 * rowBytes), 3);
    const wasm = unpacker.unpack(packed, rows, rows + 2);
    assert.ok(
      wasm.subarray(rows * d).every((v) => Object.is(v, 0)),
      'padding rows are zero',
    );
    const a = new Uint32Array(want.buffer, want.byteOffset, want.length);
    for (const [what, got] of [
      ['TypeScript', js],
      ['WebAssembly', wasm.slice(0, rows * d)],
    ] as const) {
      const b = new Uint32Array(got.buffer, got.byteOffset, a.length);
      let same = 0;
      for (let i = 0; i < a.length; i++) if (a[i] === b[i]) same++;
      assert.equal(same, a.length, `${what}, d = ${d}: bits differ at ${a.length - same} of ${a.length} values`);
    }
  }
});

interface Trace {
  readonly topk: Map<number, number[][]>;
  readonly candidates: Map<number, number[][]>;
  readonly logits: Float32Array[];
  readonly runs: { readonly fused: number; readonly gemm: number } | null;
}

async function trace(ckpt: Checkpoint, options: Partial<ModelOptions>, prompt: readonly number[], steps: number, share = false): Promise<Trace> {
  const model = await Csa2Model.create(ckpt.config, ckpt.plan, { get: (n) => ckpt.tensor(n).data }, options);
  const topk = new Map<number, number[][]>();
  const candidates = new Map<number, number[][]>();
  const push = (m: Map<number, number[][]>, l: number, v: ArrayLike<number>) => (m.get(l) ?? m.set(l, []).get(l))!.push(Array.from(v));
  model.observer = { topk: (l, _p0, _rows, _kk, t) => push(topk, l, t), candidates: (l, _p0, _rows, _n, mask) => push(candidates, l, mask) };
  const prefilled = model.createSequence();
  const logits = [await model.prefillExact(prefilled, prompt)];
  if (share) prefilled.freeze();
  const seq = share ? prefilled.fork() : prefilled;
  for (let s = 0; s < steps; s++) logits.push(await model.step(seq, argmax(logits[logits.length - 1] as Float32Array)));
  const runs = model.indexScorerRuns === null ? null : { ...model.indexScorerRuns };
  await model.dispose();
  return { topk, candidates, logits, runs };
}

function sameTrace(a: Trace, b: Trace, what: string): void {
  assert.ok(a.topk.size > 0, `${what}: some layer picked`);
  assert.deepEqual([...a.topk.keys()], [...b.topk.keys()], what);
  for (const [l, lists] of a.topk) assert.deepEqual(lists, b.topk.get(l), `${what}: layer ${l} top-k lists`);
  for (const [l, masks] of a.candidates) assert.deepEqual(masks, b.candidates.get(l), `${what}: layer ${l} candidate blocks`);
  a.logits.forEach((row, i) => assert.deepEqual(row, b.logits[i], `${what}: logits row ${i}`));
}

async function bothWays(
  ckpt: Checkpoint,
  options: Partial<ModelOptions>,
  prompt: readonly number[],
  steps: number,
  what: string,
  share = false,
): Promise<void> {
  const split = await trace(ckpt, { ...options, indexerScores: 'split' }, prompt, steps, share);
  // up to 4 index heads the split path scores with the fused kernel (model/indexer/indexer-fused): every run with
  // index_head_dim 32, the decode rows' runs with more (the queries are MXFP4: never a fallback there)
  const { indexNumHeads: heads, indexHeadDim: d } = ckpt.config;
  const runs = split.runs;
  const expected = heads > 4 ? runs?.fused === 0 && (runs?.gemm ?? 0) > 0 : d === 32 ? (runs?.fused ?? 0) > 0 && runs?.gemm === 0 : (runs?.fused ?? 0) > 0;
  assert.ok(expected, `${what}: runs ${JSON.stringify(runs)} (${heads} index heads of ${d})`);
  sameTrace(split, await trace(ckpt, { ...options, indexerScores: 'graph' }, prompt, steps, share), what);
}

test('tiny-a: the split indexer gives the graph indexer lists, blocks and logits, bit for bit', async () => {
  const dir = goldenFixtures().find((d) => d.endsWith('deepseek-v41-tiny-a')) ?? (goldenFixtures()[0] as string);
  const ckpt = await loadCheckpoint(dir);
  const prompt = Array.from({ length: 48 }, (_, i) => (i * 37 + 11) % 256);
  await bothWays(ckpt, { chunkTokens: 256 }, prompt, 16, 'tiny-a');
  await bothWays(ckpt, { chunkTokens: 16, indexerKeyChunk: 4 }, prompt, 8, 'tiny-a, chunks of 16 tokens and 4 keys');
  await bothWays(ckpt, { chunkTokens: 256, numerics: 'fp32' }, prompt, 8, 'tiny-a, fp32');
  ckpt.close();
});

test('seeded 40-layer models: pools smaller than top-k, key chunks, a shared prefix, 1 / 3 / 8 index heads, ties', async () => {
  const small = { ...bundledConfig('v41-tiny-40l'), window_size: 8, index_topk: 6, candidate_topk_blocks: 2, candidate_block_size: 2, max_seq_len: 512 };
  await withSeededCheckpoint(small, 11, async (ckpt) => {
    const rng = new SeededRandom(5);
    const prompt = Array.from({ length: 77 }, () => rng.nextU32() % 256);
    await bothWays(ckpt, { chunkTokens: 32 }, prompt, 6, 'small pools');
    await bothWays(ckpt, { chunkTokens: 32, indexerKeyChunk: 6 }, prompt, 6, 'small pools, chunks of 6 keys');
    await bothWays(ckpt, { chunkTokens: 32, indexerKeyChunk: 6, indexerPool: false }, prompt, 4, 'small pools, the masked reference path');
    await bothWays(ckpt, { chunkTokens: 32, indexerKeyChunk: 6 }, prompt, 6, 'small pools, decode on a shared prefix', true);
    await bothWays(ckpt, { chunkTokens: 32, indexerBudgetValues: 64 }, prompt, 4, 'small pools, rows in blocks of a 64-score budget');
  });
  // pools of 8 blocks × 8 = 64 positions scored in runs of a few keys (a 64-score budget)
  await withSeededCheckpoint({ ...small, index_topk: 16, candidate_topk_blocks: 8, candidate_block_size: 8 }, 13, async (ckpt) => {
    const rng = new SeededRandom(8);
    const prompt = Array.from({ length: 150 }, () => rng.nextU32() % 256);
    await bothWays(ckpt, { chunkTokens: 64, indexerBudgetValues: 64 }, prompt, 4, 'pools of 64 positions, runs within a 64-score budget');
  });
  for (const heads of [1, 3, 8]) {
    await withSeededCheckpoint({ ...small, index_n_heads: heads }, 20 + heads, async (ckpt) => {
      const rng = new SeededRandom(heads);
      const prompt = Array.from({ length: 70 }, () => rng.nextU32() % 256);
      await bothWays(ckpt, { chunkTokens: 32, indexerKeyChunk: 6 }, prompt, 5, `${heads} index heads`);
    });
  }
  // ties: index head weights scaled down into float32's subnormals, so that most scores are 0 or one of a few tiny values
  await withSeededCheckpoint({ ...small, index_topk: 16, candidate_topk_blocks: 4 }, 31, async (ckpt) => {
    const scaled = new Map<string, Float32Array>();
    const get = (n: string): Float32Array => {
      const t = ckpt.tensor(n).data;
      if (!n.endsWith('indexer.weights_proj.weight')) return t;
      const s = scaled.get(n) ?? t.map((v) => Math.fround(v * 2 ** -132));
      scaled.set(n, s);
      return s;
    };
    const tied = { config: ckpt.config, plan: ckpt.plan, tensor: (n: string) => ({ data: get(n) }) } as unknown as Checkpoint;
    const rng = new SeededRandom(9);
    const prompt = Array.from({ length: 90 }, () => rng.nextU32() % 256);
    const t = await trace(tied, { chunkTokens: 32, indexerKeyChunk: 8, indexerScores: 'split' }, prompt, 4);
    sameTrace(t, await trace(tied, { chunkTokens: 32, indexerKeyChunk: 8, indexerScores: 'graph' }, prompt, 4), 'ties');
  });
});
