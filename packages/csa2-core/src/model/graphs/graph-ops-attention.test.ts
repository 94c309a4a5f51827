/**
 * Unit tests of GraphOps.sparseAttention (csa2 §2.5: one softmax over the indexed keys with the sink
 * in the denominator, V = K, computed as the kernel does: an online softmax over blocks of 64 columns,
 * running max floored at -1e30, probabilities rounded to bf16 before the PV product in bf16 mode)
 * against sparseAttention64 / sparseAttentionProbs64.
 *
 * Error bound, per query row, head h and channel c, with P = sparseAttentionProbs64 (the exact
 * softmax weights, sink included) and A_c = Σ_j P_j·|K_jc| (so |o_c| ≤ A_c):
 *   logits: s_j = fp32(fp32(q·K_j)·fp32(scale)), |δs| ≤ γ_(D+2)·L with L = scale·max_j Σ_i|q_i·K_ji|;
 *   each exp(s_j - runMax) and each block rescale exp(prevMax - runMax): relative
 *     ρ1 = 2·δs + 2u·L (the subtraction) + 4u (exp), at most nb factors per term: ρ = nb·ρ1;
 *   the sums (64-term block sums and PV products, nb block merges, the sink term, one divide):
 *     γ_(64 + 2nb + 4);
 *   fp32:  |o - exact| ≤ (2ρ + γ_(64+2nb+4))·A_c + 2^-126 (results below the fp32 normal range,
 *          e.g. a sink 100+ above every logit, where exp(sink - max) overflows and o is exactly 0);
 *   bf16:  rounding each probability to bf16 (relative 2^-8) before PV moves the numerator by at most
 *          2^-8·A_c (not 2^-8·|o_c|: the terms can cancel), then the output is rounded once to bf16:
 *          the output must be one bf16 rounding of a value within (fp32 bound + 2^-8·A_c) of exact.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ATTENTION_BLOCK } from './graph-ops.js';
import { f32, i32, type HostTensor } from '../../runtime/ort-session.js';
import { SeededRandom } from '../../weights/init-model.js';
import { sparseAttention64, sparseAttentionProbs64 } from '../../testing/reference64.js';
import { U32, bf16Mismatches, boundMismatches, describe, normalF32, openEmitterGraph, outF32 } from '../../testing/graph-harness.js';
import type { GraphSession } from '../../runtime/ort-session.js';
import type { NumericsMode } from './graph-ops.js';

const MODES: readonly NumericsMode[] = ['bf16', 'fp32'];
const gamma = (k: number): number => (k * U32) / (1 - k * U32);

interface Case {
  readonly q: Float32Array; // [rows, H, D]
  readonly table: Float32Array; // [R, D] key rows
  readonly idx: Int32Array; // [rows, C], -1 = no key
  readonly sink: Float32Array; // [H]
}

/** The attention graph's feeds: the key table and the index list as they are (the op gathers per block). */
function feedsOf(k: Case, H: number, D: number, C: number): Record<string, HostTensor> {
  const rows = k.idx.length / C;
  return { q: f32(k.q, [rows, H, D]), kv: f32(k.table, [k.table.length / D, D]), idx: i32(k.idx, [rows, C]), sink: f32(k.sink, [H]) };
}

function openAttention(mode: NumericsMode, feeds: Record<string, HostTensor>, rows: number, H: number, D: number, C: number): Promise<GraphSession> {
  return openEmitterGraph(`sparse_attention_${mode}_${C}`, mode, feeds, (c) => {
    const { q, kv, idx, sink } = c.inputs as Record<string, string>;
    c.output('o', c.ops.sparseAttention(q!, kv!, idx!, sink!, D ** -0.5, C), [rows, H, D]);
  });
}

