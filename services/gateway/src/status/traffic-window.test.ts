import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createGatewayMetrics } from '../metrics.js';
import { TrafficWindow, quantileBetween } from './traffic-window.js';

test('quantiles interpolate within the buckets of the observations between two snapshots', () => {
  const older = {
    buckets: [
      [0.1, 10],
      [1, 10],
      [Infinity, 10],
    ] as const,
    count: 10,
  };
  const newer = {
    buckets: [
      [0.1, 10],
      [1, 30],
      [Infinity, 30],
    ] as const,
    count: 30,
  };
  // the 20 new observations all fall in (0.1, 1]: the median is halfway through that bucket
  assert.equal(quantileBetween(older, newer, 0.5), 0.55);
  assert.equal(quantileBetween(newer, newer, 0.5), null, 'nothing observed in between');
  assert.equal(
    quantileBetween(
      null,
      {
        buckets: [
          [1, 0],
          [Infinity, 4],
        ],
        count: 4,
      },
      0.5,
    ),
    1,
    'past the last bound: that bound',
  );
});

test('the window reports what was observed since start until a snapshot is old enough', async () => {
  const metrics = createGatewayMetrics();
  const window = new TrafficWindow(metrics, { windowMs: 60_000, sampleMs: 10_000, startedAtMs: Date.now() - 2000 });
  try {
    for (const s of [0.02, 0.04, 0.06]) metrics.timeToFirstToken.observe({ endpoint: 'completions', route: 'decode' }, s);
    metrics.e2eLatency.observe({ endpoint: 'completions', route: 'decode', outcome: 'ok' }, 0.3);
    metrics.completionTokens.inc({ endpoint: 'completions' }, 40);
    const s = await window.summary();
    assert.equal(s.ttft.count, 3);
    assert.ok(s.ttft.p50S !== null && s.ttft.p50S > 0.025 && s.ttft.p50S <= 0.05, String(s.ttft.p50S));
    assert.equal(s.requests, 1);
    assert.ok(s.completionTokensPerS > 0 && s.completionTokensPerS <= 40 / 1.9, String(s.completionTokensPerS));
  } finally {
    window.close();
  }
});
