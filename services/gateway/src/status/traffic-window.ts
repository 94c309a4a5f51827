/**
 * @module status/traffic-window
 * Recent throughput and latency of this gateway, from its own Prometheus metrics: snapshots of the
 * counters and histogram buckets are kept for `windowMs` (one every `sampleMs`, started on first
 * use); a summary is the difference between now and the oldest snapshot in the window, so it shows
 * the last few minutes rather than everything since start. Quantiles are interpolated within the
 * histogram buckets (as Prometheus' histogram_quantile does).
 */
import type { Counter, Histogram } from 'prom-client';
import type { GatewayMetrics } from '../metrics.js';

interface HistogramSnapshot {
  /** Cumulative counts by upper bound (+Inf last), summed over every label set. */
  readonly buckets: readonly (readonly [number, number])[];
  readonly count: number;
}

interface Snapshot {
  readonly atMs: number;
  readonly ttft: HistogramSnapshot;
  readonly e2e: HistogramSnapshot;
  readonly interToken: HistogramSnapshot;
  readonly promptTokens: number;
  readonly completionTokens: number;
}

export interface LatencySummary {
  readonly count: number;
  /** Seconds; null without observations in the window. */
  readonly p50S: number | null;
  readonly p95S: number | null;
}

export interface TrafficSummary {
  /** How much time the figures cover (the window, or less just after start). */
  readonly spanS: number;
  readonly requests: number;
  readonly promptTokensPerS: number;
  readonly completionTokensPerS: number;
  readonly ttft: LatencySummary;
  readonly e2e: LatencySummary;
  readonly interToken: LatencySummary;
}

async function histogram(h: Histogram<string>): Promise<HistogramSnapshot> {
  const byLe = new Map<number, number>();
  let count = 0;
  for (const v of (await h.get()).values) {
    if (v.metricName?.endsWith('_bucket') === true) {
      const le = v.labels['le'];
      const bound = le === '+Inf' ? Infinity : Number(le);
      byLe.set(bound, (byLe.get(bound) ?? 0) + v.value);
    } else if (v.metricName?.endsWith('_count') === true) count += v.value;
  }
  return { buckets: [...byLe.entries()].sort((a, b) => a[0] - b[0]), count };
}

async function total(c: Counter<string>): Promise<number> {
  return (await c.get()).values.reduce((a, v) => a + v.value, 0);
}

/** The q-quantile of the observations between two snapshots of one histogram. */
export function quantileBetween(older: HistogramSnapshot | null, newer: HistogramSnapshot, q: number): number | null {
  const before = new Map(older?.buckets ?? []);
  const buckets = newer.buckets.map(([le, n]) => [le, n - (before.get(le) ?? 0)] as const);
  const n = buckets.at(-1)?.[1] ?? 0;
  if (n <= 0) return null;
  const rank = q * n;
  let prevLe = 0;
  let prevCount = 0;
  for (const [le, count] of buckets) {
    if (count >= rank) {
      if (le === Infinity) return prevLe; // beyond the last finite bucket: its bound is all we know
      const inBucket = count - prevCount;
      return inBucket <= 0 ? le : prevLe + ((le - prevLe) * (rank - prevCount)) / inBucket;
    }
    prevLe = le;
    prevCount = count;
  }
  return prevLe;
}

function latency(older: HistogramSnapshot | null, newer: HistogramSnapshot): LatencySummary {
  return { count: newer.count - (older?.count ?? 0), p50S: quantileBetween(older, newer, 0.5), p95S: quantileBetween(older, newer, 0.95) };
}

export class TrafficWindow {
  private readonly snapshots: Snapshot[] = [];
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly metrics: GatewayMetrics,
    private readonly options: {
      readonly windowMs: number;
      readonly sampleMs: number /** When the metrics started counting (the figures cover everything since, until the window has an older snapshot). */;
      readonly startedAtMs: number;
    },
  ) {}

  private async snapshot(): Promise<Snapshot> {
    const m = this.metrics;
    return {
      atMs: Date.now(),
      ttft: await histogram(m.timeToFirstToken),
      e2e: await histogram(m.e2eLatency),
      interToken: await histogram(m.interTokenLatency),
      promptTokens: await total(m.promptTokens),
      completionTokens: await total(m.completionTokens),
    };
  }

  private async sample(): Promise<void> {
    this.snapshots.push(await this.snapshot());
    const oldest = Date.now() - this.options.windowMs;
    while (this.snapshots.length > 1 && (this.snapshots[1]?.atMs ?? Infinity) <= oldest) this.snapshots.shift();
  }

  /** The figures of the window (sampling starts on the first call; until a snapshot is old enough, since start). */
  async summary(): Promise<TrafficSummary> {
    if (this.timer === null) {
      await this.sample();
      this.timer = setInterval(() => void this.sample().catch(() => undefined), this.options.sampleMs);
      this.timer.unref();
    }
    const now = await this.snapshot();
    const oldest = this.snapshots[0] ?? null;
    const base = oldest !== null && now.atMs - oldest.atMs >= this.options.sampleMs ? oldest : null;
    const spanS = Math.max(0.001, (now.atMs - (base?.atMs ?? this.options.startedAtMs)) / 1000);
    const perS = (a: number, b: number): number => (a - b) / spanS;
    return {
      spanS,
      requests: now.e2e.count - (base?.e2e.count ?? 0),
      promptTokensPerS: perS(now.promptTokens, base?.promptTokens ?? 0),
      completionTokensPerS: perS(now.completionTokens, base?.completionTokens ?? 0),
      ttft: latency(base?.ttft ?? null, now.ttft),
      e2e: latency(base?.e2e ?? null, now.e2e),
      interToken: latency(base?.interToken ?? null, now.interToken),
    };
  }

  close(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }
}
