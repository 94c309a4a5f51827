/**
 * The one-graph encoder (ModelOptions.encoder 'graph', model/encoder/graph-encoder) against the layered
 * reference path on the CPU. Criterion, fixed before the comparison was run: the same bits — every KV
 * source's packed entries (the encoder's and the decoder's first), the open compressor groups, the window
 * rings, the published index-K slot, the kept decoder-input stream and every index source's top-k
 * lists — whatever the chunking (chunks that start inside a group or complete none take the layered
 * path, so odd chunkings mix both), on an encoder continuation, and on the served model's 20-layer
 * encoder. The graph computes the same float32 operations in the same order as the layered path
 * (exp in float64 rounded once, sums in index order), so nothing short of equality is expected.
 * And one graph run per chunk that it takes, moving only the packed rows, the window rows and the
 * kept stream.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { goldenFixtures } from '../../testing/fixtures.js';
import { loadCheckpoint, type Checkpoint } from '../../weights/checkpoint.js';
import { openSafetensors } from '../../weights/safetensors.js';
import { SeededRandom } from '../../weights/init-model.js';
import { graphIoBytes } from '../../runtime/ort-session.js';
import { Csa2Error } from '../../errors.js';
import { Csa2Model, type ModelOptions } from '../model.js';
import type { Sequence } from '../sequence/sequence.js';
import type { StreamRows } from '../sequence/span.js';

const ROOT = fileURLToPath(new URL('../../../../../', import.meta.url));
const tinyDir = goldenFixtures().find((d) => d.endsWith('deepseek-v41-tiny-a')) as string;
const servedDir = join(ROOT, 'models', 'v41-mini-128k');

interface Encoded {
  readonly seq: Sequence;
  readonly stream: StreamRows;
  readonly lists: Map<string, Int32Array>;
}

async function encode(
  ckpt: Checkpoint,
  encoder: ModelOptions['encoder'],
  chunkTokens: number,
  parts: readonly number[][],
  replayTokens: number,
): Promise<Encoded> {
  const model = await Csa2Model.create(ckpt.config, ckpt.plan, { get: (n) => ckpt.tensor(n).data }, { chunkTokens, encoder });
  const lists = new Map<string, Int32Array>();
  model.observer = { topk: (layer, p0, rows, kk, topk) => void lists.set(`${layer}@${p0}+${rows}/${kk}`, topk.slice()) };
  try {
    const seq = model.createSequence();
    let stream: StreamRows | null = null;
    for (const ids of parts) stream = await model.encode(seq, ids, { replayTokens, keepRows: 16 });
    return { seq, stream: stream as StreamRows, lists };
  } finally {
    await model.dispose();
  }
}

function sameBits(a: ArrayLike<number>, b: ArrayLike<number>, what: string): void {
  assert.equal(a.length, b.length, `${what}: length`);
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) assert.fail(`${what}: element ${i} is ${b[i]}, the layered path's ${a[i]}`);
}

function assertSame(ref: Encoded, got: Encoded, label: string): void {
  for (const [layer, c] of ref.seq.caches) {
    const g = got.seq.cache(layer);
    sameBits(c.mainKv.view(), g.mainKv.view(), `${label}: layer ${layer} main KV`);
    sameBits(c.indexK.view(), g.indexK.view(), `${label}: layer ${layer} index K`);
    assert.deepEqual([g.pendingGroup, g.pendingCount], [c.pendingGroup, c.pendingCount], `${label}: layer ${layer} open group`);
    if (c.pendingGroup !== -1)
      sameBits(
        c.pendingKv.subarray(0, c.pendingCount * c.headDim),
        g.pendingKv.subarray(0, c.pendingCount * c.headDim),
        `${label}: layer ${layer} open group rows`,
      );
  }
  assert.equal(got.seq.indexKSlot, ref.seq.indexKSlot, `${label}: index-K slot`);
  ref.seq.windows.forEach((ring, l) => {
    const other = got.seq.windows[l];
    assert.ok(other !== undefined);
    for (let slot = 0; slot < ring.window; slot++) {
      const pos = ring.positions[slot] as number;
      if (pos < 0) continue;
      const row = other.get(pos);
      assert.ok(row !== null, `${label}: layer ${l} window row of position ${pos} missing`);
      sameBits(ring.rows.subarray(slot * ring.width, (slot + 1) * ring.width), row, `${label}: layer ${l} window row ${pos}`);
    }
  });
  assert.deepEqual([got.stream.start, got.stream.rows], [ref.stream.start, ref.stream.rows], `${label}: kept rows`);
  sameBits(ref.stream.X, got.stream.X, `${label}: kept stream`);
  sameBits(ref.stream.pre, got.stream.pre, `${label}: kept collapse mix`);
  // lists by row: the layered path may show a chunk's rows in parts where it took them
  const rowsOf = (e: Encoded) => {
    const m = new Map<string, Int32Array>();
    for (const [k, t] of e.lists) {
      const [, layer, p0, rows, kk] = /^(\d+)@(\d+)\+(\d+)\/(\d+)$/.exec(k) as RegExpExecArray;
      for (let r = 0; r < Number(rows); r++) m.set(`${layer}:${Number(p0) + r}`, t.subarray(r * Number(kk), (r + 1) * Number(kk)));
    }
    return m;
  };
  const a = rowsOf(ref);
  const b = rowsOf(got);
  assert.ok(a.size > 0, `${label}: no top-k lists observed`);
  assert.equal(b.size, a.size, `${label}: rows with top-k lists`);
  for (const [k, t] of a) sameBits(t, b.get(k) ?? new Int32Array(0), `${label}: top-k of ${k}`);
}

function tokens(seed: number, count: number, vocab: number): number[] {
  const rng = new SeededRandom(seed);
  return Array.from({ length: count }, () => Math.floor(rng.nextUniform() * vocab));
}

test('tiny-a: the graph encoder gives the layered path’s bits whatever the chunking, odd lengths and chunks that complete no group included', async () => {
  const ckpt = await loadCheckpoint(tinyDir);
  try {
    const golden = openSafetensors(join(tinyDir, 'golden.safetensors'));
    const prompt = Array.from(golden.readTensorI32('prompt_ids'));
    golden.close();
    const V = ckpt.config.vocabSize;
    for (const ids of [prompt, tokens(31, 249, V), tokens(32, 5, V)]) {
      for (const chunk of [256, 64, 13, 1]) {
        const ref = await encode(ckpt, 'layers', chunk, [ids], 128);
        const got = await encode(ckpt, { topk: true }, chunk, [ids], 128);
        assertSame(ref, got, `${ids.length} tokens, chunks of ${chunk}`);
      }
    }
  } finally {
    ckpt.close();
  }
});

test('tiny-a: an encoder continuation (the stored prefix replayed) gives the layered path’s bits', async () => {
  const ckpt = await loadCheckpoint(tinyDir);
  try {
    const V = ckpt.config.vocabSize;
    const parts = [tokens(41, 120, V), tokens(42, 90, V)];
    for (const replay of [16, 128]) {
      const ref = await encode(ckpt, 'layers', 32, parts, replay);
      const got = await encode(ckpt, { topk: true }, 32, parts, replay);
      assertSame(ref, got, `continuation, replay ${replay}`);
    }
  } finally {
    ckpt.close();
  }
});

test('the served model’s 20-layer encoder: the graph gives the layered path’s bits on 1,536 tokens in chunks of 512 (one run each)', async () => {
  const ckpt = await loadCheckpoint(servedDir);
  try {
    const ids = tokens(51, 1536, ckpt.config.vocabSize);
    const ref = await encode(ckpt, 'layers', 512, [ids], 128);
    const before = graphIoBytes();
    const got = await encode(ckpt, { topk: true }, 512, [ids], 128);
    const after = graphIoBytes();
    assertSame(ref, got, 'served model');
    assert.equal(after.runs - before.runs, 3, 'graph runs: one per chunk');
  } finally {
    ckpt.close();
  }
});

test('encoder option: an unknown value is a config error; the graph needs an encoder–decoder split', async () => {
  const ckpt = await loadCheckpoint(tinyDir);
  try {
    const weights = { get: (n: string) => ckpt.tensor(n).data };
    await assert.rejects(
      Csa2Model.create(ckpt.config, ckpt.plan, weights, { encoder: 'fused' as unknown as 'graph' }),
      (e: unknown) => e instanceof Csa2Error && e.code === 'config-invalid' && /encoder/.test(e.message),
    );
    const noSplit = { ...ckpt.plan, decoderStart: null };
    await assert.rejects(
      Csa2Model.create(ckpt.config, noSplit, weights, { encoder: 'graph' }),
      (e: unknown) => e instanceof Csa2Error && e.code === 'unsupported-feature' && /encoder–decoder split/.test(e.message),
    );
  } finally {
    ckpt.close();
  }
});
