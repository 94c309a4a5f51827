/**
 * @module @csa2/jobs
 * The contracts between the gateway and the workers: queue and key names, job payloads with their
 * parsers, and the token stream format; and what the two engine workers share: their common settings
 * (worker-config), the worker and process scaffolding (worker-runtime) and the failure policy of
 * their processors (job-failure).
 */
export * from './queues.js';
export * from './payloads.js';
export * from './stream.js';
export * from './redis.js';
export * from './job-options.js';
export * from './stream-writer.js';
export * from './restartable.js';
export * from './env-config.js';
export * from './bullmq-reexports.js';
export * from './log-line.js';
export * from './backlog.js';
export * from './worker-config.js';
export * from './engine-metrics.js';
export * from './worker-runtime.js';
export * from './job-failure.js';
export * from './worker-http.js';
export * from './worker-metrics.js';
export * from './cancel-watch.js';
export * from './fair-priority.js';
export * from './malloc-env.js';
