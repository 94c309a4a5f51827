/**
 * @module model/load-model
 * Opens a checkpoint directory (config.json + safetensors) and builds the model's graphs.
 */
import { loadCheckpoint } from '../weights/checkpoint.js';
import { Csa2Model, type ModelOptions } from './model.js';

export async function loadModel(dir: string, options: Partial<ModelOptions> = {}): Promise<Csa2Model> {
  const ckpt = await loadCheckpoint(dir);
  try {
    return await Csa2Model.create(ckpt.config, ckpt.plan, { get: (name) => ckpt.tensor(name).data }, options);
  } finally {
    ckpt.close();
  }
}
