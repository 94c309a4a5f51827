/**
 * @module model/graphs/attention-graphs
 * The sparse attention of one layer kind, shared by every layer of that kind (it has no weights: the
 * sink comes in as an input), so all layers use one session and one memory arena. Rows may come from
 * many sequences at once: each row's index list points into the one key table of the run, and the
 * caller lays every sequence's keys out in it (model/attention).
 *
 *   window-only (ratio 0) and compressed (ratio > 0) differ in their column count C only; the key table
 *   kv [N, D] holds, per span, the compressed entries its rows selected (unpacked, graph
 *   `unpack_main_kv`) and its window rows (model/attention lays them out).
 *
 * idx [S, C] (C = attentionColumns) holds the reference's column order (window columns, then compressed
 * ones) as rows of the table, -1 = no key. Output att [S, H, D] (bf16 values in bf16 mode).
 *
 * unpack_main_kv (UNPACK_MAIN_KV): packed main-KV rows [U, R] → their values [U, D], bit for bit.
 */
import { GraphBuilder } from '../../onnx/graph-builder.js';
import { GraphOps } from '../graph-ops.js';
import { attentionColumns, type GraphContext } from './context.js';
import { unpackMainKv } from './packed-ops.js';

export function buildAttentionGraph(ctx: GraphContext, compressed: boolean): Uint8Array {
  const { config: c } = ctx;
  const g = new GraphBuilder(compressed ? 'attention_compressed' : 'attention_window');
  const o = new GraphOps(g, ctx.mode);
  const { headDim: D, numHeads: H } = c;
  const C = attentionColumns(c, compressed ? 1 : 0);
  const q = g.input('q', 'float32', ['S', H, D]);
  const table = g.input('kv', 'float32', ['N', D]);
  const idx = g.input('idx', 'int32', ['S', C]);
  const sink = g.input('sink', 'float32', [H]);
  g.output(o.sparseAttention(q, table, idx, sink, D ** -0.5, C), 'att', 'float32', ['S', H, D]);
  return g.toBytes();
}

export function buildUnpackMainKvGraph(ctx: GraphContext): Uint8Array {
  const D = ctx.config.headDim;
  const g = new GraphBuilder('unpack_main_kv');
  const packed = g.input('packed', 'uint8', ['U', D / 2 + D / 16]);
  g.output(unpackMainKv(g, packed, D), 'kv', 'float32', ['U', D]);
  return g.toBytes();
}
