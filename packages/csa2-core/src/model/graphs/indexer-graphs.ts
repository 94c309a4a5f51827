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
 *        (model/indexer), with a per-row mask of what each row may pick; returns the ranked picks,
 *        which the caller maps back to positions. The per-entry scores are the scan's, bit for bit.
 */
import { GraphBuilder } from '../../onnx/graph-builder.js';
import type { LayerPlanEntry } from '../../config/layer-plan.js';
import { GraphOps } from '../graph-ops.js';
import type { GraphContext } from './context.js';
import { unpackIndexK } from './packed-ops.js';

/** Scores [S, N] of iq [S,hI,dI], iw [S,hI] against index keys K [N, dI] (bf16 einsum as the reference). */
function indexScores(g: GraphBuilder, o: GraphOps, ctx: GraphContext, K: string): { iq: string; iw: string; scores: string } {
  const { indexNumHeads: hI, indexHeadDim: dI } = ctx.config;
  const iq = g.input('iq', 'float32', ['S', hI, dI]);
  const iw = g.input('iw', 'float32', ['S', hI]);
  const perHead = o.bf(g.matmul(iq, g.transpose(K, [1, 0]))); // [S, hI, N]
  const weighted = o.bf(g.mul(g.relu(perHead), g.unsqueeze(iw, [-1])));
  return { iq, iw, scores: o.bf(g.reduceSum(weighted, [1], false)) }; // [S, N]
}

/**
 * The scan of one chunk of index keys, K [N, dI] (unpacked by `unpack_index_k`) holding the entries
 * [base, base + N): scores, causal visibility (absolute position < clen), and the chunk's own ranking,
 * which model/indexer merges across chunks: the top min(kk, N) entries (topv scores, topi positions;
 * by score, ties to the lower position) and, at the candidate source, the top min(topBlocks, blocks)
 * candidate blocks (blockv block maxima, the block of the newest visible position pinned at +inf;
 * blocki absolute block ids). `base` is a multiple of the candidate block size.
 */
export function buildIndexerScanGraph(ctx: GraphContext, e: LayerPlanEntry): Uint8Array {
  const c = ctx.config;
  const g = new GraphBuilder(`indexer_${e.layer}`);
  const o = new GraphOps(g, ctx.mode);
  const K = g.input('K', 'float32', ['N', c.indexHeadDim]);
  let { scores } = indexScores(g, o, ctx, K);
  const base = g.input('base', 'int64', [1]);
  const clen = g.input('clen', 'int32', ['S', 1]);
  const kk = g.input('kk', 'int32', [1]);

  const nLen = g.gather(g.op('Shape', [K]), g.const('int64', [0], []));
  const positions = g.add(g.op('Range', [g.const('int64', [0], []), nLen, g.const('int64', [1], [])]), base); // [N] absolute
  const clen64 = g.cast(clen, 'int64');
  const negInf = g.scalar(-Infinity);
  scores = g.where(g.less(positions, clen64), scores, negInf);
  if (e.usesCandidates) {
    // the official code's way: score every entry, then keep the candidate pool's (cand_in, from model/indexer)
    scores = g.where(g.input('cand_in', 'bool', ['S', 'N']), scores, negInf);
  }
  if (e.isCandidateSource) {
    const [bv, bi] = candidateBlocks(g, scores, clen, nLen, base, c.candidateTopKBlocks, c.candidateBlockSize);
    g.output(bv, 'blockv', 'float32', ['S', 'kb']);
    g.output(bi, 'blocki', 'int32', ['S', 'kb']);
  }
  const kEff = g.min(g.cast(kk, 'int64'), g.unsqueeze(nLen, [0]));
  const [values, picked] = g.node('TopK', [scores, kEff], { axis: -1, largest: 1, sorted: 1 }, 2) as [string, string];
  g.output(values, 'topv', 'float32', ['S', 'k']);
  g.output(g.cast(g.add(picked, base), 'int32'), 'topi', 'int32', ['S', 'k']);
  return g.toBytes();
}

/**
 * Level one of the hierarchical indexer (csa2 §3.3) over one chunk: per query row, the block max of the
 * causally masked scores over aligned blocks, the block of the newest visible position pinned at +inf,
 * the chunk's top min(topBlocks, blocks) by value (ties → lower block). → values, absolute block ids.
 */
function candidateBlocks(g: GraphBuilder, scores: string, clen: string, nLen: string, base: string, topBlocks: number, blockSize: number): [string, string] {
  const bs = g.const('int64', [blockSize], []);
  const pad = g.op('Mod', [g.sub(bs, g.op('Mod', [nLen, bs])), bs]);
  const pads = g.concat([g.const('int64', [0, 0, 0]), g.unsqueeze(pad, [0])], 0);
  const padded = g.op('Pad', [scores, pads, g.scalar(-Infinity)], { mode: 'constant' });
  const blockMax = g.reduceMax(g.reshape(padded, [0, -1, blockSize]), [-1], false); // [S, nb]
  const nb = g.gather(g.op('Shape', [blockMax]), g.const('int64', [1], []));
  const firstBlock = g.div(base, g.unsqueeze(bs, [0])); // base is a multiple of the block size
  const blockIds = g.add(g.op('Range', [g.const('int64', [0], []), nb, g.const('int64', [1], [])]), firstBlock); // absolute
  // python floor division: (clen - 1) // bs, which is -1 (no block) when clen == 0
  const last = g.cast(g.floor(g.div(g.sub(g.cast(clen, 'float32'), g.scalar(1)), g.scalar(blockSize))), 'int64');
  const pinned = g.where(g.equal(blockIds, last), g.scalar(Infinity), blockMax);
  const k = g.min(g.const('int64', [topBlocks], []), nb);
  const [vals, idx] = g.node('TopK', [pinned, g.unsqueeze(k, [0])], { axis: -1, largest: 1, sorted: 1 }, 2) as [string, string];
  return [vals, g.cast(g.add(idx, firstBlock), 'int32')];
}

/** unpack_index_k: packed index-K rows [N, r] → their values [N, dI], bit for bit. */
export function buildUnpackIndexKGraph(ctx: GraphContext): Uint8Array {
  const dI = ctx.config.indexHeadDim;
  const g = new GraphBuilder('unpack_index_k');
  const packed = g.input('packed', 'uint8', ['N', dI / 2 + dI / 32]);
  g.output(unpackIndexK(g, packed, dI), 'K', 'float32', ['N', dI]);
  return g.toBytes();
}

export function buildIndexerPoolGraph(ctx: GraphContext, e: LayerPlanEntry): Uint8Array {
  const dI = ctx.config.indexHeadDim;
  const g = new GraphBuilder(`indexer_pool_${e.layer}`);
  const o = new GraphOps(g, ctx.mode);
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
