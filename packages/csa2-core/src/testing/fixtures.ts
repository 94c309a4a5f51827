/**
 * @module testing/fixtures
 * Locates the fixtures made with the official reference: `$CSA2_FIXTURES_DIR` when set, else the
 * repository's own `fixtures/` folder (each fixture there documents its provenance in a README).
 * Every directory there with both a golden.safetensors and a model.safetensors is a parity fixture:
 * `fixtures/deepseek-v41-tiny-a`. `fixtures/v41-mini-128k-official` holds only golden outputs for the
 * served checkpoint under `models/` and is read by its own test, not listed by goldenFixtures().
 */
import { existsSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export function fixturesRoot(): string {
  const env = process.env['CSA2_FIXTURES_DIR'];
  if (env !== undefined && env !== '') return resolve(env);
  // dist/testing -> dist -> packages/csa2-core -> packages -> repo root
  return resolve(fileURLToPath(new URL('../../../../fixtures', import.meta.url)));
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
