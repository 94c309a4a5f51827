/**
 * @module @csa2/test
 * Cross-process test support, also used by the pipeline benchmark: the whole pipeline as real
 * processes (harness/pipeline).
 */
export { Pipeline, seededTestModel, API_KEY, OTHER_API_KEY, REPO_ROOT, type ServiceName } from './harness/pipeline.js';
