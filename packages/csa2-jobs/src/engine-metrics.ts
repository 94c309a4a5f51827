/**
 * @module engine-metrics
 * The engine scheduler's Prometheus metrics on a worker's /metrics (registered by worker-runtime when
 * the service gives `engineStats`), in the conventions users know from vLLM (running and waiting
 * sequences, KV usage against the budget, batch and step-time histograms, tokens per step). Read from
 * the engine at scrape time (one read per scrape), so they cost nothing between scrapes.
 *
 * | metric | type | meaning |
 * |---|---|---|
 * | csa2_engine_sequences_running | gauge | work admitted: decoding, prefilling or loading its artifact |
 * | csa2_engine_sequences_waiting | gauge | work waiting for admission (KV budget, decode batch full) |
 * | csa2_engine_kv_bytes_in_use | gauge | KV bytes the admitted work reserves (packed global cache, windows, ids) |
 * | csa2_engine_kv_budget_bytes | gauge | the budget (CSA2_KV_BUDGET_BYTES) |
 * | csa2_engine_steps_total | counter | forward steps run |
 * | csa2_engine_decode_tokens_total | counter | decode rows run (one per generated token) |
 * | csa2_engine_prefill_tokens_total | counter | prefill rows run (exact prefill, encode, decoder replay) |
 * | csa2_engine_refused_total | counter | work refused because it could not fit the KV budget even alone |
 * | csa2_engine_step_seconds | histogram | time of one step (one forward call) |
 * | csa2_engine_step_tokens | histogram | rows (tokens) per step, decode and prefill together |
 * | csa2_engine_decode_batch_sequences | histogram | decode rows per step, in steps that decoded |
 * | csa2_engine_document_cache_bytes | gauge | packed bytes of the loaded documents the engine keeps (CSA2_DOCUMENT_CACHE_BYTES bounds it) |
 * | csa2_engine_document_cache_documents | gauge | documents kept; `state` = `leased` (read by running work) or `idle` |
 * | csa2_engine_document_cache_lookups_total | counter | generations on a document; `result` = `hit` (shared), `miss` (loaded), `bypassed` (no room: a private copy) |
 * | csa2_engine_document_cache_evictions_total | counter | idle documents dropped to make room |
 * | csa2_engine_document_arena_bytes | gauge | the memory loaded documents are written into (it stays with the process); `state` = `used` (documents now) or `touched` (the most they have used: resident) |
 * | csa2_engine_scan_threads | gauge | scan threads the index scans use (CSA2_SCAN_THREADS); 0 once one failed (the scans then run on the main thread) |
 * | csa2_engine_scan_thread_tasks_total | counter | scans shared with a scan thread; `result` = `done`, `declined` (queries the kernel does not take), `failed` |
 *
 * There is no preemption counter: admission reserves a sequence's whole KV bytes (prompt + max tokens),
 * so a running sequence is never preempted.
 */
import type { Registry } from 'prom-client';

export interface HistogramSnapshot {
  readonly bounds: readonly number[];
  /** Cumulative counts: counts[i] observations ≤ bounds[i]; the last entry counts all. */
  readonly counts: readonly number[];
  readonly sum: number;
}

/** What the metrics read from an engine (@csa2/engine EngineStats has this shape). */
export interface EngineSchedulerStats {
  readonly running: number;
  readonly waiting: number;
  readonly kvBytesInUse: number;
  readonly kvBudgetBytes: number;
  readonly steps: number;
  readonly decodeTokens: number;
  readonly prefillTokens: number;
  readonly refused: number;
  readonly stepMs: HistogramSnapshot;
  readonly batchRows: HistogramSnapshot;
  readonly decodeBatch: HistogramSnapshot;
  readonly documentCache?: {
    readonly hits: number;
    readonly misses: number;
    readonly bypassed: number;
    readonly evictions: number;
    readonly entries: number;
    readonly leased: number;
    readonly bytes: number;
    /** Stored encoder tails (absent: an engine without them). */
    readonly tailBytes?: number;
    readonly tailHits?: number;
    readonly tailsStored?: number;
    readonly tailsLoaded?: number;
    readonly tailsRejected?: number;
    /** The memory documents are loaded into (absent or null: off). */
    readonly arena?: { readonly usedBytes: number; readonly touchedBytes: number } | null;
  };
  /** The model's scan threads (absent or null: none). */
  readonly scanThreads?: {
    readonly count: number;
    readonly usable: boolean;
    readonly tasks: number;
    readonly declined: number;
    readonly failed: number;
  } | null;
}

