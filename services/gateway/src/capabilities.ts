/**
 * @module capabilities
 * What the gateway's modules are given, as types only: the whole set (`GatewayDeps`, which the
 * composition root builds, composition-root.ts) and the parts of it each module declares it takes
 * (`Pick<GatewayDeps, 'queues' | 'store' | …>`, named where the module is: `GenerationDeps`,
 * `DocumentDeps`, …). A function asks for the capabilities it uses and no more, so a test can build
 * just those, and this module imports nothing but types of leaf modules: no import cycle runs
 * through it.
 */
import type { Logger } from 'pino';
import type { Tokenizer } from '@csa2/core';
import type { ObjectStore } from '@csa2/artifacts';
import type { BacklogCollector, DecodeJob, DecodeResult, PrefillJob, PrefillResult, Queue, Redis } from '@csa2/jobs';
import type { Cancellations } from './cancellations.js';
import type { KeyLimits } from './key-limits-config.js';
import type { KeyLimiter } from './key-limiter.js';
import type { ByteBudget } from './middleware/body-budget.js';
import type { OffThreadTokenizer } from './tokenize-pool.js';
import type { GatewayConfig, GatewayLimits } from './config.js';
import type { Inflight } from './inflight.js';
import type { GatewayMetrics } from './metrics.js';
import type { ObserveOnce } from './observe-once.js';
import type { ReaderPool } from './reader-pool.js';
import type { BatchRunJob } from './batch/batch-queue.js';
import type { BatchStore } from './batch/batch-store.js';

/** The request queues: PrefillJobs for the encoders, DecodeJobs for the decoders. */
export interface GatewayQueues {
  readonly prefill: Queue<PrefillJob, PrefillResult>;
  readonly decode: Queue<DecodeJob, DecodeResult>;
}

export interface ServedModel {
  /** The name clients send as `model`. */
  readonly name: string;
  /** Unix seconds the gateway started (the `created` of /v1/models). */
  readonly createdS: number;
  /** Rows of the model's vocabulary: token ids must be below it. */
  readonly vocabSize: number;
}

/** Everything the gateway is built from: the app (app.ts) and the batch drivers take it whole, other modules a part. */
export interface GatewayDeps {
  readonly config: GatewayConfig;
  readonly limits: GatewayLimits;
  readonly model: ServedModel;
  readonly tokenizer: Tokenizer;
  /** The same tokenizer, off the event loop for long texts. */
  readonly tokenize: OffThreadTokenizer;
  /** Commands (fails fast when Redis is down). */
  readonly redis: Redis;
  readonly readers: ReaderPool;
  readonly queues: GatewayQueues;
  readonly store: ObjectStore;
  /** API key → tenant. */
  readonly apiKeys: ReadonlyMap<string, string>;
  readonly metrics: GatewayMetrics;
  readonly logger: Logger;
  readonly inflight: Inflight;
  /** Per-key limits (requests and tokens per minute, concurrency, queued documents), shared in Redis. */
  readonly keyLimiter: KeyLimiter;
  /** The limits and fair-share weight of a key (by keyId); unknown ids get the defaults. */
  readonly keyLimits: (keyId: string) => KeyLimits;
  /** Bytes of request bodies being read and tokenized at once (CSA2_MAX_INFLIGHT_BODY_BYTES). */
  readonly bodyBudget: ByteBudget;
  /** The lane of bodies up to CSA2_SMALL_BODY_BYTES (SMALL_BODY_LANE_BODIES of them at once); null: none. */
  readonly smallBodyBudget: ByteBudget | null;
  /** Sets cancel keys, retrying while Redis refuses them. */
  readonly cancellations: Cancellations;
  readonly once: ObserveOnce;
  /** The queues' backlog for autoscaling (csa2_queue_backlog_*, csa2_prefill_*_tokens on /metrics). */
  readonly backlog: BacklogCollector;
  /** Batch records (Redis) and the queue of their driver jobs (batch/). */
  readonly batches: { readonly store: BatchStore; readonly queue: Queue<BatchRunJob> };
  /** Keys that see every tenant on the status page (CSA2_OPERATOR_KEYS, or one generated at start). */
  readonly operatorKeys: ReadonlySet<string>;
}
