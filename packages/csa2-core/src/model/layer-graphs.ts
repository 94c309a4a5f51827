/**
 * @module model/layer-graphs
 * The ONNX graphs of one model, built from the checkpoint's weights (embedded as initializers):
 *
 *   attnIn[l]    stream X [S,n,d], pre [S,n], rope cos/sin [S,rd/2] →
 *                hc mixes of the attention sublayer, q (RoPE'd) [S,H,D], window KV (RoPE'd, FP8) [S,D],
 *                compressor inputs (KV sources) and index q/weights (index sources)
 *   compress[l]  (KV sources) grouped compressor inputs → main-KV rows (RoPE'd, FP4/E4M3) and index-K
 *                rows (RoPE'd, MXFP4), one per completed group
 *   indexer[l]   (index sources) index q/weights against index K → top-k compressed positions, and the
 *                candidate-block mask (candidate source) or the mask it is restricted to (Reindex)
 *   attnOut[l]   sparse attention over window ∪ selected rows, output projection, hc_post, the FFN's
 *                hc mixes and input, the MoE gate (top-k experts and weights)
 *   moe[l]       routed experts on their rows + shared expert, hc_post → next stream
 *   head         final hc collapse, norm, logits of the last row
 *
 * Row counts are symbolic, so one graph serves prefill chunks and single decode steps alike.
 * Shapes: S rows, n = hcMult, d = dim, H heads of D = headDim, rd = ropeHeadDim, hI × dI index heads.
 */
import { GraphBuilder } from '../onnx/graph-builder.js';
import type { ModelConfig } from '../config/model-config.js';
import type { LayerPlanEntry } from '../config/layer-plan.js';
import { ATTENTION_BLOCK, GraphOps, type NumericsMode } from './graph-ops.js';

/** Weights by official state_dict name, as float32 (bf16 values widened exactly). */
export interface WeightSource {
  get(name: string): Float32Array;
}

export interface GraphContext {
  readonly config: ModelConfig;
  readonly weights: WeightSource;
  readonly mode: NumericsMode;
}

/** Number of 64-entry attention blocks a layer's index list is padded to. */
export function attentionColumns(config: ModelConfig, ratio: number): number {
  const raw = config.windowSize + (ratio > 0 ? config.indexTopK : 0);
  return Math.ceil(raw / ATTENTION_BLOCK) * ATTENTION_BLOCK;
}

/** The mixes of one hc parameter set (`which`: 'attn' or 'ffn') of the block at `prefix`. */
function hcMixLogits(o: GraphOps, c: ModelConfig, w: WeightSource, prefix: string, which: 'attn' | 'ffn', X: string): string {
  return o.hcMixLogits(X, `hc_${which}_fn`, w.get(`${prefix}.hc_${which}_fn`), { n: c.hcMult, d: c.dim, normEps: c.normEps });
}

/**
 * attnIn: the attention sublayer up to the sparse-attention call, and the attention mixes (a_mix, before
 * hc_split_sinkhorn, which model/hc-sinkhorn runs).
 * `compressOnly` builds just the compressor inputs (used to extend the first decoder KV source's cache
 * from the encoder output in encode mode).
 */