type Value = { readonly value: number; readonly labels?: Record<string, string | number>; readonly metricName?: string };

interface SnapshotMetric {
  readonly name: string;
  readonly help: string;
  readonly type: 'gauge' | 'counter' | 'histogram';
  readonly labelNames: readonly string[];
  readonly aggregator: 'sum';
  get(): Promise<{ name: string; help: string; type: string; values: Value[]; aggregator: 'sum' }>;
  reset(): void;
}

function histogramValues(name: string, h: HistogramSnapshot, scale: number): Value[] {
  const values: Value[] = h.bounds.map((b, i) => ({ metricName: `${name}_bucket`, labels: { le: b * scale }, value: h.counts[i] ?? 0 }));
  const count = h.counts[h.counts.length - 1] ?? 0;
  values.push({ metricName: `${name}_bucket`, labels: { le: '+Inf' }, value: count });
  values.push({ metricName: `${name}_sum`, value: h.sum * scale });
  values.push({ metricName: `${name}_count`, value: count });
  return values;
}

/**
 * Registers the engine metrics on `registry`; `read` gives the engine's stats (null while no engine
 * runs: the series are then absent).
 */
export function registerEngineMetrics(registry: Registry, read: () => Promise<EngineSchedulerStats | null>): void {
  let cached: { atMs: number; stats: Promise<EngineSchedulerStats | null> } | null = null;
  const stats = () => {
    const now = Date.now();
    if (cached === null || now - cached.atMs > 250) cached = { atMs: now, stats: read().catch(() => null) };
    return cached.stats;
  };
  const metric = (
    name: string,
    help: string,
    type: SnapshotMetric['type'],
    values: (s: EngineSchedulerStats) => Value[],
    labelNames: readonly string[] = [],
  ): SnapshotMetric => ({
    name,
    help,
    type,
    labelNames,
    aggregator: 'sum',
    async get() {
      const s = await stats();
      return { name, help, type, values: s === null ? [] : values(s), aggregator: 'sum' };
    },
    reset() {
      cached = null;
    },
  });
  const metrics = [
    metric('csa2_engine_sequences_running', 'Engine work admitted: decoding, prefilling or loading its artifact', 'gauge', (s) => [{ value: s.running }]),
    metric('csa2_engine_sequences_waiting', 'Engine work waiting for admission (KV budget or decode batch full)', 'gauge', (s) => [{ value: s.waiting }]),
    metric('csa2_engine_kv_bytes_in_use', 'KV bytes the admitted work reserves (packed global cache, windows, token ids)', 'gauge', (s) => [
      { value: s.kvBytesInUse },
    ]),
    metric('csa2_engine_kv_budget_bytes', 'The engine KV budget (CSA2_KV_BUDGET_BYTES)', 'gauge', (s) => [{ value: s.kvBudgetBytes }]),
    metric('csa2_engine_steps_total', 'Forward steps the engine ran', 'counter', (s) => [{ value: s.steps }]),
    metric('csa2_engine_decode_tokens_total', 'Decode rows the engine ran (one per generated token)', 'counter', (s) => [{ value: s.decodeTokens }]),
    metric('csa2_engine_prefill_tokens_total', 'Prefill rows the engine ran (exact prefill, encode, decoder replay)', 'counter', (s) => [
      { value: s.prefillTokens },
    ]),
    metric('csa2_engine_refused_total', 'Work refused because it could not fit the KV budget even alone', 'counter', (s) => [{ value: s.refused }]),
    metric('csa2_engine_step_seconds', 'Time of one engine step (one forward call)', 'histogram', (s) =>
      histogramValues('csa2_engine_step_seconds', s.stepMs, 1e-3),
    ),
    metric('csa2_engine_step_tokens', 'Rows (tokens) per engine step, decode and prefill together', 'histogram', (s) =>
      histogramValues('csa2_engine_step_tokens', s.batchRows, 1),
    ),
    metric('csa2_engine_decode_batch_sequences', 'Decode rows per engine step, in steps that decoded', 'histogram', (s) =>
      histogramValues('csa2_engine_decode_batch_sequences', s.decodeBatch, 1),
    ),
    metric('csa2_engine_document_cache_bytes', 'Packed bytes of the loaded documents the engine keeps', 'gauge', (s) =>
      s.documentCache !== undefined ? [{ value: s.documentCache.bytes }] : [],
    ),
    metric(
      'csa2_engine_document_cache_documents',
      'Loaded documents the engine keeps, leased (read by running work) or idle',
      'gauge',
      (s) =>
        s.documentCache !== undefined
          ? [
              { labels: { state: 'leased' }, value: s.documentCache.leased },
              { labels: { state: 'idle' }, value: s.documentCache.entries - s.documentCache.leased },
            ]
          : [],
      ['state'],
    ),
    metric(
      'csa2_engine_document_cache_lookups_total',
      'Generations on a stored document: hit (shared), miss (loaded), bypassed (a private copy)',
      'counter',
      (s) =>
        s.documentCache !== undefined
          ? [
              { labels: { result: 'hit' }, value: s.documentCache.hits },
              { labels: { result: 'miss' }, value: s.documentCache.misses },
              { labels: { result: 'bypassed' }, value: s.documentCache.bypassed },
            ]
          : [],
      ['result'],
    ),
    metric('csa2_engine_document_cache_evictions_total', 'Idle loaded documents dropped to make room', 'counter', (s) =>
      s.documentCache !== undefined ? [{ value: s.documentCache.evictions }] : [],
    ),
    metric(
      'csa2_engine_document_arena_bytes',
      'The memory loaded documents are written into: used (documents now) or touched (the most ever used, resident)',
      'gauge',
      (s) => {
        const a = s.documentCache?.arena;
        return a != null
          ? [
              { labels: { state: 'used' }, value: a.usedBytes },
              { labels: { state: 'touched' }, value: a.touchedBytes },
            ]
          : [];
      },
      ['state'],
    ),
    metric('csa2_engine_document_tail_bytes', "Bytes of the loaded documents' stored encoder tails (held within the document cache's bytes)", 'gauge', (s) =>
      s.documentCache?.tailBytes !== undefined ? [{ value: s.documentCache.tailBytes }] : [],
    ),
    metric(
      'csa2_engine_document_tail_total',
      'Encoder tails of loaded documents: stored (computed by the first question that needed one), loaded (read from the artifact, stored by its ingest), rejected (a stored one missing or failing its checks: computed instead), used (a question encoded only its own tokens)',
      'counter',
      (s) =>
        s.documentCache?.tailHits !== undefined && s.documentCache.tailsStored !== undefined
          ? [
              { labels: { result: 'stored' }, value: s.documentCache.tailsStored },
              ...(s.documentCache.tailsLoaded !== undefined ? [{ labels: { result: 'loaded' }, value: s.documentCache.tailsLoaded }] : []),
              ...(s.documentCache.tailsRejected !== undefined ? [{ labels: { result: 'rejected' }, value: s.documentCache.tailsRejected }] : []),
              { labels: { result: 'used' }, value: s.documentCache.tailHits },
            ]
          : [],
      ['result'],
    ),
    metric('csa2_engine_scan_threads', 'Scan threads the index scans use; 0 once one failed (the scans then run on the main thread)', 'gauge', (s) =>
      s.scanThreads != null ? [{ value: s.scanThreads.usable ? s.scanThreads.count : 0 }] : [],
    ),
    metric(
      'csa2_engine_scan_thread_tasks_total',
      'Scans shared with a scan thread: done, declined (queries the kernel does not take), failed',
      'counter',
      (s) =>
        s.scanThreads != null
          ? [
              { labels: { result: 'done' }, value: s.scanThreads.tasks },
              { labels: { result: 'declined' }, value: s.scanThreads.declined },
              { labels: { result: 'failed' }, value: s.scanThreads.failed },
            ]
          : [],
      ['result'],
    ),
  ];
  for (const m of metrics) registry.registerMetric(m as unknown as Parameters<Registry['registerMetric']>[0]);
}
