/**
 * @module worker-metrics
 * The Prometheus metrics of an engine worker (served on /metrics by worker-http), on a registry of
 * its own whose every series carries `service` (encoder-worker | decoder-worker):
 *
 * | metric | type | labels | observed |
 * |---|---|---|---|
 * | csa2_worker_jobs_total | counter | queue, outcome | each processor run that ended: completed, failed (retried or final), handed_back (shutdown) |
 * | csa2_worker_job_duration_seconds | histogram | queue, outcome | processor start → end of that run |
 * | csa2_worker_active_jobs | gauge | queue | processor runs in progress |
 * | csa2_worker_engine_starts | gauge | – | engine (re)starts of this process: 1 after start, +1 per restart after its thread died |
 * | csa2_worker_process_* / csa2_worker_nodejs_* | – | – | prom-client's default process metrics |
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export type JobOutcome = 'completed' | 'failed' | 'handed_back';

export interface WorkerMetrics {
  readonly registry: Registry;
  readonly jobs: Counter<'queue' | 'outcome'>;
  readonly jobDuration: Histogram<'queue' | 'outcome'>;
  readonly activeJobs: Gauge<'queue'>;
}

export interface WorkerMetricsOptions {
  /** The `service` label of every series. */
  readonly service: string;
  /** Engine starts so far (read at scrape). */
  readonly engineStarts: () => number;
  /** Collect prom-client's process metrics. @defaultValue true */
  readonly defaultMetrics?: boolean;
}

export function createWorkerMetrics(options: WorkerMetricsOptions): WorkerMetrics {
  const registry = new Registry();
  registry.setDefaultLabels({ service: options.service });
  if (options.defaultMetrics !== false) collectDefaultMetrics({ register: registry, prefix: 'csa2_worker_' });
  new Gauge({
    name: 'csa2_worker_engine_starts',
    help: 'Engine (re)starts of this worker process: 1 after start, +1 per restart after the engine thread died',
    registers: [registry],
    collect() {
      this.set(options.engineStarts());
    },
  });
  return {
    registry,
    jobs: new Counter({
      name: 'csa2_worker_jobs_total',
      help: 'Job runs (attempts) this worker ended, by outcome: completed, failed (retried or final), handed_back (shutdown)',
      labelNames: ['queue', 'outcome'] as const,
      registers: [registry],
    }),
    jobDuration: new Histogram({
      name: 'csa2_worker_job_duration_seconds',
      help: 'Time a job run took in this worker, from the processor start to its end',
      labelNames: ['queue', 'outcome'] as const,
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800],
      registers: [registry],
    }),
    activeJobs: new Gauge({
      name: 'csa2_worker_active_jobs',
      help: 'Jobs this worker is running now',
      labelNames: ['queue'] as const,
      registers: [registry],
    }),
  };
}