export function buildAttnInGraph(ctx: GraphContext, e: LayerPlanEntry, opts: { compressOnly?: boolean } = {}): Uint8Array {
  const { config: c, weights: w } = ctx;
  const p = `layers.${e.layer}`;
  const g = new GraphBuilder(`attn_in_${e.layer}${opts.compressOnly ? '_compress' : ''}`);
  const o = new GraphOps(g, ctx.mode);
  const { hcMult: n, dim: d, headDim: D, ropeHeadDim: rd, numHeads: H } = c;
  const X = g.input('X', 'float32', ['S', n, d]);
  const preIn = g.input('pre', 'float32', ['S', n]);

  if (!opts.compressOnly) {
    g.output(hcMixLogits(o, c, w, p, 'attn', X), 'a_mix', 'float32', ['S', (2 + n) * n]);
  }
  const x = o.rmsNorm(o.hcPre(X, preIn), 'attn_norm', w.get(`${p}.attn_norm.weight`), c.normEps); // [S, d] bf16

  if (e.isKvSource) {
    const m = e.compressRatio;
    if (m === 1) {
      const lat = o.linear(x, 'c_wkv', w.get(`${p}.attn.compressor.wkv.weight`), D, d);
      g.output(o.rmsNorm(lat, 'c_norm', w.get(`${p}.attn.compressor.norm.weight`), c.normEps), 'latent', 'float32', ['S', D]);
    } else {
      // m > 1: fp32 projections of x.float() (the reference promotes these weights to fp32)
      g.output(o.linearF32(x, 'c_wkv', w.get(`${p}.attn.compressor.wkv.weight`), D, d), 'ckv', 'float32', ['S', D]);
      g.output(o.linearF32(x, 'c_wgate', w.get(`${p}.attn.compressor.wgate.weight`), D, d), 'cscore', 'float32', ['S', D]);
    }
  }
  if (opts.compressOnly) return g.toBytes();

  const cos = g.input('cos', 'float32', ['S', rd / 2]);
  const sin = g.input('sin', 'float32', ['S', rd / 2]);
  const qr = o.rmsNorm(o.linear(x, 'wq_a', w.get(`${p}.attn.wq_a.weight`), c.qLoraRank, d), 'q_norm', w.get(`${p}.attn.q_norm.weight`), c.normEps);
  const q = g.reshape(o.linear(qr, 'wq_b', w.get(`${p}.attn.wq_b.weight`), H * D, c.qLoraRank), [0, H, D]);
  g.output(o.rope(q, 3, D, rd, cos, sin), 'q', 'float32', ['S', H, D]);

  const kv = o.rmsNorm(o.linear(x, 'wkv', w.get(`${p}.attn.wkv.weight`), D, d), 'kv_norm', w.get(`${p}.attn.kv_norm.weight`), c.normEps);
  g.output(o.fakeQuantFp8Block32(o.rope(kv, 2, D, rd, cos, sin), D, [-1, D]), 'kvw', 'float32', ['S', D]);

  if (e.isIndexSource) {
    const hI = c.indexNumHeads;
    const dI = c.indexHeadDim;
    const iq = g.reshape(o.linear(qr, 'i_wq_b', w.get(`${p}.attn.indexer.wq_b.weight`), hI * dI, c.qLoraRank), [0, hI, dI]);
    const iqRot = o.rope(iq, 3, dI, rd, cos, sin);
    g.output(o.fakeQuantFp4Ue8m0Block32(iqRot, dI, [-1, hI, dI]), 'iq', 'float32', ['S', hI, dI]);
    const wp = o.linear(x, 'i_wproj', w.get(`${p}.attn.indexer.weights_proj.weight`), hI, d);
    // weights_proj(x) * (dI^-0.5 * hI^-0.5): a bf16 tensor times a Python float
    g.output(o.bf(g.mul(wp, g.scalar(Math.fround(dI ** -0.5 * hI ** -0.5)))), 'iw', 'float32', ['S', hI]);
  }
  return g.toBytes();
}

/**
 * compress: G completed groups → main-KV rows (RoPE at the group's first position, FP4/E4M3-16) and
 * index-K rows (k_norm(wk(latent)) RoPE'd, MXFP4). Inputs: m > 1: gkv, gscore [G, m, D] fp32 (softmax
 * pooling per channel); m = 1: latent [G, D]. cos/sin [G, rd/2] at positions j·m.
 */
