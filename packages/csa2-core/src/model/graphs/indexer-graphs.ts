/**
 * @module model/graphs/indexer-graphs
 * The indexer's scoring and top-k (csa2 §3.2–3.3). Scores I[t,j] = Σ_h w[t,h]·relu(q[t,h]·K[j]) with
 * the reference's bf16 einsum (bf16 products, bf16 head sum), over packed index keys unpacked in the
 * graph. Two builds:
 *
 *   scan (INDEXER_SCAN): every visible entry j < clen[t] (index sources up to the candidate source;
 *        later ones too, masked to their candidate pool by `cand_in`, when the pool scan is off);
 *        top-kk with ties to the lower position, sorted ascending, unreachable picks → -1. The
 *        candidate source also publishes level one of the hierarchical indexer: its kept candidate
 *        blocks per row (`cand`).
 *   pool (INDEXER_POOL): only the keys of the rows' candidate pool, gathered by the caller
 *        (model/indexer/indexer), with a per-row mask of what each row may pick; returns the ranked picks,
 *        which the caller maps back to positions. The per-entry scores are the scan's, bit for bit.
 */
import { GraphBuilder } from '../../onnx/graph-builder.js';
import type { LayerPlanEntry } from '../../config/layer-plan.js';
import { GraphOps } from './graph-ops.js';
import type { GraphContext } from './context.js';
import { unpackIndexK } from './packed-ops.js';

/**
 * The rest of the reference's bf16 einsum after the per-head products: Σ_h bf(relu(q_h·k) · w_h), bf16
 * products and a bf16 head sum. perHead [..., hI, N] (bf16 values), iw [..., hI] → scores [..., N].
 */
export function headSummedScores(o: GraphOps, perHead: string, iw: string): string {
  const g = o.g;
  const weighted = o.bf(g.mul(g.relu(perHead), g.unsqueeze(iw, [-1])));
  return o.bf(g.reduceSum(weighted, [-2], false));
}

/** Scores [S, N] of iq [S,hI,dI], iw [S,hI] against index keys K [N, dI] (bf16 einsum as the reference). */
function indexScores(g: GraphBuilder, o: GraphOps, ctx: GraphContext, K: string): { iq: string; iw: string; scores: string } {
  const { indexNumHeads: hI, indexHeadDim: dI } = ctx.config;
  const iq = g.input('iq', 'float32', ['S', hI, dI]);
  const iw = g.input('iw', 'float32', ['S', hI]);
  const perHead = o.matmulBf(iq, g.transpose(K, [1, 0])); // [S, hI, N]
  return { iq, iw, scores: headSummedScores(o, perHead, iw) }; // [S, N]
}

/**
 * A scan over G spans at once, each with its own keys (no key is scored against another span's rows):
 * K [G, N, r] packed index keys (unpacked here), those of span g at coordinates [kbase[g], kbase[g] + N);
 * row r of span g may pick the coordinates in [lo, hi) (its own visible keys; padding rows and keys are
 * masked out). Returns each row's best k = min(kk, N) (topv scores, topi coordinates; by score, ties to
 * the lower coordinate) and, at the candidate source, its best min(topBlocks, blocks) candidate blocks
 * (blockv block maxima, the block `pin` — its newest visible one — pinned at +inf; blocki block
 * coordinates). model/indexer/indexer-scan merges key chunks and splits groups. kbase is a multiple of the
 * candidate block size.
 */
export function buildIndexerScanGraph(ctx: GraphContext, e: LayerPlanEntry): Uint8Array {
  const c = ctx.config;
  const g = new GraphBuilder(`indexer_${e.layer}`);
  const o = new GraphOps(g, ctx.mode, ctx.bf16Gemm === true);
  const { indexNumHeads: hI, indexHeadDim: dI } = c;
  const packed = g.input('K', 'uint8', ['G', 'N', dI / 2 + dI / 32]);
  const iq = g.input('iq', 'float32', ['G', 'S', hI, dI]);
  const iw = g.input('iw', 'float32', ['G', 'S', hI]);
  const kbase = g.input('kbase', 'int64', ['G', 1, 1]);
  const lo = g.input('lo', 'int64', ['G', 'S', 1]);
  const hi = g.input('hi', 'int64', ['G', 'S', 1]);
  const kk = g.input('kk', 'int32', [1]);

  const dims = g.op('Shape', [packed]);
  const nLen = g.gather(dims, g.const('int64', [1], []));
  const K = unpackIndexK(g, g.reshape(packed, [-1, dI / 2 + dI / 32]), dI); // [G·N, dI]
  const Kg = g.op('Reshape', [K, g.concat([g.slice(dims, [0], [0], [2]), g.const('int64', [dI])], 0)]); // [G, N, dI]
  const perHead = o.matmulBf(iq, g.unsqueeze(g.transpose(Kg, [0, 2, 1]), [1])); // [G, S, hI, N]
  let scores = headSummedScores(o, perHead, iw); // [G, S, N]
  const coords = g.add(g.op('Range', [g.const('int64', [0], []), nLen, g.const('int64', [1], [])]), kbase); // [G, 1, N]
  const negInf = g.scalar(-Infinity);
  scores = g.where(g.op('And', [g.greaterOrEqual(coords, lo), g.less(coords, hi)]), scores, negInf);
  if (e.usesCandidates) {
    // the official code's way: score every entry, then keep the candidate pool's (cand_in, from model/indexer/indexer)
    scores = g.where(g.input('cand_in', 'bool', ['G', 'S', 'N']), scores, negInf);
  }
  if (e.isCandidateSource) {
    const [bv, bi] = candidateBlocks(g, scores, g.input('pin', 'int64', ['G', 'S', 1]), nLen, kbase, c.candidateTopKBlocks, c.candidateBlockSize);
    g.output(bv, 'blockv', 'float32', ['G', 'S', 'kb']);
    g.output(bi, 'blocki', 'int32', ['G', 'S', 'kb']);
  }
  const kEff = g.min(g.cast(kk, 'int64'), g.unsqueeze(nLen, [0]));
  const [values, picked] = g.node('TopK', [scores, kEff], { axis: -1, largest: 1, sorted: 1 }, 2) as [string, string];
  g.output(values, 'topv', 'float32', ['G', 'S', 'k']);
  g.output(g.cast(g.add(picked, kbase), 'int32'), 'topi', 'int32', ['G', 'S', 'k']);
  return g.toBytes();
}

