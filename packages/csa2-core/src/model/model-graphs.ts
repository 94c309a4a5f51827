/**
 * @module model/model-graphs
 * Every graph of one model, built from its weights and opened as typed sessions, plus the per-layer
 * parameters the TypeScript steps use (attention sink, hc Sinkhorn, MoE gate).
 *
 * Sessions per layer: attnIn, attnOut, moe; compress (KV sources); an indexer (index sources): a scan
 * of every visible entry, or, for layers after the candidate source, a scan of the candidate pool
 * only (`indexerPool`, the default) or of every entry masked to the pool (the official code's way).
 * By default (`indexerScores: 'split'`) the scans and pools score in one WebAssembly loop (up to 4
 * index heads, model/indexer/indexer-fused) or unpack, finish and pick in TypeScript around one shared Gemm
 * session (model/indexer/indexer-scores), and pick in TypeScript; with 'graph' each layer has its ONNX scan or
 * pool graph (unpack, scores, masks and TopK in the graph), as does the masked reference path always.
 * Shared by all layers: the two sparse-attention graphs (one per layer kind) and the head.
 */
import { Csa2Error } from '../errors.js';
import type { ModelConfig } from '../config/model-config.js';
import type { LayerPlan, LayerPlanEntry } from '../config/layer-plan.js';
import { openGraphSession, resolveIntraOpThreads, type GraphSession, type RuntimeOptions } from '../runtime/ort-session.js';
import type { NumericsMode } from './graphs/graph-ops.js';
import { TypedGraph, type GraphSignature, type Io } from './graphs/graph-io.js';
import type { GraphContext, WeightSource } from './graphs/context.js';
import { buildAttnInGraph, buildAttnOutGraph } from './graphs/attention-sublayer-graphs.js';
import { buildAttentionGraph } from './graphs/attention-graphs.js';
import { buildCompressGraph } from './graphs/compress-graph.js';
import { buildHeadGraph, buildMoeGraph } from './graphs/ffn-graphs.js';
import { buildIndexScoresGraph, buildIndexerPoolGraph, buildIndexerScanGraph } from './graphs/indexer-graphs.js';
import { IndexScorer, MAX_HEADS_SUMMED_IN_TS } from './indexer/indexer-scores.js';
import { ScanThreads } from './indexer/scan-threads.js';
import { ATTENTION, ATTN_IN, ATTN_IN_COMPRESS, ATTN_OUT, COMPRESS, HEAD, INDEXER_POOL, INDEXER_SCAN, moeSignature } from './graphs/signatures.js';
import type { HcSplitParams } from './hc/hc-sinkhorn.js';
import type { AttentionGraphs } from './attention/attention.js';
import type { FfnGraphs } from './ffn/ffn.js';
import type { IndexerGraphs, LayerIndexer } from './indexer/indexer-job.js';
import { GraphEncoder } from './encoder/graph-encoder.js';

export interface LayerGraphs extends FfnGraphs {
  readonly attnIn: TypedGraph<typeof ATTN_IN>;
  readonly attnOut: TypedGraph<typeof ATTN_OUT>;
  readonly compress: TypedGraph<typeof COMPRESS> | null;
  readonly indexer: LayerIndexer | null;
  /** The layer's attention sink logits [H] (input of the shared attention graph). */
  readonly sink: Float32Array;
  /** hc_split_sinkhorn parameters of the attention mix (FfnGraphs.hcFfn: the FFN's). */
  readonly hcAttn: HcSplitParams;
}

export interface ModelGraphs extends AttentionGraphs, IndexerGraphs {
  readonly layers: readonly LayerGraphs[];
  readonly head: TypedGraph<typeof HEAD>;
  /** The first decoder KV source's compressor inputs from the encoder output (encode mode), if split. */
  readonly compressOnly: TypedGraph<typeof ATTN_IN_COMPRESS> | null;
  /** The encoder as one graph per chunk (GraphBuildOptions.encoderGraph), or null. */
  readonly encoder: GraphEncoder | null;
}

