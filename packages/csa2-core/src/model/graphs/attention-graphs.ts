/**
 * @module model/graphs/attention-graphs
 * The sparse attention of one layer kind, shared by every layer of that kind (it has no weights: the
 * sink comes in as an input), so all layers use one session and one memory arena. Rows may come from
 * many sequences at once: each row's index list points into the one key table of the run, and the
 * caller lays every sequence's keys out in it (model/attention/attention).
 *
 *   window-only (ratio 0) and compressed (ratio > 0) differ in their column count C only; the key table
 *   kv [N, D] holds, per span, the compressed entries its rows selected (unpacked by
 *   model/indexer/indexer-kernels' MainKvUnpacker, bit for bit graphs/packed-ops unpackMainKv) and its window
 *   rows (model/attention/attention lays them out).
 *
 * idx [S, C] (C = attentionColumns) holds the reference's column order (window columns, then compressed
 * ones) as rows of the table, -1 = no key. Output att [S, H, D] (bf16 values in bf16 mode).
 */
import { GraphBuilder } from '../../onnx/graph-builder.js';
import { GraphOps } from './graph-ops.js';
import { attentionColumns, type GraphContext } from './context.js';

export function buildAttentionGraph(ctx: GraphContext, compressed: boolean): Uint8Array {
  const { config: c } = ctx;
  const g = new GraphBuilder(compressed ? 'attention_compressed' : 'attention_window');
  const o = new GraphOps(g, ctx.mode, ctx.bf16Gemm === true);
  const { headDim: D, numHeads: H } = c;
  const C = attentionColumns(c, compressed ? 1 : 0);
  const q = g.input('q', 'float32', ['S', H, D]);
  const table = g.input('kv', 'float32', ['N', D]);
  const idx = g.input('idx', 'int32', ['S', C]);
  const sink = g.input('sink', 'float32', [H]);
  g.output(o.sparseAttention(q, table, idx, sink, D ** -0.5, C), 'att', 'float32', ['S', H, D]);
  return g.toBytes();
}
