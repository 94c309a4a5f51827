/**
 * @module composition-root
 * `connectGatewayDeps`: the one place the gateway's capabilities (capabilities.ts) are made, from a
 * config: the model's config and tokenizer, the Redis connection (commands fail fast when Redis is
 * down: no offline queue, one attempt, a command timeout), the two BullMQ queues on it, the pool of
 * blocking stream readers, the object store, API keys and metrics. Tests use the same function.
 */
import { join } from 'node:path';
import type { Logger } from 'pino';
import { loadTokenizer, readModelConfigFile } from '@csa2/core';
import { openStore, type ObjectStore } from '@csa2/artifacts';
import {
  DECODE_QUEUE,
  PREFILL_QUEUE,
  Queue,
  connectRedis,
  createBacklogCollector,
  createServiceLogger,
  type DecodeJob,
  type DecodeResult,
  type PrefillJob,
  type PrefillResult,
} from '@csa2/jobs';
import type { GatewayDeps, GatewayQueues } from './capabilities.js';
import { Cancellations } from './cancellations.js';
import { resolveKeyLimits } from './key-limits-config.js';
import { KeyLimiter, keyIdOf } from './key-limiter.js';
import { ByteBudget, SMALL_BODY_LANE_BODIES } from './middleware/body-budget.js';
import { OffThreadTokenizer } from './tokenize-pool.js';
import { DEFAULT_TENANT, generateApiKey, resolveLimits, type GatewayConfig } from './config.js';
import { withTimeout } from './errors.js';
import { Inflight } from './inflight.js';
import { createGatewayMetrics } from './metrics.js';
import { ObserveOnce } from './observe-once.js';
import { ReaderPool } from './reader-pool.js';
import { createBatchQueue } from './batch/batch-queue.js';
import { BatchStore } from './batch/batch-store.js';

/** Job states read for the csa2_queue_jobs gauge (BullMQ names). */
export const GAUGE_STATES = ['wait', 'prioritized', 'delayed', 'active', 'waiting-children', 'completed', 'failed'] as const;

export interface ConnectOptions {
  readonly logger?: Logger;
  /** Use this store instead of opening CSA2_STORE_URL (tests). */
  readonly store?: ObjectStore;
  /** Collect Node process metrics (csa2_gateway_process_*). @defaultValue false */
  readonly defaultMetrics?: boolean;
  /** How long to wait for the first Redis connection before going on unready. @defaultValue 5000 */
  readonly redisReadyWaitMs?: number;
}

export interface ConnectedDeps {
  readonly deps: GatewayDeps;
  /** The generated key when CSA2_API_KEYS is unset, else null. */
  readonly generatedApiKey: string | null;
  /** The generated operator key when CSA2_OPERATOR_KEYS is unset, else null. */
  readonly generatedOperatorKey: string | null;
  /** Closes the queues, readers, Redis and the store. */
  close(): Promise<void>;
}