export interface GraphBuildOptions {
  readonly numerics: NumericsMode;
  readonly runtime: RuntimeOptions;
  /** Layers after the candidate source score only their candidate pool (true) or every entry, masked. */
  readonly indexerPool: boolean;
  /** Where the indexer unpacks, finishes its scores and picks: TypeScript around one Gemm ('split') or the ONNX graphs ('graph'). */
  readonly indexerScores: IndexerScores;
  /** GraphContext.sinkhornInGraph. @defaultValue false */
  readonly sinkhornInGraph?: boolean;
  /** GraphContext.bf16Gemm. @defaultValue true on the CUDA provider, false on the CPU */
  readonly bf16Gemm?: boolean;
  /** Scan threads for the split scorer (model/indexer/scan-threads), a resolved count (0: none). @defaultValue 0 */
  readonly scanThreads?: number;
  /** Build the one-graph encoder (model/encoder/graph-encoder); `topk` adds its index lists as outputs. @defaultValue false */
  readonly encoderGraph?: boolean | { readonly topk: boolean };
  /** Rows a chunk of the one-graph encoder (ModelOptions.chunkTokens). @defaultValue 4096 */
  readonly encoderChunkTokens?: number;
}

export type IndexerScores = 'split' | 'graph';

function hcSplitParams(c: ModelConfig, w: WeightSource, layer: number, which: 'attn' | 'ffn'): HcSplitParams {
  return {
    n: c.hcMult,
    iters: c.hcSinkhornIters,
    eps: c.hcEps,
    scale: w.get(`layers.${layer}.hc_${which}_scale`),
    base: w.get(`layers.${layer}.hc_${which}_base`),
  };
}

