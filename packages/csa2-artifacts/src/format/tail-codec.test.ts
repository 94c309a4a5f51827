/**
 * @module format/tail-codec.test
 * format/tail-codec: round trip, and a named refusal (ArtifactCorruptError with the offset) for every
 * count, layer, position, open group and pick a damaged or foreign object could get wrong.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ArtifactCorruptError } from '../errors.js';
import { decodeTail, encodeTail, tailChecksumValid, tailKey, type StoredTail, type TailShape } from './tail-codec.js';
import { createHash } from 'node:crypto';

const P = 37;
const R = 16;
const WINDOW = 8;
const HD = 4;
const SHAPE: TailShape = {
  modelId: 'model-a',
  layoutId: '0123456789abcdef',
  tokenCount: P,
  replayTokens: R,
  window: WINDOW,
  headDim: HD,
  hcMult: 2,
  dim: 3,
  numLayers: 6,
  ratios: new Map([
    [0, 1],
    [1, 2],
    [3, 4],
  ]),
};
const CAND = { sourceRatio: 4, blockSize: 2 };

function ring(): Int32Array {
  // slot s holds the position of [P - window, P) with p % window = s
  const pos = new Int32Array(WINDOW);
  for (let p = P - WINDOW; p < P; p++) pos[p % WINDOW] = p;
  return pos;
}
const seq = (n: number, k: number) => Float32Array.from({ length: n }, (_, i) => ((i * 0.37 + k) % 3) - 1.5);

function tail(): StoredTail {
  const rows = 4;
  const start = P - rows;
  const kk = 2;
  const kb = 2;
  const topk = new Int32Array(rows * kk);
  const candidates = new Int32Array(rows * kb);
  for (let r = 0; r < rows; r++) {
    const visible = Math.floor((start + r + 1) / 4);
    topk.set([visible - 1, -1], r * kk);
    candidates.set([Math.ceil(visible / 2) - 1, 0], r * kb);
  }
  return {
    modelId: 'model-a',
    layoutId: '0123456789abcdef',
    tokenCount: P,
    replayTokens: R,
    window: WINDOW,
    headDim: HD,
    hcMult: 2,
    dim: 3,
    indexKSlot: 3,
    windows: [0, 1, 2].map((layer) => ({ layer, positions: ring(), rows: seq(WINDOW * HD, layer) })),
    pending: [
      { layer: 1, ratio: 2, group: 18, count: 1, kv: seq(2 * HD, 5), score: seq(2 * HD, 6) },
      { layer: 3, ratio: 4, group: 9, count: 1, kv: seq(4 * HD, 7), score: seq(4 * HD, 8) },
    ],
    streamStart: P - R,
    streamRows: R,
    X: seq(R * 2 * 3, 9),
    pre: seq(R * 2, 10),
    sources: { start, rows, kk, kb, topk, candidates },
  };
}

const KEY = 'tenants/acme/chunks/ab/ab';
/** Where the fields after the ids start: magic 8, version 4, 'model-a' 4 + 8, the layout id 4 + 16. */
const H = 44;

/** Refused with ArtifactCorruptError whose message matches `reason`. */
function refused(bytes: Uint8Array, reason: RegExp, shape: TailShape = SHAPE): void {
  assert.throws(
    () => decodeTail(KEY, bytes, shape, CAND),
    (e: unknown) => e instanceof ArtifactCorruptError && e.key === KEY && reason.test(e.message),
    reason.source,
  );
}

/** The encoding with the u32/i32 at byte `offset` set to `v`. */
function patched(offset: number, v: number): Uint8Array {
  const b = encodeTail(tail());
  new DataView(b.buffer).setInt32(offset, v, true);
  return b;
}

test('encode → decode round trip (every array bit for bit), at an unaligned offset too', () => {
  const t = tail();
  const bytes = encodeTail(t);
  assert.deepEqual(decodeTail(KEY, bytes, SHAPE, CAND), t);
  const shifted = new Uint8Array(bytes.length + 1);
  shifted.set(bytes, 1);
  assert.deepEqual(decodeTail(KEY, shifted.subarray(1), SHAPE, CAND), t);
  assert.match(tailKey(bytes), /^[0-9a-f]{64}$/);
  assert.equal(tailChecksumValid(patched(H + 28, 0)), false, 'a changed field fails the checksum');
  const bare: StoredTail = { ...t, sources: null, indexKSlot: null, pending: [] };
  assert.deepEqual(decodeTail(KEY, encodeTail(bare), SHAPE, CAND), bare);
  // arrays of bfloat16 values (the bf16 numerics' stream and windows) take half the bytes, losslessly
  const bf = (a: Float32Array) => a.map((v) => new Float32Array(new Uint32Array([new Uint32Array(Float32Array.of(v).buffer)[0]! & 0xffff0000]).buffer)[0]!);
  const halved: StoredTail = { ...t, X: bf(t.X), windows: t.windows.map((w) => ({ ...w, rows: bf(w.rows) })) };
  const halvedBytes = encodeTail(halved);
  assert.deepEqual(decodeTail(KEY, halvedBytes, SHAPE, CAND), halved);
  assert.equal(bytes.length - halvedBytes.length, 2 * (t.X.length + 3 * WINDOW * HD));
  const oddBf: StoredTail = { ...halved, pre: bf(t.pre.subarray(0, 2 * R - 1)) };
  assert.throws(() => encodeTail(oddBf), /stream pre has 31 values, 32 expected/, 'an array of the wrong length is refused where padding could hide it');
});

