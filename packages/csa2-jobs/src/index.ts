/**
 * @module @csa2/jobs
 * The contracts between the gateway and the workers: queue and key names, job payloads with their
 * parsers, and the token stream format.
 */
export * from './queues.js';
export * from './payloads.js';
export * from './stream.js';
export * from './redis.js';
