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

/** Scores [S, N] of iq [S,hI,dI], iw [S,hI] against packed keys [N, r] (bf16 einsum as the reference). */
function indexScores(g: GraphBuilder, o: GraphOps, ctx: GraphContext, packedK: string): { iq: string; iw: string; scores: string } {
  const { indexNumHeads: hI, indexHeadDim: dI } = ctx.config;
  const iq = g.input('iq', 'float32', ['S', hI, dI]);
  const iw = g.input('iw', 'float32', ['S', hI]);
  const K = unpackIndexK(g, packedK, dI);
  const perHead = o.bf(g.matmul(iq, g.transpose(K, [1, 0]))); // [S, hI, N]
  const weighted = o.bf(g.mul(g.relu(perHead), g.unsqueeze(iw, [-1])));
  return { iq, iw, scores: o.bf(g.reduceSum(weighted, [1], false)) }; // [S, N]
}

export function buildIndexerScanGraph(ctx: GraphContext, e: LayerPlanEntry): Uint8Array {
  const c = ctx.config;
  const g = new GraphBuilder(`indexer_${e.layer}`);
  const o = new GraphOps(g, ctx.mode);
  const dI = c.indexHeadDim;
  const K = g.input('K', 'uint8', ['N', dI / 2 + dI / 32]);
  let { scores } = indexScores(g, o, ctx, K);
  const clen = g.input('clen', 'int32', ['S', 1]);
  const kk = g.input('kk', 'int32', [1]);

  const nLen = g.gather(g.op('Shape', [K]), g.const('int64', [0], []));
  const positions = g.op('Range', [g.const('int64', [0], []), nLen, g.const('int64', [1], [])]); // [N]
  const clen64 = g.cast(clen, 'int64');
  const negInf = g.scalar(-Infinity);
  scores = g.where(g.less(positions, clen64), scores, negInf);
  if (e.usesCandidates) {
    // the official code's way: score every entry, then keep the candidate pool's (cand_in, from model/indexer)
    scores = g.where(g.input('cand_in', 'bool', ['S', 'N']), scores, negInf);
  }
  if (e.isCandidateSource) {
    g.output(candidateBlocks(g, scores, clen, nLen, c.candidateTopKBlocks, c.candidateBlockSize), 'cand', 'int32', ['S', 'kb']);
  }
  // a chunk may end before kk entries exist: pick min(kk, N); the reference's extra picks there are
  // unreachable ones, which sort to the end and become -1, so pad with -1
  const kk64 = g.cast(kk, 'int64');
  const kEff = g.min(kk64, g.unsqueeze(nLen, [0]));
  const [, picked] = g.node('TopK', [scores, kEff], { axis: -1, largest: 1, sorted: 1 }, 2) as [string, string];
  const [ascending] = g.node('TopK', [picked, kEff], { axis: -1, largest: 0, sorted: 1 }, 2) as [string, string];
  const reachable = g.less(ascending, clen64);
  const chosen = g.where(reachable, ascending, g.const('int64', [-1], []));
  const pads = g.concat([g.const('int64', [0, 0, 0]), g.sub(kk64, kEff)], 0);
  const padded = g.op('Pad', [chosen, pads, g.const('int64', [-1], [])], { mode: 'constant' });
  g.output(g.cast(padded, 'int32'), 'topk', 'int32', ['S', 'kk']);
  return g.toBytes();
}

/**
 * Level one of the hierarchical indexer (csa2 §3.3): per query row, the block max of the causally
 * masked scores over aligned blocks, the block of the newest visible position pinned, the top blocks
 * kept (ties → lower block); blocks with no reachable position dropped (-1). → [S, min(topBlocks, nb)].
 */
function candidateBlocks(g: GraphBuilder, scores: string, clen: string, nLen: string, topBlocks: number, blockSize: number): string {
  const bs = g.const('int64', [blockSize], []);
  const pad = g.op('Mod', [g.sub(bs, g.op('Mod', [nLen, bs])), bs]);
  const pads = g.concat([g.const('int64', [0, 0, 0]), g.unsqueeze(pad, [0])], 0);
  const padded = g.op('Pad', [scores, pads, g.scalar(-Infinity)], { mode: 'constant' });
  const blockMax = g.reduceMax(g.reshape(padded, [0, -1, blockSize]), [-1], false); // [S, nb]
  const nb = g.gather(g.op('Shape', [blockMax]), g.const('int64', [1], []));
  const blockIds = g.cast(g.op('Range', [g.const('int64', [0], []), nb, g.const('int64', [1], [])]), 'float32');
  // python floor division: (clen - 1) // bs, which is -1 (no block) when clen == 0
  const last = g.floor(g.div(g.sub(g.cast(clen, 'float32'), g.scalar(1)), g.scalar(blockSize)));
  const pinned = g.where(g.equal(blockIds, last), g.scalar(Infinity), blockMax);
  const k = g.min(g.const('int64', [topBlocks], []), nb);
  const [vals, idx] = g.node('TopK', [pinned, g.unsqueeze(k, [0])], { axis: -1, largest: 1, sorted: 1 }, 2) as [string, string];
  return g.cast(g.where(g.greater(vals, g.scalar(-Infinity)), idx, g.const('int64', [-1], [])), 'int32');
}

export function buildIndexerPoolGraph(ctx: GraphContext, e: LayerPlanEntry): Uint8Array {
  const dI = ctx.config.indexHeadDim;
  const g = new GraphBuilder(`indexer_pool_${e.layer}`);
  const o = new GraphOps(g, ctx.mode);
  const K = g.input('K', 'uint8', ['U', dI / 2 + dI / 32]);
  const { scores } = indexScores(g, o, ctx, K);
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
