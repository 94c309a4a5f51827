/**
 * @module metrics
 * The gateway's Prometheus metrics, on a registry of their own (one per app, so tests can build
 * several). Latencies are observed while relaying token streams; queue gauges are read from Redis
 * at scrape time.
 *
 * | metric | type | labels | observed |
 * |---|---|---|---|
 * | csa2_time_to_first_token_seconds | histogram | endpoint, route | request accepted → first token entry read |
 * | csa2_inter_token_latency_seconds | histogram | endpoint | between consecutive token entries as relayed |
 * | csa2_e2e_request_latency_seconds | histogram | endpoint, route, outcome | request accepted → its stream ended (or it failed) |
 * | csa2_queue_wait_seconds | histogram | queue | a job's processedOn − timestamp, once per job (see below) |
 * | csa2_prefill_tokens_total | counter | kind | tokens sent to encoder workers (documents, long prompts), at enqueue |
 * | csa2_artifact_bytes_total | counter | kind | bytes of artifacts the encoders produced, once per artifact |
 * | csa2_cached_tokens_total | counter | endpoint | usage.prompt_tokens_details.cached_tokens of finished requests |
 * | csa2_prompt_tokens_total / csa2_completion_tokens_total | counter | endpoint | usage of finished requests |
 * | csa2_queue_jobs | gauge | queue, state | BullMQ job counts per state, read at scrape (wait, prioritized, delayed, active, waiting-children, completed, failed) |
 * | csa2_http_requests_total | counter | method, route, status | every HTTP request (status 499: the client closed the connection before its answer) |
 * | csa2_http_client_aborts_total | counter | route | requests whose client closed the connection before its answer (mid-body, mid-wait) |
 *
 * `route` of a completion is `decode` (short prompt, straight to a decoder), `prefill` (long prompt
 * through an encoder) or `document` (a stored document's artifact). Queue wait is observed by the
 * gateway that relays the request (request jobs: when its stream shows the first entry), and for
 * document jobs by the first status read that finds the job started, deduplicated across gateway
 * replicas with a Redis flag.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export type Endpoint = 'completions' | 'chat';
export type GenerationRoute = 'decode' | 'prefill' | 'document';
export type QueueLabel = 'prefill' | 'decode';

export interface GatewayMetrics {
  readonly registry: Registry;
  readonly timeToFirstToken: Histogram<'endpoint' | 'route'>;
  readonly interTokenLatency: Histogram<'endpoint'>;
  readonly e2eLatency: Histogram<'endpoint' | 'route' | 'outcome'>;
  readonly queueWait: Histogram<'queue'>;
  readonly prefillTokens: Counter<'kind'>;
  readonly artifactBytes: Counter<'kind'>;
  readonly cachedTokens: Counter<'endpoint'>;
  readonly promptTokens: Counter<'endpoint'>;
  readonly completionTokens: Counter<'endpoint'>;
  readonly queueJobs: Gauge<'queue' | 'state'>;
  readonly httpRequests: Counter<'method' | 'route' | 'status'>;
  readonly clientAborts: Counter<'route'>;
}

export interface QueueCountsSource {
  /** Job counts per state for one queue (throws or times out when Redis is down). */
  readonly read: () => Promise<Readonly<Record<string, number>>>;
  readonly queue: QueueLabel;
}

/**
 * Creates the metrics on a new registry. `queueCounts` are read at each scrape; a failed read drops
 * the queue gauges from that scrape (absent, rather than stale).
 */
export function createGatewayMetrics(options: { queueCounts?: readonly QueueCountsSource[]; defaultMetrics?: boolean } = {}): GatewayMetrics {
  const registry = new Registry();
  if (options.defaultMetrics === true) collectDefaultMetrics({ register: registry, prefix: 'csa2_gateway_' });
  const sources = options.queueCounts ?? [];
  const queueJobs = new Gauge({
    name: 'csa2_queue_jobs',
    help: 'BullMQ jobs per queue and state, read from Redis at scrape time',
    labelNames: ['queue', 'state'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      await Promise.all(
        sources.map(async (s) => {
          try {
            const counts = await s.read();
            for (const [state, n] of Object.entries(counts)) this.set({ queue: s.queue, state }, n);
          } catch {
            // Redis down: the gauges are absent from this scrape; /readyz says why.
          }
        }),
      );
    },
  });
  return {
    registry,
    timeToFirstToken: new Histogram({
      name: 'csa2_time_to_first_token_seconds',
      help: 'Request accepted by the gateway to the first token relayed',
      labelNames: ['endpoint', 'route'] as const,
      buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300],
      registers: [registry],
    }),
    interTokenLatency: new Histogram({
      name: 'csa2_inter_token_latency_seconds',
      help: 'Time between consecutive tokens as relayed to the client',
      labelNames: ['endpoint'] as const,
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers: [registry],
    }),
    e2eLatency: new Histogram({
      name: 'csa2_e2e_request_latency_seconds',
      help: 'Request accepted by the gateway to its stream ending (final or error entry, timeout, cancellation)',
      labelNames: ['endpoint', 'route', 'outcome'] as const,
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600],
      registers: [registry],
    }),
    queueWait: new Histogram({
      name: 'csa2_queue_wait_seconds',
      help: 'Time a job waited in its queue (BullMQ processedOn - timestamp of its attempt that started)',
      labelNames: ['queue'] as const,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600],
      registers: [registry],
    }),
    prefillTokens: new Counter({
      name: 'csa2_prefill_tokens_total',
      help: 'Tokens sent to encoder workers for prefill (kind: document | prompt)',
      labelNames: ['kind'] as const,
      registers: [registry],
    }),
    artifactBytes: new Counter({
      name: 'csa2_artifact_bytes_total',
      help: 'Bytes of cache artifacts produced by encoder workers (kind: document | prompt)',
      labelNames: ['kind'] as const,
      registers: [registry],
    }),
    cachedTokens: new Counter({
      name: 'csa2_cached_tokens_total',
      help: 'Prompt tokens served from stored artifacts (usage.prompt_tokens_details.cached_tokens)',
      labelNames: ['endpoint'] as const,
      registers: [registry],
    }),
    promptTokens: new Counter({
      name: 'csa2_prompt_tokens_total',
      help: 'Prompt tokens of finished requests (usage.prompt_tokens)',
      labelNames: ['endpoint'] as const,
      registers: [registry],
    }),
    completionTokens: new Counter({
      name: 'csa2_completion_tokens_total',
      help: 'Generated tokens of finished requests (usage.completion_tokens)',
      labelNames: ['endpoint'] as const,
      registers: [registry],
    }),
    queueJobs,
    httpRequests: new Counter({
      name: 'csa2_http_requests_total',
      help: 'HTTP requests by method, matched route and status',
      labelNames: ['method', 'route', 'status'] as const,
      registers: [registry],
    }),
    clientAborts: new Counter({
      name: 'csa2_http_client_aborts_total',
      help: 'Requests whose client closed the connection before its answer (counted with status 499 in csa2_http_requests_total)',
      labelNames: ['route'] as const,
      registers: [registry],
    }),
  };
}
