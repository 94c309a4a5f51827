/**
 * @module model/indexer/scan-worker
 * A scan thread (model/indexer/scan-threads): takes slices of a shared scan from its counter until none is
 * left, scores the rows against each slice's packed index keys with the fused kernel
 * (model/indexer/indexer-fused) into bounded heaps, and sends them back with the slices it took. Queries that
 * are not MXFP4 values are declined before any slice is taken. Nothing here loads onnxruntime.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { FusedIndexScorer } from './indexer-fused.js';
import { BoundedHeaps } from './indexer-ranking.js';
import { keysPerRunFor, scoreBlock, type BlockRow, type RunScorer, type ScoreRows } from './indexer-scan-run.js';
import { keysIn, type FromThread, type ScanHeaps, type ScanKernel, type ScanReply, type ScanTask, type ToThread } from './scan-threads.js';

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

function scorerFor(heads: number, dim: number, round: boolean): FusedIndexScorer {
  const key = `${heads}/${dim}/${round}`;
  let fused = scorers.get(key);
  if (fused === undefined) {
    fused = new FusedIndexScorer(heads, dim, round);
    scorers.set(key, fused);
  }
  return fused;
}

function heapsOut(h: BoundedHeaps): ScanHeaps {
  return { capacity: h.capacity, values: h.values, ids: h.ids, size: h.size };
}

async function runTask(task: ScanTask): Promise<ScanReply> {
  const fused = scorerFor(task.heads, task.dim, task.round);
  const q: ScoreRows = { iq: task.iq, iw: task.iw, rows: task.rows };
  if (!fused.loadRows(q)) return { kind: 'declined' };
  const topk = new BoundedHeaps(task.rows, task.topkCap);
  const blocks = task.blocksCap > 0 ? new BoundedHeaps(task.rows, task.blocksCap) : null;
  const rows: BlockRow[] = Array.from({ length: task.rows }, (_, r) => ({ topk, blocks, r, clen: task.clen[r] as number }));
  const scorer = new FusedRuns(fused, task.rowBytes);
  const taken: number[] = [];
  const n = task.slices.length - 1;
  for (let s = Atomics.add(task.counter, 0, 1); s < n; s = Atomics.add(task.counter, 0, 1)) {
    taken.push(s);
    for (const p of keysIn(task.pieces, task.rowBytes, task.slices[s] as number, task.slices[s + 1] as number)) {
      await scoreBlock(scorer, task.blockSize, task.budgetValues, p.keys, task.rowBytes, p.k0, p.keys.length / task.rowBytes, q, rows);
    }
  }
  return { kind: 'done', topk: heapsOut(topk), blocks: blocks === null ? null : heapsOut(blocks), slices: taken };
}

const port = parentPort;
if (port === null) throw new Error('model/indexer/scan-worker runs as a worker thread (model/indexer/scan-threads starts it)');
const kernel = (workerData as { kernel?: ScanKernel | null } | null)?.kernel ?? null;
if (kernel !== null) scorerFor(kernel.heads, kernel.dim, kernel.round);
port.on('message', (m: ToThread) => {
  runTask(m.task).then(
    (reply) => {
      const transfer =
        reply.kind === 'done' ? [reply.topk, reply.blocks].flatMap((h) => (h === null ? [] : [h.values.buffer, h.ids.buffer, h.size.buffer])) : [];
      port.postMessage({ id: m.id, reply } satisfies FromThread, transfer as ArrayBuffer[]);
    },
    (err: unknown) => port.postMessage({ id: m.id, error: err instanceof Error ? err.message : String(err) } satisfies FromThread),
  );
});
port.postMessage({ ready: true } satisfies FromThread);