/** Exact outputs [rows, H, D] and the per-element bounds of the module comment. */
function expectAttention(k: Case, H: number, D: number, C: number, mode: NumericsMode) {
  const rows = k.idx.length / C;
  const scale = D ** -0.5;
  const nb = C / ATTENTION_BLOCK;
  const exact = new Float64Array(rows * H * D);
  const bound = new Float64Array(rows * H * D);
  for (let r = 0; r < rows; r++) {
    const q = k.q.subarray(r * H * D, (r + 1) * H * D);
    const idx = k.idx.subarray(r * C, (r + 1) * C);
    exact.set(sparseAttention64(q, k.table, idx, k.sink, scale), r * H * D);
    const P = sparseAttentionProbs64(q, k.table, idx, k.sink, scale);
    for (let h = 0; h < H; h++) {
      let L = 0;
      for (const j of idx) {
        if (j < 0) continue;
        let s = 0;
        for (let i = 0; i < D; i++) s += Math.abs(q[h * D + i]! * k.table[j * D + i]!);
        L = Math.max(L, s * scale);
      }
      const ds = gamma(D + 2) * L;
      const rho = nb * (2 * ds + 2 * U32 * L + 4 * U32);
      const relative = 2 * rho + gamma(ATTENTION_BLOCK + 2 * nb + 4) + (mode === 'bf16' ? 2 ** -8 : 0);
      for (let c = 0; c < D; c++) {
        let A = 0;
        for (let col = 0; col < C; col++) if (idx[col]! >= 0) A += P[h * C + col]! * Math.abs(k.table[idx[col]! * D + c]!);
        bound[(r * H + h) * D + c] = relative * A + 2 ** -126;
      }
    }
  }
  return { exact, bound };
}

function check(mode: NumericsMode, o: Float32Array, want: { exact: Float64Array; bound: Float64Array }, label: string): void {
  const slack = (i: number) => want.bound[i]!;
  const bad = mode === 'bf16' ? bf16Mismatches(o, want.exact, slack) : boundMismatches(o, want.exact, slack);
  assert.deepEqual(bad, [], describe(`${label} (${mode})`, bad));
}

const H = 2;
const D = 32;
const R = 160;

/** Four query rows over 3 blocks (C = 192): all valid with duplicates; -1 padding incl. a fully masked
 *  first block; a fully masked row; a dominant key placed in the last block (the running max jumps). */
function mixedCase(rng: SeededRandom, C: number): Case {
  const rows = 4;
  const q = normalF32(rng, rows * H * D, 1.5);
  const table = normalF32(rng, R * D);
  const idx = new Int32Array(rows * C);
  for (let c = 0; c < C; c++) {
    idx[c] = Math.floor(rng.nextUniform() * 24); // row 0: only 24 distinct keys among C columns: many duplicates
    idx[C + c] = c < ATTENTION_BLOCK || c % 3 === 0 || c >= C - 20 ? -1 : Math.floor(rng.nextUniform() * R);
    idx[2 * C + c] = -1;
    idx[3 * C + c] = Math.floor(rng.nextUniform() * (R - 1));
  }
  // a key aligned with row 3's head-0 query, logit ≈ 10, only in the last block
  const q3 = q.subarray(3 * H * D, 3 * H * D + D);
  const norm = Math.hypot(...q3);
  for (let i = 0; i < D; i++) table[(R - 1) * D + i] = ((q3[i]! / norm) * 10 * Math.sqrt(D)) / norm;
  idx[3 * C + C - 5] = R - 1;
  return { q, table, idx, sink: Float32Array.from([0.3, -0.5]) };
}

test('sparseAttention over 3 blocks: duplicates, -1 padding, a fully masked block and row, a late running max', async () => {
  const rng = new SeededRandom(3001);
  const C = 3 * ATTENTION_BLOCK;
  const k = mixedCase(rng, C);
  const feeds = feedsOf(k, H, D, C);
  const rows = k.idx.length / C;
  for (const mode of MODES) {
    const session = await openAttention(mode, feeds, rows, H, D, C);
    const o = outF32(await session.run(feeds), 'o');
    const want = expectAttention(k, H, D, C, mode);
    check(mode, o, want, 'mixed');
    // the fully masked row gives exactly 0 (running max floored at -1e30, no NaN)
    for (let i = 2 * H * D; i < 3 * H * D; i++) assert.equal(Math.abs(o[i]!), 0, `masked row element ${i}`);

    // the test can fail: forgetting the sink, or treating -1 padding as key row 0, is rejected
    const noSink = expectAttention({ ...k, sink: Float32Array.from([-Infinity, -Infinity]) }, H, D, C, mode);
    assert.ok(boundMismatches(o, noSink.exact, (i) => want.bound[i]! * 2).length > 0, 'sink must count');
    const padAsRow0 = expectAttention({ ...k, idx: Int32Array.from(k.idx, (j, i) => (Math.floor(i / C) === 1 && j < 0 ? 0 : j)) }, H, D, C, mode);
    assert.ok(boundMismatches(o, padAsRow0.exact, (i) => want.bound[i]! * 2).length > 0, '-1 must be masked');

    // same graph, other feeds: a sink that dominates (head 0: 30 above the logits; output ~e^-30·K, relative bound
    // still holds) and one that overflows exp in fp32 (head 1: 150 above; the output is 0, the exact one ~e^-150)
    const sinkCase = { ...k, sink: Float32Array.from([30, 150]) };
    const o2 = outF32(await session.run(feedsOf(sinkCase, H, D, C)), 'o');
    check(mode, o2, expectAttention(sinkCase, H, D, C, mode), 'dominant sink');
    assert.ok(
      o2.some((v) => v !== 0),
      'head 0 output is small but not flushed',
    );

    // logits of several hundred (q × 40): without the running-max subtraction exp would overflow
    const hotCase = { ...k, q: Float32Array.from(k.q, (v) => v * 40) };
    const o3 = outF32(await session.run(feedsOf(hotCase, H, D, C)), 'o');
    check(mode, o3, expectAttention(hotCase, H, D, C, mode), 'large logits');
    assert.ok(o3.every(Number.isFinite));
    await session.dispose();
  }
});

