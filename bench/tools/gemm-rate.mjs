#!/usr/bin/env node
/**
 * The best rate onnxruntime's CPU MatMul reaches on this machine, as a ceiling for batched decode:
 * Y[B, 65536] = X[B, 1024] · W with W a 256 MiB float32 initializer (prepacked, as the model's weights), B = 1,
 * 8, 32, 128 rows, THREADS intra-op threads (default 2). A diagnostic, not a bench suite (bench/README.md,
 * `batch`: what bounds the dim-1024 goals).
 *
 *   npm run build && node bench/tools/gemm-rate.mjs [THREADS]
 */
import { DEFAULT_RUNTIME_OPTIONS, GraphBuilder, openGraphSession, f32 } from '@csa2/core';

const K = 1024;
const N = 64 * 1024;
const g = new GraphBuilder('bw');
const x = g.input('x', 'float32', ['B', K]);
const Wb = new Float32Array(K * N).fill(0.001);
const w = g.initializer('w', 'float32', [K, N], new Uint8Array(Wb.buffer));
g.output(g.matmul(x, w), 'y', 'float32', ['B', N]);
const threads = Number(process.argv[2] ?? 2);
const s = await openGraphSession('bw', g.toBytes(), DEFAULT_RUNTIME_OPTIONS, threads);
for (const B of [1, 8, 32, 128]) {
  const X = new Float32Array(B * K).fill(1);
  await s.run({ x: f32(X, [B, K]) });
  const t0 = performance.now();
  const R = 5;
  for (let r = 0; r < R; r++) await s.run({ x: f32(X, [B, K]) });
  const ms = (performance.now() - t0) / R;
  console.log(
    `threads ${threads}, B = ${B}: ${ms.toFixed(1)} ms, ${((K * N * 4) / ms / 1e6).toFixed(1)} GB/s of weights, ${((2 * B * K * N) / ms / 1e6).toFixed(1)} GFLOP/s`,
  );
}
