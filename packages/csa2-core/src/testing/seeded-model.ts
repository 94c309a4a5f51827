/**
 * @module testing/seeded-model
 * Seeded random checkpoints for tests: a config (a bundled one under configs/ with overrides), written
 * by initModel into a temporary directory, loaded, and removed again.
 */
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadCheckpoint, type Checkpoint } from '../weights/checkpoint.js';
import { initModel } from '../weights/init-model.js';

/** A config bundled with csa2-core (packages/csa2-core/configs/<name>.json) as ModelArgs JSON. */
export function bundledConfig(name: string): Record<string, unknown> {
  const path = fileURLToPath(new URL(`../../configs/${name}.json`, import.meta.url));
  return JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
}

/** Writes a seeded checkpoint of `configJson` to a temporary directory, loads it, runs `fn`, cleans up. */
export async function withSeededCheckpoint<T>(
  configJson: Record<string, unknown>,
  seed: number,
  fn: (ckpt: Checkpoint, dir: string) => Promise<T>,
): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), 'csa2-seeded-'));
  try {
    await initModel(configJson, { seed, outDir: dir });
    const ckpt = await loadCheckpoint(dir);
    try {
      return await fn(ckpt, dir);
    } finally {
      ckpt.close();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
