#!/usr/bin/env node
/**
 * The fused index-score kernel alone (@csa2/core model/indexer-fused): ns per key-score for random MXFP4
 * queries and keys, at the tiny models' 2 heads × 32 and the served model's 4 × 64, for a replay's 160
 * rows, a decode row and 32 rows. A diagnostic, not a bench suite.
 *
 *   npm run build && node bench/tools/fused-kernel-probe.mjs
 */
import { FusedIndexScorer } from '../../packages/csa2-core/dist/model/indexer-fused.js';
import { fakeQuantFp4Ue8m0Block32, quantizeIndexKRows } from '../../packages/csa2-core/dist/numerics/formats.js';
for (const [heads, d] of [
  [2, 32],
  [4, 64],
])
  for (const [rows, n] of [
    [160, 1638],
    [1, 65536],
    [32, 8192],
  ]) {
    const f = new FusedIndexScorer(heads, d, true);
    const iq = fakeQuantFp4Ue8m0Block32(
      Float32Array.from({ length: rows * heads * d }, () => Math.random() * 2 - 1),
      d,
    );
    const iw = Float32Array.from({ length: rows * heads }, () => Math.random());
    const q = { iq, iw, rows };
    const packed = quantizeIndexKRows(
      Float32Array.from({ length: n * d }, () => Math.random() * 2 - 1),
      d,
    );
    f.loadRows(q);
    for (let i = 0; i < 3; i++) f.score(packed, n);
    const reps = Math.max(3, Math.round(2e7 / (rows * n)));
    const t0 = performance.now();
    for (let i = 0; i < reps; i++) f.score(packed, n);
    const ns = ((performance.now() - t0) * 1e6) / (reps * rows * n);
    console.log(`heads ${heads} d ${d} rows ${rows} keys ${n}: ${ns.toFixed(2)} ns per key-score`);
  }