/**
 * Level one of the hierarchical indexer (csa2 §3.3): per query row, the block max of the masked scores
 * over aligned blocks, the row's pinned block (its newest visible one) at +inf, the best
 * min(topBlocks, blocks) by value (ties → lower block). scores [G, S, N] → values, block coordinates.
 */
function candidateBlocks(g: GraphBuilder, scores: string, pin: string, nLen: string, kbase: string, topBlocks: number, blockSize: number): [string, string] {
  const bs = g.const('int64', [blockSize], []);
  const pad = g.op('Mod', [g.sub(bs, g.op('Mod', [nLen, bs])), bs]);
  const pads = g.concat([g.const('int64', [0, 0, 0, 0, 0]), g.unsqueeze(pad, [0])], 0);
  const padded = g.op('Pad', [scores, pads, g.scalar(-Infinity)], { mode: 'constant' });
  const blockMax = g.reduceMax(g.reshape(padded, [0, 0, -1, blockSize]), [-1], false); // [G, S, nb]
  const nb = g.gather(g.op('Shape', [blockMax]), g.const('int64', [2], []));
  const firstBlock = g.div(kbase, bs); // [G, 1, 1]; kbase is a multiple of the block size
  const blockIds = g.add(g.op('Range', [g.const('int64', [0], []), nb, g.const('int64', [1], [])]), firstBlock); // [G, 1, nb]
  const pinned = g.where(g.equal(blockIds, pin), g.scalar(Infinity), blockMax);
  const k = g.min(g.const('int64', [topBlocks], []), nb);
  const [vals, idx] = g.node('TopK', [pinned, g.unsqueeze(k, [0])], { axis: -1, largest: 1, sorted: 1 }, 2) as [string, string];
  return [vals, g.cast(g.add(idx, firstBlock), 'int32')];
}

export function buildIndexerPoolGraph(ctx: GraphContext, e: LayerPlanEntry): Uint8Array {
  const dI = ctx.config.indexHeadDim;
  const g = new GraphBuilder(`indexer_pool_${e.layer}`);
  const o = new GraphOps(g, ctx.mode, ctx.bf16Gemm === true);
  const K = g.input('K', 'uint8', ['U', dI / 2 + dI / 32]);
  const { scores } = indexScores(g, o, ctx, unpackIndexK(g, K, dI));
  const allow = g.input('allow', 'bool', ['S', 'U']);
  const kk = g.input('kk', 'int32', [1]);
  const masked = g.where(allow, scores, g.scalar(-Infinity));
  const uLen = g.gather(g.op('Shape', [K]), g.const('int64', [0], []));
  const kEff = g.min(g.cast(kk, 'int64'), g.unsqueeze(uLen, [0]));
  const [vals, picked] = g.node('TopK', [masked, kEff], { axis: -1, largest: 1, sorted: 1 }, 2) as [string, string];
  g.output(g.cast(picked, 'int32'), 'pick', 'int32', ['S', 'k']);
  g.output(g.greater(vals, g.scalar(-Infinity)), 'finite', 'bool', ['S', 'k']);
  return g.toBytes();
}

/**
 * The index scores as the default scan and pool compute them (model/indexer/indexer-scores): the keys come
 * unpacked (the exact fake-quantized values, as unpackIndexK gives them) and one Gemm takes every
 * row's heads at once, p = q · kᵀ [rows·hI, N] — per element the same product as the scan's batched
 * MatMul over [S, hI, dI] (the same kernel and order for M ≥ 2; the caller pads M = 1 and N = 1). With
 * `headSum`, the rest of the bf16 einsum follows here too (relu, head weights, the head sum) →
 * scores [rows, N]; without it TypeScript does that part.
 */
export function buildIndexScoresGraph(ctx: GraphContext, headSum: boolean): Uint8Array {
  const { indexNumHeads: hI, indexHeadDim: dI } = ctx.config;
  const g = new GraphBuilder('index_scores');
  const o = new GraphOps(g, ctx.mode, ctx.bf16Gemm === true);
  const q = g.input('q', 'float32', ['M', dI]);
  const k = g.input('k', 'float32', ['N', dI]);
  const p = g.op('Gemm', [q, k], { transB: 1 }); // [M, N]
  if (!headSum) {
    g.output(p, 'p', 'float32', ['M', 'N']);
    return g.toBytes();
  }
  const iw = g.input('iw', 'float32', ['S', hI]);
  const nLen = g.slice(g.op('Shape', [k]), [0], [0], [1]);
  const perHead = o.bf(g.op('Reshape', [p, g.concat([g.const('int64', [-1, hI]), nLen], 0)])); // [S, hI, N]
  g.output(headSummedScores(o, perHead, iw), 'scores', 'float32', ['S', 'N']);
  return g.toBytes();
}