export function buildCompressGraph(ctx: GraphContext, e: LayerPlanEntry): Uint8Array {
  const { config: c, weights: w } = ctx;
  const p = `layers.${e.layer}`;
  const g = new GraphBuilder(`compress_${e.layer}`);
  const o = new GraphOps(g, ctx.mode);
  const { headDim: D, ropeHeadDim: rd, indexHeadDim: dI } = c;
  const m = e.compressRatio;
  let latent: string;
  if (m === 1) {
    latent = g.input('latent', 'float32', ['G', D]);
  } else {
    const kv = g.input('gkv', 'float32', ['G', m, D]);
    const score = g.input('gscore', 'float32', ['G', m, D]);
    const ex = g.exp(g.sub(score, g.reduceMax(score, [1], true)));
    const weights = g.div(ex, g.reduceSum(ex, [1], true));
    const pooled = g.reduceSum(g.mul(kv, weights), [1], false);
    latent = o.rmsNorm(o.bf(pooled), 'c_norm', w.get(`${p}.attn.compressor.norm.weight`), c.normEps);
  }
  const cos = g.input('cos', 'float32', ['G', rd / 2]);
  const sin = g.input('sin', 'float32', ['G', rd / 2]);
  // index keys come from the latent before RoPE (csa2 §3.2.1)
  const k = o.rmsNorm(o.linear(latent, 'i_wk', w.get(`${p}.attn.indexer.wk.weight`), dI, D), 'i_knorm', w.get(`${p}.attn.indexer.k_norm.weight`), c.normEps);
  g.output(o.fakeQuantFp4Ue8m0Block32(o.rope(k, 2, dI, rd, cos, sin), dI, [-1, dI]), 'ik', 'float32', ['G', dI]);
  g.output(o.fakeQuantFp4E4m3Block16(o.rope(latent, 2, D, rd, cos, sin), D, [-1, D]), 'ckv', 'float32', ['G', D]);
  return g.toBytes();
}

/**
 * indexer: scores I[t,j] = Σ_h w[t,h]·relu(q[t,h]·K[j]) (bf16 einsum, bf16 products, bf16 head sum),
 * causal visibility j < clen[t], candidate blocks (source) or restriction to them (Reindex), top-kk with
 * ties to the lower position, sorted ascending, unreachable picks → -1.
 * Inputs: iq [S,hI,dI], iw [S,hI], K [n,dI], clen [S,1] int32, kk [1] int32, (cand_in [S,n] bool).
 * Outputs: topk [S,kk] int32, (cand [S,n] bool for the candidate source).
 */
export function buildIndexerGraph(ctx: GraphContext, e: LayerPlanEntry): Uint8Array {
  const c = ctx.config;
  const g = new GraphBuilder(`indexer_${e.layer}`);
  const o = new GraphOps(g, ctx.mode);
  const hI = c.indexNumHeads;
  const dI = c.indexHeadDim;
  const iq = g.input('iq', 'float32', ['S', hI, dI]);
  const iw = g.input('iw', 'float32', ['S', hI]);
  const K = g.input('K', 'float32', ['n', dI]);
  const clen = g.input('clen', 'int32', ['S', 1]);
  const kk = g.input('kk', 'int32', [1]);

  const perHead = o.bf(g.matmul(iq, g.transpose(K, [1, 0]))); // [S, hI, n]
  const weighted = o.bf(g.mul(g.relu(perHead), g.unsqueeze(iw, [-1])));
  let scores = o.bf(g.reduceSum(weighted, [1], false)); // [S, n]

  const nLen = g.gather(g.op('Shape', [K]), g.const('int64', [0], []));
  const positions = g.op('Range', [g.const('int64', [0], []), nLen, g.const('int64', [1], [])]); // [n]
  const clen64 = g.cast(clen, 'int64');
  const negInf = g.scalar(-Infinity);
  scores = g.where(g.less(positions, clen64), scores, negInf);

  if (e.isCandidateSource) {
    g.output(candidateBlocks(g, scores, clen, nLen, c.candidateTopKBlocks, c.candidateBlockSize), 'cand', 'bool', ['S', 'n']);
  } else if (e.usesCandidates) {
    const candIn = g.input('cand_in', 'bool', ['S', 'n']);
    scores = g.where(candIn, scores, negInf);
  }
  // a chunk may end before kk entries exist: pick min(kk, n); the reference's extra picks there are
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
 * kept (ties → lower block), blocks with no reachable position dropped; expanded back to positions.
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
  const keepPick = g.cast(g.greater(vals, g.scalar(-Infinity)), 'float32');
  const keepBlock = g.op('ScatterElements', [g.op('ConstantOfShape', [g.op('Shape', [blockMax])], {}), idx, keepPick], { axis: 1 });
  const expanded = g.op('Expand', [g.unsqueeze(keepBlock, [-1]), g.concat([g.op('Shape', [blockMax]), g.const('int64', [blockSize])], 0)]);
  const flat = g.reshape(expanded, [0, -1]);
  const mask = g.op('Slice', [flat, g.const('int64', [0]), g.unsqueeze(nLen, [0]), g.const('int64', [1])]);
  return g.greater(mask, g.scalar(0.5));
}

