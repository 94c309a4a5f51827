/**
 * @module testing/fixtures
 * Locates the golden fixtures made with the official reference: `$CSA2_FIXTURES_DIR`, or
 * `<repo>/../shared/fixtures`. Every directory there with a golden.safetensors is a parity fixture.
 */
import { existsSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export function fixturesRoot(): string {
  const env = process.env['CSA2_FIXTURES_DIR'];
  if (env !== undefined && env !== '') return resolve(env);
  // dist/testing -> packages/csa2-core -> repo root -> ../shared/fixtures
  return resolve(fileURLToPath(new URL('../../../../../shared/fixtures', import.meta.url)));
}

/** Fixture directories holding a checkpoint and golden outputs; throws when there are none. */
export function goldenFixtures(): string[] {
  const root = fixturesRoot();
  if (!existsSync(root)) throw new Error(`fixtures not found at ${root}; set CSA2_FIXTURES_DIR`);
  const dirs = readdirSync(root)
    .map((d) => join(root, d))
    .filter((d) => existsSync(join(d, 'golden.safetensors')) && existsSync(join(d, 'model.safetensors')));
  if (dirs.length === 0) throw new Error(`no golden fixtures (golden.safetensors + model.safetensors) under ${root}`);
  return dirs.sort();
}
