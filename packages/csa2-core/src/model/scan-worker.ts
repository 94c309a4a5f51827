/**
 * @module model/scan-worker
 * A scan thread (model/scan-threads): scores a task's rows against its pieces of packed index keys
 * with the fused kernel (model/indexer-fused) into bounded heaps and sends them back. Queries that are
 * not MXFP4 values are declined (the main thread scores the part). Nothing here loads onnxruntime.
 */
import { parentPort } from 'node:worker_threads';
import { FusedIndexScorer } from './indexer-fused.js';
import { BoundedHeaps } from './indexer-ranking.js';
import { keysPerRunFor, scoreBlock, type BlockRow, type RunScorer, type ScoreRows } from './indexer-scan-run.js';
import type { FromThread, ScanHeaps, ScanReply, ScanTask, ToThread } from './scan-threads.js';

/** The fused kernel as scoreBlock's scorer: every run scored from the packed keys it was given. */
class FusedRuns implements RunScorer {
  private packed: Uint8Array = new Uint8Array(0);

  constructor(
    private readonly fused: FusedIndexScorer,
    private readonly rowBytes: number,
  ) {}

  keysPerRun(rows: number, blockSize: number, budgetValues: number): number {
    return keysPerRunFor(rows, this.fused.heads, blockSize, budgetValues);
  }

  loadKeys(packed: Uint8Array): void {
    this.packed = packed;
  }

  run(_q: ScoreRows, from: number, count: number): void {
    this.fused.score(this.packed.subarray(from * this.rowBytes), count);
  }

  scoreRow(r: number, count: number): Float32Array {
    return this.fused.scoreRow(r, count);
  }

  above(r: number, from: number, count: number, threshold: number): Int32Array {
    return this.fused.above(r, from, count, threshold);
  }

  blockMax(r: number, blocks: number, blockSize: number): Float32Array | null {
    return blockSize % 4 === 0 ? this.fused.blockMax(r, blocks, blockSize) : null;
  }
}

const scorers = new Map<string, FusedIndexScorer>();

function heapsOut(h: BoundedHeaps): ScanHeaps {
  return { capacity: h.capacity, values: h.values, ids: h.ids, size: h.size };
}

async function runTask(task: ScanTask): Promise<ScanReply> {
  const t0 = performance.now();
  const key = `${task.heads}/${task.dim}/${task.round}`;
  let fused = scorers.get(key);
  if (fused === undefined) {
    fused = new FusedIndexScorer(task.heads, task.dim, task.round);
    scorers.set(key, fused);
  }
  const q: ScoreRows = { iq: task.iq, iw: task.iw, rows: task.rows };
  if (!fused.loadRows(q)) return { kind: 'declined' };
  const topk = new BoundedHeaps(task.rows, task.topkCap);
  const blocks = task.blocksCap > 0 ? new BoundedHeaps(task.rows, task.blocksCap) : null;
  const rows: BlockRow[] = Array.from({ length: task.rows }, (_, r) => ({ topk, blocks, r, clen: task.clen[r] as number }));
  const scorer = new FusedRuns(fused, task.rowBytes);
  for (const p of task.pieces) {
    await scoreBlock(scorer, task.blockSize, task.budgetValues, p.keys, task.rowBytes, p.k0, p.keys.length / task.rowBytes, q, rows);
  }
  return { kind: 'done', topk: heapsOut(topk), blocks: blocks === null ? null : heapsOut(blocks), ms: performance.now() - t0 };
}

const port = parentPort;
if (port === null) throw new Error('model/scan-worker runs as a worker thread (model/scan-threads starts it)');
port.on('message', (m: ToThread) => {
  runTask(m.task).then(
    (reply) => {
      const transfer = reply.kind === 'done' ? [reply.topk, reply.blocks].flatMap((h) => (h === null ? [] : [h.values.buffer, h.ids.buffer, h.size.buffer])) : [];
      port.postMessage({ id: m.id, reply } satisfies FromThread, transfer as ArrayBuffer[]);
    },
    (err: unknown) => port.postMessage({ id: m.id, error: err instanceof Error ? err.message : String(err) } satisfies FromThread),
  );
});