/**
 * attention: the sparse attention of one layer kind, shared by every layer of that kind (it has no
 * weights: the sink comes in as an input), so all layers use one session and one memory arena.
 * `compressed` false: window-only layers (ratio 0); true: window + compressed columns. Inputs: q
 * [S,H,D]; kv [N,D], the key rows this chunk can see (the caller lays out compressed entries and window
 * rows in one table); idx [S,C] with C = attentionColumns, the reference's column order (window columns,
 * then compressed ones) as rows of kv, -1 = no key; sink [H]. Output att [S,H,D] (bf16 values in bf16
 * mode, so handing it to attnOut is lossless).
 */
export function buildAttentionGraph(ctx: GraphContext, compressed: boolean): Uint8Array {
  const { config: c } = ctx;
  const g = new GraphBuilder(compressed ? 'attention_compressed' : 'attention_window');
  const o = new GraphOps(g, ctx.mode);
  const { headDim: D, numHeads: H } = c;
  const C = attentionColumns(c, compressed ? 1 : 0);
  const q = g.input('q', 'float32', ['S', H, D]);
  const kv = g.input('kv', 'float32', ['N', D]);
  const idx = g.input('idx', 'int32', ['S', C]);
  const sink = g.input('sink', 'float32', [H]);
  const att = o.sparseAttention(q, kv, idx, sink, D ** -0.5, C);
  g.output(att, 'att', 'float32', ['S', H, D]);
  return g.toBytes();
}

/**
 * attnOut: inverse RoPE of the attention output, output projection + hc_post, then the FFN sublayer's
 * mixes (f_mix, before hc_split_sinkhorn, which model/hc-sinkhorn runs), its input and the MoE gate
 * logits (routing: model/moe-gate). Inputs: att [S,H,D] (from the attention graph); X [S,n,d];
 * a_pre, a_post [S,n]; a_comb [S,n,n]; cos/sin [S,rd/2].
 */
export function buildAttnOutGraph(ctx: GraphContext, e: LayerPlanEntry): Uint8Array {
  const { config: c, weights: w } = ctx;
  const p = `layers.${e.layer}`;
  const g = new GraphBuilder(`attn_out_${e.layer}`);
  const o = new GraphOps(g, ctx.mode);
  const { hcMult: n, dim: d, headDim: D, ropeHeadDim: rd, numHeads: H, oGroups: G, oLoraRank: R } = c;
  const attIn = g.input('att', 'float32', ['S', H, D]);
  const X = g.input('X', 'float32', ['S', n, d]);
  const aPre = g.input('a_pre', 'float32', ['S', n]);
  const aPost = g.input('a_post', 'float32', ['S', n]);
  const aComb = g.input('a_comb', 'float32', ['S', n, n]);
  const cos = g.input('cos', 'float32', ['S', rd / 2]);
  const sin = g.input('sin', 'float32', ['S', rd / 2]);

  const att = o.rope(attIn, 3, D, rd, cos, sin, true);
  // grouped low-rank output projection: einsum("sgd,grd->sgr") then wo_b
  const perGroup = g.transpose(g.reshape(att, [0, G, (H / G) * D]), [1, 0, 2]); // [G, S, HD/G]
  const woA = w.get(`${p}.attn.wo_a.weight`); // [G*R, HD/G] viewed [G, R, HD/G]
  const inG = (H / G) * D;
  const woAT = new Float32Array(woA.length);
  for (let grp = 0; grp < G; grp++) {
    for (let r = 0; r < R; r++) {
      for (let k = 0; k < inG; k++) woAT[grp * inG * R + k * R + r] = woA[(grp * R + r) * inG + k] as number;
    }
  }
  const proj = o.bf(g.matmul(perGroup, g.weight('wo_a', woAT, [G, inG, R]))); // [G, S, R]
  const flat = g.reshape(g.transpose(proj, [1, 0, 2]), [0, G * R]);
  const y = o.linear(flat, 'wo_b', w.get(`${p}.attn.wo_b.weight`), d, G * R);
  const X1 = o.hcPost(y, X, aPost, aComb);
  g.output(X1, 'X1', 'float32', ['S', n, d]);

  g.output(hcMixLogits(o, c, w, p, 'ffn', X1), 'f_mix', 'float32', ['S', (2 + n) * n]);
  const xf = o.rmsNorm(o.hcPre(X1, aPre), 'ffn_norm', w.get(`${p}.ffn_norm.weight`), c.normEps);
  g.output(xf, 'xf', 'float32', ['S', d]);

  // MoE gate logits (trunk §3.1): x·W^T in fp32; scoring and routing run in model/moe-gate
  g.output(o.linearF32(xf, 'gate_w', w.get(`${p}.ffn.gate.weight`), c.numRoutedExperts, d), 'gate_logits', 'float32', ['S', c.numRoutedExperts]);
  return g.toBytes();
}

