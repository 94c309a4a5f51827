/** The engine metrics render the scheduler's stats in Prometheus' text format (one read per scrape). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { registerEngineMetrics, type EngineSchedulerStats } from './engine-metrics.js';

const hist = (bounds: number[], counts: number[], sum: number) => ({ bounds, counts, sum });

test('gauges, counters and histograms from one stats read; absent while there is no engine', async () => {
  const registry = new Registry();
  registry.setDefaultLabels({ service: 'decoder-worker' });
  let reads = 0;
  let stats: EngineSchedulerStats | null = {
    running: 3,
    waiting: 1,
    kvBytesInUse: 12345,
    kvBudgetBytes: 2 ** 32,
    steps: 40,
    decodeTokens: 100,
    prefillTokens: 512,
    refused: 2,
    stepMs: hist([5, 10], [10, 30, 40], 420),
    batchRows: hist([1, 2, 4], [5, 20, 35, 40], 900),
    decodeBatch: hist([1, 2, 4], [5, 20, 40, 40], 120),
    documentCache: {
      hits: 7,
      misses: 2,
      bypassed: 1,
      evictions: 1,
      entries: 2,
      leased: 1,
      bytes: 5_000_000,
      tailBytes: 40_000,
      tailHits: 5,
      tailsStored: 2,
      tailsLoaded: 3,
      tailsRejected: 1,
      arena: { usedBytes: 5_000_000, touchedBytes: 9_000_000 },
    },
    scanThreads: { count: 3, usable: true, tasks: 120, declined: 2, failed: 0 },
  };
  registerEngineMetrics(registry, async () => {
    reads++;
    return stats;
  });
  const text = await registry.metrics();
  assert.equal(reads, 1, 'one read serves every metric of a scrape');
  for (const line of [
    'csa2_engine_sequences_running{service="decoder-worker"} 3',
    'csa2_engine_sequences_waiting{service="decoder-worker"} 1',
    'csa2_engine_kv_bytes_in_use{service="decoder-worker"} 12345',
    'csa2_engine_kv_budget_bytes{service="decoder-worker"} 4294967296',
    'csa2_engine_steps_total{service="decoder-worker"} 40',
    'csa2_engine_decode_tokens_total{service="decoder-worker"} 100',
    'csa2_engine_prefill_tokens_total{service="decoder-worker"} 512',
    'csa2_engine_refused_total{service="decoder-worker"} 2',
    'csa2_engine_step_seconds_bucket{le="0.005",service="decoder-worker"} 10',
    'csa2_engine_step_seconds_bucket{le="0.01",service="decoder-worker"} 30',
    'csa2_engine_step_seconds_bucket{le="+Inf",service="decoder-worker"} 40',
    'csa2_engine_step_seconds_sum{service="decoder-worker"} 0.42',
    'csa2_engine_step_seconds_count{service="decoder-worker"} 40',
    'csa2_engine_decode_batch_sequences_bucket{le="4",service="decoder-worker"} 40',
    '# TYPE csa2_engine_step_tokens histogram',
    'csa2_engine_document_cache_bytes{service="decoder-worker"} 5000000',
    'csa2_engine_document_cache_documents{state="leased",service="decoder-worker"} 1',
    'csa2_engine_document_cache_documents{state="idle",service="decoder-worker"} 1',
    'csa2_engine_document_cache_lookups_total{result="hit",service="decoder-worker"} 7',
    'csa2_engine_document_cache_lookups_total{result="bypassed",service="decoder-worker"} 1',
    'csa2_engine_document_cache_evictions_total{service="decoder-worker"} 1',
    'csa2_engine_document_arena_bytes{state="used",service="decoder-worker"} 5000000',
    'csa2_engine_document_arena_bytes{state="touched",service="decoder-worker"} 9000000',
    'csa2_engine_document_tail_bytes{service="decoder-worker"} 40000',
    'csa2_engine_document_tail_total{result="stored",service="decoder-worker"} 2',
    'csa2_engine_document_tail_total{result="loaded",service="decoder-worker"} 3',
    'csa2_engine_document_tail_total{result="rejected",service="decoder-worker"} 1',
    'csa2_engine_document_tail_total{result="used",service="decoder-worker"} 5',
    'csa2_engine_scan_threads{service="decoder-worker"} 3',
    'csa2_engine_scan_thread_tasks_total{result="done",service="decoder-worker"} 120',
    'csa2_engine_scan_thread_tasks_total{result="declined",service="decoder-worker"} 2',
    'csa2_engine_scan_thread_tasks_total{result="failed",service="decoder-worker"} 0',
  ]) {
    assert.ok(text.includes(line), `missing: ${line}`);
  }
  // a failed scan thread retires them all: the gauge drops to 0, the failure counted
  stats = { ...stats, scanThreads: { count: 3, usable: false, tasks: 120, declined: 2, failed: 1 } };
  await new Promise((r) => setTimeout(r, 300));
  const failed = await registry.metrics();
  for (const line of [
    'csa2_engine_scan_threads{service="decoder-worker"} 0',
    'csa2_engine_scan_thread_tasks_total{result="failed",service="decoder-worker"} 1',
  ])
    assert.ok(failed.includes(line), `missing: ${line}`);
  stats = null;
  await new Promise((r) => setTimeout(r, 300));
  assert.ok(!(await registry.metrics()).includes('csa2_engine_sequences_running{'), 'no engine: no series');
});