/** Builds every graph from the weights and opens the sessions; on failure, closes what was opened. */
export async function openModelGraphs(config: ModelConfig, plan: LayerPlan, weights: WeightSource, options: GraphBuildOptions): Promise<ModelGraphs> {
  // bf16 tensor-core GEMMs on the CUDA provider (GraphContext.bf16Gemm); the CPU keeps the exact path
  const ctx: GraphContext = {
    config,
    weights,
    mode: options.numerics,
    bf16Gemm: options.bf16Gemm ?? options.runtime.executionProvider === 'cuda',
    sinkhornInGraph: options.sinkhornInGraph === true,
  };
  const threads = resolveIntraOpThreads(options.runtime, config.dim);
  const arenaRows = options.runtime.attentionArenaMaxRows;
  if (!(arenaRows === Infinity || (Number.isInteger(arenaRows) && arenaRows >= 1))) {
    throw new Csa2Error('config-invalid', `runtime: attentionArenaMaxRows must be a positive integer or Infinity, got ${String(arenaRows)}`);
  }
  const opened: TypedGraph<GraphSignature<Io, Io, Io, Io>>[] = [];
  let scorerSession: GraphSession | null = null;
  let encoder: GraphEncoder | null = null;
  const open = async <S extends GraphSignature<Io, Io, Io, Io>>(
    name: string,
    bytes: Uint8Array,
    signature: S,
    memoryArena = options.runtime.memoryArena,
  ): Promise<TypedGraph<S>> => {
    const g = await TypedGraph.open(name, bytes, signature, options.runtime, threads, memoryArena);
    opened.push(g as unknown as TypedGraph<GraphSignature<Io, Io, Io, Io>>);
    return g;
  };
  try {
    const moeSig = moeSignature(config.numRoutedExperts);
    const layers: LayerGraphs[] = [];
    for (const e of plan.entries) {
      let indexer: LayerIndexer | null = null;
      const split = options.indexerScores === 'split';
      if (e.isIndexSource) {
        if (e.usesCandidates && options.indexerPool) {
          indexer = split
            ? { kind: 'split-pool' }
            : { kind: 'pool', graph: await open(`indexer_pool_${e.layer}`, buildIndexerPoolGraph(ctx, e), INDEXER_POOL) };
        } else if (!e.usesCandidates && split) {
          indexer = { kind: 'split-scan' };
        } else {
          indexer = {
            kind: 'scan',
            graph: await open(`indexer_${e.layer}`, buildIndexerScanGraph(ctx, e), INDEXER_SCAN),
            maskedToCandidates: e.usesCandidates,
          };
        }
      }
      layers.push({
        entry: e,
        attnIn: await open(`attn_in_${e.layer}`, buildAttnInGraph(ctx, e), ATTN_IN),
        attnOut: await open(`attn_out_${e.layer}`, buildAttnOutGraph(ctx, e), ATTN_OUT),
        moe: await open(`moe_${e.layer}`, buildMoeGraph(ctx, e), moeSig),
        compress: e.isKvSource ? await open(`compress_${e.layer}`, buildCompressGraph(ctx, e), COMPRESS) : null,
        indexer,
        sink: weights.get(`layers.${e.layer}.attn.attn_sink`),
        hcAttn: hcSplitParams(config, weights, e.layer, 'attn'),
        hcFfn: hcSplitParams(config, weights, e.layer, 'ffn'),
        gate: {
          scoreFunc: config.scoreFunc,
          gateTemp: config.gateTemp,
          normTopKProb: config.normTopKProb,
          routeScale: config.routeScale,
          k: config.numActivatedExperts,
          bias: weights.get(`layers.${e.layer}.ffn.gate.bias`),
        },
      });
    }
    const dec = plan.decoderStart;
    const attentionArena = options.runtime.memoryArena || options.runtime.attentionArena;
    const split = attentionArena && !options.runtime.memoryArena && arenaRows !== Infinity;
    const windowGraph = buildAttentionGraph(ctx, false);
    const compressedGraph = buildAttentionGraph(ctx, true);
    let indexScorer: IndexScorer | null = null;
    if (options.indexerScores === 'split' && plan.entries.some((e) => e.isIndexSource)) {
      scorerSession = await openGraphSession(
        'index_scores',
        buildIndexScoresGraph(ctx, config.indexNumHeads > MAX_HEADS_SUMMED_IN_TS),
        options.runtime,
        threads,
      );
      indexScorer = new IndexScorer(
        config,
        options.numerics,
        scorerSession,
        true,
        (options.scanThreads ?? 0) > 0
          ? new ScanThreads(options.scanThreads as number, {
              kernel: { heads: config.indexNumHeads, dim: config.indexHeadDim, round: options.numerics === 'bf16' },
            })
          : null,
      );
    }
    if (options.encoderGraph !== undefined && options.encoderGraph !== false) {
      encoder = await GraphEncoder.open(ctx, plan, options.runtime, threads, {
        chunkTokens: options.encoderChunkTokens ?? 4096,
        topk: options.encoderGraph !== true && options.encoderGraph.topk,
      });
    }
    return {
      layers,
      head: await open('head', buildHeadGraph(ctx), HEAD),
      compressOnly:
        dec === null
          ? null
          : await open(`attn_in_${dec}_compress`, buildAttnInGraph(ctx, plan.entries[dec] as LayerPlanEntry, { compressOnly: true }), ATTN_IN_COMPRESS),
      // shared by every layer of their kind: one arena each (RuntimeOptions.attentionArena)
      attentionWindow: await open('attention_window', windowGraph, ATTENTION, attentionArena),
      attentionCompressed: await open('attention_compressed', compressedGraph, ATTENTION, attentionArena),
      attentionNoArena: split
        ? {
            window: await open('attention_window_no_arena', windowGraph, ATTENTION, false),
            compressed: await open('attention_compressed_no_arena', compressedGraph, ATTENTION, false),
            aboveRows: arenaRows,
          }
        : null,
      indexScorer,
      encoder,
    };
  } catch (err) {
    for (const g of opened) await g.dispose().catch(() => undefined);
    await scorerSession?.dispose().catch(() => undefined);
    await encoder?.dispose().catch(() => undefined);
    throw err;
  }
}

/** Releases every session. */
export async function disposeModelGraphs(graphs: ModelGraphs): Promise<void> {
  for (const l of graphs.layers) {
    const indexer = l.indexer !== null && 'graph' in l.indexer ? l.indexer.graph : null;
    for (const g of [l.attnIn, l.attnOut, l.moe, l.compress, indexer]) if (g !== null) await g.dispose();
  }
  for (const g of [
    graphs.head,
    graphs.compressOnly,
    graphs.attentionWindow,
    graphs.attentionCompressed,
    graphs.attentionNoArena?.window ?? null,
    graphs.attentionNoArena?.compressed ?? null,
  ])
    if (g !== null) await g.dispose();
  await graphs.indexScorer?.dispose();
  await graphs.encoder?.dispose();
}
