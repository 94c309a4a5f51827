/**
 * @module @csa2/test
 * Cross-process test support, also used by the pipeline benchmark: the whole pipeline as real
 * processes (harness/pipeline).
 */
export { Pipeline, seededTestModel, API_KEY, OTHER_API_KEY, REPO_ROOT, type ServiceName } from './harness/pipeline.js';
/** The worker processes' glibc allocator settings (@csa2/jobs malloc-env), for the benchmarks' child processes. */
export { WORKER_MALLOC_ENV } from '@csa2/jobs';
/** A Redis client for the pipeline's private redis-server (the fault benches read streams and queues). */
export { connectRedis } from '@csa2/jobs';
