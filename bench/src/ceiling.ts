/**
 * @module ceiling
 * The matmul ceiling of this machine as onnxruntime-node delivers it: a one-node ONNX MatMul graph
 * (A [M, K] input × W [K, N] fp32 initializer, built with csa2-core's GraphBuilder and run through
 * its openGraphSession, so the same runtime options and per-run overhead apply) timed at a few M.
 * The best GFLOP/s over the shapes is "the ceiling" that model figures are reported against.
 */
import { DEFAULT_RUNTIME_OPTIONS, GraphBuilder, SeededRandom, f32, openGraphSession, type RuntimeOptions } from '@csa2/core';
import { median } from './stats.js';

export interface MatmulShape {
  readonly m: number;
  readonly k: number;
  readonly n: number;
}

/** M = 1 (decode-like matrix–vector), 64 and 512 (prefill-like) against a 1024×4096 weight. */
export const DEFAULT_CEILING_SHAPES: readonly MatmulShape[] = Object.freeze([
  { m: 1, k: 1024, n: 4096 },
  { m: 64, k: 1024, n: 4096 },
  { m: 512, k: 1024, n: 4096 },
]);

export interface CeilingOptions {
  readonly shapes: readonly MatmulShape[];
  /** Intra-op threads of the MatMul session. */
  readonly threads: number;
  /** Runtime options other than the thread count. @defaultValue DEFAULT_RUNTIME_OPTIONS */
  readonly runtime?: RuntimeOptions;
  /** Time spent timing each shape (after 3 warm-up runs); at least 5 runs are timed. @defaultValue 1000 */
  readonly budgetMsPerShape?: number;
}

export interface ShapeResult extends MatmulShape {
  readonly runs: number;
  readonly bestMs: number;
  readonly medianMs: number;
  /** 2·M·K·N / best time. */
  readonly gflops: number;
}

export interface CeilingResult {
  readonly threads: number;
  readonly shapes: readonly ShapeResult[];
  /** The shape with the highest GFLOP/s. */
  readonly best: ShapeResult;
}

function randomMatrix(rng: SeededRandom, count: number): Float32Array {
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) out[i] = rng.nextUniform() * 2 - 1;
  return out;
}

/** Times fp32 MatMul at each shape; one session per distinct K×N weight, M symbolic. */
export async function measureMatmulCeiling(opts: CeilingOptions): Promise<CeilingResult> {
  if (opts.shapes.length === 0) throw new RangeError('measureMatmulCeiling: no shapes');
  const runtime = opts.runtime ?? DEFAULT_RUNTIME_OPTIONS;
  const budgetMs = opts.budgetMsPerShape ?? 1000;
  const rng = new SeededRandom(20261129);
  const results: ShapeResult[] = [];
  const byWeight = new Map<string, MatmulShape[]>();
  for (const s of opts.shapes) {
    const key = `${s.k}x${s.n}`;
    byWeight.set(key, [...(byWeight.get(key) ?? []), s]);
  }
  for (const shapes of byWeight.values()) {
    const { k, n } = shapes[0] as MatmulShape;
    const g = new GraphBuilder(`matmul_${k}x${n}`);
    const a = g.input('a', 'float32', ['M', k]);
    const w = g.weight('w', randomMatrix(rng, k * n), [k, n]);
    g.output(g.matmul(a, w), 'y', 'float32', ['M', n]);
    const session = await openGraphSession(`matmul_${k}x${n}`, g.toBytes(), runtime, opts.threads);
    try {
      for (const s of shapes) {
        const feeds = { a: f32(randomMatrix(rng, s.m * k), [s.m, k]) };
        for (let i = 0; i < 3; i++) await session.run(feeds);
        const times: number[] = [];
        const t0 = performance.now();
        while (times.length < 5 || performance.now() - t0 < budgetMs) {
          const t = performance.now();
          await session.run(feeds);
          times.push(performance.now() - t);
        }
        const bestMs = Math.min(...times);
        results.push({ ...s, runs: times.length, bestMs, medianMs: median(times), gflops: (2 * s.m * s.k * s.n) / (bestMs * 1e6) });
      }
    } finally {
      await session.dispose();
    }
  }
  const ordered = opts.shapes.map((s) => results.find((r) => r.m === s.m && r.k === s.k && r.n === s.n) as ShapeResult);
  const best = ordered.reduce((x, y) => (y.gflops > x.gflops ? y : x));
  return { threads: opts.threads, shapes: ordered, best };
}
