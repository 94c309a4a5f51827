/**
 * @module testing
 * Test support for this package and the others (`@csa2/core/testing`): where the fixtures are, a plain
 * greedy loop over one sequence, sequences filled with synthetic cache rows, seeded random checkpoints.
 * Nothing here is part of the model's public API (`@csa2/core`).
 */
export { fixturesRoot, goldenFixtures } from './fixtures.js';
export { runGreedy, type GreedyRun } from './greedy.js';
export { fillSyntheticCache } from './synthetic-cache.js';
export { bundledConfig, withSeededCheckpoint } from './seeded-model.js';