test('the trailing checksum is the key; a flipped byte anywhere fails it', () => {
  const bytes = encodeTail(tail());
  assert.equal(
    tailKey(bytes),
    createHash('sha256')
      .update(bytes.subarray(0, bytes.length - 32))
      .digest('hex'),
  );
  assert.ok(tailChecksumValid(bytes));
  for (const at of [0, 9, H + 40, bytes.length - 40, bytes.length - 1]) {
    const b = Uint8Array.from(bytes);
    b[at] = (b[at] as number) ^ 1;
    assert.equal(tailChecksumValid(b), false, `byte ${at}`);
  }
  assert.equal(tailChecksumValid(new Uint8Array(5)), false);
});

test('a tail for another document, replay or model shape is refused, naming the field', () => {
  refused(encodeTail(tail()), /modelId is "model-a", expected "model-b"/, { ...SHAPE, modelId: 'model-b' });
  refused(encodeTail(tail()), /layoutId is "0123456789abcdef", expected "fedcba9876543210"/, { ...SHAPE, layoutId: 'fedcba9876543210' });
  refused(encodeTail(tail()), /tokenCount is 37, expected 38/, { ...SHAPE, tokenCount: 38 });
  refused(encodeTail(tail()), /replayTokens is 16, expected 32/, { ...SHAPE, replayTokens: 32 });
  refused(encodeTail(tail()), /window is 8, expected 16/, { ...SHAPE, window: 16 });
  refused(encodeTail(tail()), /headDim/, { ...SHAPE, headDim: 8 });
  refused(encodeTail(tail()), /hcMult/, { ...SHAPE, hcMult: 4 });
  refused(encodeTail(tail()), /dim is 3, expected 5/, { ...SHAPE, dim: 5 });
  refused(encodeTail(tail()), /open group 0: layer 1 with ratio 2 is not a KV source/, {
    ...SHAPE,
    ratios: new Map([
      [0, 1],
      [3, 4],
    ]),
  });
  assert.throws(() => decodeTail(KEY, encodeTail(tail()), SHAPE, null), /no candidate source/);
});

test('damaged bytes are refused with what is wrong', () => {
  const good = encodeTail(tail());
  refused(good.subarray(0, good.length - 3), /runs into the checksum/);
  refused(good.subarray(0, 60), /ends after 60 bytes/);
  // 4 bytes more before the checksum (a re-signed body): the body no longer ends where the checksum starts
  const body = good.subarray(0, good.length - 32);
  const longer = Uint8Array.from([...body, 0, 0, 0, 0]);
  refused(Uint8Array.from([...longer, ...createHash('sha256').update(longer).digest()]), /4 bytes after the end/);
  const magic = Uint8Array.from(good);
  magic[0] = 0x41;
  refused(magic, /bad magic/);
  refused(patched(8, 2), /format version 2/);
  refused(patched(H + 24, 2), /index-K slot 2 is not a KV-source layer/);
  refused(patched(H + 28, 7), /7 windows for 6 layers/);
  refused(patched(H + 32, 9), /window 0: layer 9/);
  refused(patched(H + 32 + 4 + 4 * WINDOW + 4 + 4 * WINDOW * HD, 0), /layer 0 is out of range or repeated/);
  refused(patched(H + 36 + 4 * WINDOW, 2), /float array tag 2/);
  // slot 0 holding a position of another slot, or one past the document's end
  refused(patched(H + 36, P - 3), /slot 0 holds position 34/);
  refused(patched(H + 36, P + WINDOW - (P % WINDOW)), /slot 0 holds position/);
  const nan = encodeTail(tail());
  new DataView(nan.buffer).setFloat32(H + 36 + 4 * WINDOW + 4, Number.NaN, true);
  refused(nan, /not finite/);
});

test('open groups, the stream and the picks must be where the document leaves them', () => {
  const t = tail();
  const withPending = (p: StoredTail['pending']) => encodeTail({ ...t, pending: p });
  const p0 = t.pending[0] as StoredTail['pending'][number];
  refused(withPending([{ ...p0, group: 17 }]), /group 17 with 1 rows; the document's 37 tokens leave 1 rows of group 18/);
  refused(withPending([{ ...p0, count: 0 }]), /group 18 with 0 rows/);
  refused(encodeTail({ ...t, streamStart: P - R - 1 }), /stream start is 20, expected 21/);
  const s = t.sources as NonNullable<StoredTail['sources']>;
  refused(encodeTail({ ...t, sources: { ...s, start: 10 } }), /picks of rows \[10, 14\) are not document rows of the tail/);
  const badPick = s.topk.slice();
  badPick[0] = 100;
  refused(encodeTail({ ...t, sources: { ...s, topk: badPick } }), /row 33: pick 100 outside its 8 visible entries/);
  const badBlock = s.candidates.slice();
  badBlock[1] = 4;
  refused(encodeTail({ ...t, sources: { ...s, candidates: badBlock } }), /row 33: candidate block 4 outside its 4 blocks/);
});