/** Builds every dependency from the config. Throws (config, model, tokenizer, store URL) before connecting anything that needs closing. */
export async function connectGatewayDeps(config: GatewayConfig, options: ConnectOptions = {}): Promise<ConnectedDeps> {
  // the workers' format and log context (@csa2/jobs log-line): each request's lines carry its reqId
  const logger = options.logger ?? createServiceLogger('gateway', config.logLevel);
  const modelConfig = await readModelConfigFile(join(config.modelDir, 'config.json'));
  const tokenizer = await loadTokenizer({ modelDir: config.modelDir, vocabSize: modelConfig.vocabSize });
  const limits = resolveLimits(config, modelConfig);
  const store = options.store ?? openStore(config.storeUrl);

  let generatedApiKey: string | null = null;
  let apiKeys = config.apiKeys;
  if (apiKeys === null) {
    generatedApiKey = generateApiKey();
    apiKeys = new Map([[generatedApiKey, DEFAULT_TENANT]]);
  }

  const defaultLimits = resolveKeyLimits(undefined, config.defaultKeyLimits);
  const limitsById = new Map([...apiKeys.keys()].map((key) => [keyIdOf(key), resolveKeyLimits(config.apiKeyLimits.get(key), config.defaultKeyLimits)]));
  const redis = connectRedis(config.redisUrl, {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: config.redisCommandTimeoutMs,
    connectionName: 'csa2-gateway',
    retryStrategy: (times: number) => Math.min(100 * times, 1000),
  });
  let lastRedisError = '';
  redis.on('error', (err: Error) => {
    if (err.message !== lastRedisError) logger.warn({ err: err.message }, 'redis connection error');
    lastRedisError = err.message;
  });
  redis.on('ready', () => {
    if (lastRedisError !== '') logger.info('redis connection ready');
    lastRedisError = '';
  });
  await withTimeout(
    new Promise<void>((resolve) => (redis.status === 'ready' ? resolve() : redis.once('ready', () => resolve()))),
    options.redisReadyWaitMs ?? 5000,
    () => new Error('redis not ready'),
  ).catch(() => logger.warn({ redisUrl: redactUrl(config.redisUrl) }, 'redis is not reachable yet; /readyz reports 503 until it is'));

  const queues: GatewayQueues = {
    prefill: new Queue<PrefillJob, PrefillResult>(PREFILL_QUEUE, { connection: redis }),
    decode: new Queue<DecodeJob, DecodeResult>(DECODE_QUEUE, { connection: redis }),
  };
  for (const q of [queues.prefill, queues.decode]) q.on('error', () => undefined); // the connection's own listener logs
  const batchQueue = createBatchQueue(redis);
  let generatedOperatorKey: string | null = null;
  let operatorKeys = config.operatorKeys;
  if (operatorKeys === null) {
    generatedOperatorKey = `sk-csa2-op-${generateApiKey().slice('sk-csa2-'.length)}`;
    operatorKeys = new Set([generatedOperatorKey]);
  }
  const readers = new ReaderPool(redis, { commandTimeoutMs: config.redisCommandTimeoutMs });
  const metrics = createGatewayMetrics({
    defaultMetrics: options.defaultMetrics ?? false,
    queueCounts: (['prefill', 'decode'] as const).map((label) => ({
      queue: label,
      read: () =>
        withTimeout(queues[label].getJobCounts(...GAUGE_STATES), config.readyTimeoutMs, () => new Error('queue counts timed out')) as Promise<
          Record<string, number>
        >,
    })),
  });

  const deps: GatewayDeps = {
    config,
    limits,
    model: { name: config.modelName, createdS: Math.floor(Date.now() / 1000), vocabSize: modelConfig.vocabSize },
    tokenizer,
    tokenize: new OffThreadTokenizer(tokenizer, { modelDir: config.modelDir, vocabSize: modelConfig.vocabSize }),
    redis,
    readers,
    queues,
    store,
    apiKeys,
    metrics,
    logger,
    inflight: new Inflight(),
    keyLimiter: new KeyLimiter(redis, { leaseMs: config.requestTimeoutMs + 60_000 }),
    keyLimits: (keyId) => limitsById.get(keyId) ?? defaultLimits,
    bodyBudget: new ByteBudget(limits.maxInflightBodyBytes),
    smallBodyBudget: limits.smallBodyBytes > 0 ? new ByteBudget(SMALL_BODY_LANE_BODIES * limits.smallBodyBytes) : null,
    cancellations: new Cancellations(redis, logger),
    once: new ObserveOnce(redis),
    backlog: createBacklogCollector(redis),
    batches: { store: new BatchStore(redis), queue: batchQueue },
    operatorKeys,
  };
  return {
    deps,
    generatedApiKey,
    generatedOperatorKey,
    async close() {
      await deps.cancellations.close();
      readers.close();
      await Promise.allSettled([queues.prefill.close(), queues.decode.close(), batchQueue.close()]);
      redis.disconnect();
      await store.close();
      await deps.tokenize.close();
    },
  };
}

/** A Redis URL without its password, for logs. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password !== '') u.password = '***';
    return u.toString();
  } catch {
    return '(unparseable url)';
  }
}
