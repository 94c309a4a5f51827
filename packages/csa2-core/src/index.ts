/**
 * @module @csa2/core
 * The public surface of csa2-core: the DeepSeek-V4.1 (CSA2) model, its config, weights, numerics and
 * cache formats. Services import from here only.
 */
export * from './errors.js';