test('sparseAttention with a single block (C = 64) and with two blocks (C = 128)', async () => {
  const rng = new SeededRandom(3002);
  for (const C of [ATTENTION_BLOCK, 2 * ATTENTION_BLOCK]) {
    const k = mixedCase(rng, C);
    const feeds = feedsOf(k, H, D, C);
    for (const mode of MODES) {
      const session = await openAttention(mode, feeds, k.idx.length / C, H, D, C);
      check(mode, outF32(await session.run(feeds), 'o'), expectAttention(k, H, D, C, mode), `C = ${C}`);
      await session.dispose();
    }
  }
});

test('sparseAttention (bf16) rounds each probability to bf16 relative to the running max, as the kernel does', async () => {
  // Two keys, one query (H = 1): K_A = [-fp32(0.8), 0, …], logit 0; K_B = [1, 0, …, t], logit ln 0.8.
  // Channel 0 of the numerator is p_A·(-0.8) + p_B·1, i.e. about 0 unless p_B is rounded.
  const Dk = 32;
  const C = 2 * ATTENTION_BLOCK;
  const scale = Math.fround(Dk ** -0.5);
  const table = new Float32Array(2 * Dk);
  table[0] = -0.8;
  table[Dk] = 1;
  table[2 * Dk - 1] = Math.log(0.8) / scale;
  const q = new Float32Array(Dk);
  q[Dk - 1] = 1;
  const sink = Float32Array.from([-20]);
  const den = 1 + 0.8 + Math.exp(-20);
  const arrange = (first: number, second: number, gap: number) => {
    const idx = new Int32Array(C).fill(-1);
    idx[0] = first;
    idx[gap] = second;
    return { q, table, idx, sink };
  };
  // A then B in the same block: running max 0, p_B = e^(ln 0.8) → bf16(0.8) = 205/256
  // B in block 0, A in block 1: p_B = e^0 = 1 (exact in bf16), later rescaled by e^(ln 0.8) in fp32: no rounding
  const cases = [
    { label: 'A, B in one block', k: arrange(0, 1, 1), bf16: (205 / 256 - Math.fround(0.8)) / den },
    { label: 'B in block 0, A in block 1', k: arrange(1, 0, ATTENTION_BLOCK), bf16: 0 },
  ];
  for (const mode of MODES) {
    for (const { label, k, bf16 } of cases) {
      const feeds = feedsOf(k, 1, Dk, C);
      const session = await openEmitterGraph(`attention_rounding_${mode}`, mode, feeds, (c) => {
        const { q: qq, kv, idx, sink: ss } = c.inputs as Record<string, string>;
        c.output('o', c.ops.sparseAttention(qq!, kv!, idx!, ss!, Dk ** -0.5, C), [1, 1, Dk]);
      });
      const o = outF32(await session.run(feeds), 'o');
      await session.dispose();
      const expected = mode === 'bf16' ? bf16 : 0;
      // 1% of the bf16 effect (the output's own bf16 rounding is ≤ 2^-8 relative); fp32 arithmetic leaves ≤ 1e-6
      assert.ok(Math.abs(o[0]! - expected) <= 0.01 * Math.abs(expected) + 1e-6, `${label} (${mode}): channel 0 = ${o[0]}, expected ${expected}`);
      // and the general bound against the float64 reference holds either way
      check(mode, o, expectAttention(k, 1, Dk, C, mode), label);
    }
  }
});
