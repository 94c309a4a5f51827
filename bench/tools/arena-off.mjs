/**
 * A preload (node --import) that opens every onnxruntime session without the CPU memory arena, as
 * csa2-core did before RuntimeOptions.attentionArena existed: for side-by-side runs of the same
 * build (bench/README.md, "Allocation"). A diagnostic, not used by the suites.
 *
 *   node --import ./bench/tools/arena-off.mjs node_modules/.bin/csa2 ingest ...
 */
import { createRequire } from 'node:module';

const ort = await import(createRequire(import.meta.resolve('@csa2/core')).resolve('onnxruntime-node'));
const create = ort.InferenceSession.create;
ort.InferenceSession.create = function createWithoutArena(model, options) {
  return create.call(this, model, { ...options, enableCpuMemArena: false });
};