/**
 * moe: routed experts (each on the rows routed to it, weighted before w2) accumulated in fp32 in
 * ascending expert order, plus the shared expert, then hc_post. Inputs: xf [S,d], X1 [S,n,d],
 * f_post [S,n], f_comb [S,n,n], and per expert e: rows_e [n_e] int64, w_e [n_e,1].
 */
export function buildMoeGraph(ctx: GraphContext, e: LayerPlanEntry): Uint8Array {
  const { config: c, weights: w } = ctx;
  const p = `layers.${e.layer}.ffn`;
  const g = new GraphBuilder(`moe_${e.layer}`);
  const o = new GraphOps(g, ctx.mode);
  const { hcMult: n, dim: d, moeInterDim: I } = c;
  const xf = g.input('xf', 'float32', ['S', d]);
  const X1 = g.input('X1', 'float32', ['S', n, d]);
  const post = g.input('f_post', 'float32', ['S', n]);
  const comb = g.input('f_comb', 'float32', ['S', n, n]);
  const L = c.swigluLimit;

  const expert = (x: string, name: string, weight: string | null): string => {
    let gate = o.linear(x, `${name}_w1`, w.get(`${name}.w1.weight`), I, d);
    let up = o.linear(x, `${name}_w3`, w.get(`${name}.w3.weight`), I, d);
    if (L > 0) {
      up = g.clip(up, -L, L);
      gate = g.min(gate, g.scalar(L));
    }
    let h = g.mul(o.silu(gate), up);
    if (weight !== null) h = g.mul(weight, h);
    return o.linear(o.bf(h), `${name}_w2`, w.get(`${name}.w2.weight`), d, I);
  };

  let y = g.op('ConstantOfShape', [g.op('Shape', [xf])], {});
  for (let ex = 0; ex < c.numRoutedExperts; ex++) {
    const rows = g.input(`rows_${ex}`, 'int64', [`n${ex}`]);
    const rw = g.input(`w_${ex}`, 'float32', [`n${ex}`, 1]);
    const out = expert(g.gather(xf, rows), `${p}.experts.${ex}`, rw);
    y = g.op('ScatterND', [y, g.unsqueeze(rows, [-1]), out], { reduction: 'add' });
  }
  y = o.bf(g.add(y, expert(xf, `${p}.shared_experts`, null)));
  g.output(o.hcPost(y, X1, post, comb), 'X2', 'float32', ['S', n, d]);
  return g.toBytes();
}

/** head: collapse the last block's stream with its ffn pre, final norm, fp32 logits. X [S,n,d], pre [S,n] → [S,V]. */
export function buildHeadGraph(ctx: GraphContext): Uint8Array {
  const { config: c, weights: w } = ctx;
  const g = new GraphBuilder('head');
  const o = new GraphOps(g, ctx.mode);
  const X = g.input('X', 'float32', ['S', c.hcMult, c.dim]);
  const pre = g.input('pre', 'float32', ['S', c.hcMult]);
  const h = o.rmsNorm(o.hcPre(X, pre), 'norm', w.get('norm.weight'), c.normEps);
  g.output(o.linearF32(h, 'head', w.get('head.weight'), c.vocabSize, c.dim), 'logits', 'float32', ['S', c.vocabSize]);
  return g.toBytes();
}
