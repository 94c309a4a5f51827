/**
 * @module checkpoint-cache
 * Seeded random checkpoints for bench configs, made once with csa2-core's `initModel` and reused:
 *
 * ```
 * <cacheRoot>/<config name>-seed<S>-<hash>/config.json          written by initModel
 * <cacheRoot>/<config name>-seed<S>-<hash>/model.safetensors    written by initModel
 * <cacheRoot>/<config name>-seed<S>-<hash>/bench-stamp.json     written last: the directory is complete
 * ```
 *
 * The hash covers the config's canonical JSON, the seed and a recipe version, so editing the config
 * (or the seed) makes a new checkpoint instead of silently reusing an old one. A directory without a
 * matching stamp (an interrupted run) is deleted and made again.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, rm, stat, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { initModel } from '@csa2/core';

/** Bump when what initModel writes for the same config and seed changes. */
const RECIPE_VERSION = 'initModel-v1';
const STAMP_FILE = 'bench-stamp.json';

export interface SeededCheckpoint {
  readonly dir: string;
  readonly hash: string;
  /** True when this call wrote the checkpoint. */
  readonly created: boolean;
  /** Time initModel took (this call), 0 when reused. */
  readonly createMs: number;
  readonly parameterCount: number;
  /** Size of model.safetensors. */
  readonly bytes: number;
}

interface Stamp {
  readonly hash: string;
  readonly seed: number;
  readonly parameterCount: number;
  readonly bytes: number;
}

/** JSON with object keys sorted at every level, so equal configs hash equally. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

export function checkpointHash(configJson: unknown, seed: number): string {
  return createHash('sha256')
    .update(`${RECIPE_VERSION}\n${seed}\n${canonicalJson(configJson)}`)
    .digest('hex')
    .slice(0, 16);
}

async function readStamp(dir: string): Promise<Stamp | null> {
  try {
    const s = JSON.parse(await readFile(join(dir, STAMP_FILE), 'utf8')) as Partial<Stamp>;
    if (typeof s.hash !== 'string' || typeof s.bytes !== 'number' || typeof s.parameterCount !== 'number' || typeof s.seed !== 'number') return null;
    return s as Stamp;
  } catch {
    return null;
  }
}

/**
 * Returns the cached checkpoint of `configPath` (ModelArgs JSON) for `seed` under `cacheRoot`, making it
 * first when it is missing or incomplete. `log` receives one line before and after a (slow) creation.
 */
export async function ensureSeededCheckpoint(
  configPath: string,
  opts: { readonly seed: number; readonly cacheRoot: string; readonly log?: (line: string) => void },
): Promise<SeededCheckpoint> {
  const configJson: unknown = JSON.parse(await readFile(configPath, 'utf8'));
  const hash = checkpointHash(configJson, opts.seed);
  const dir = join(opts.cacheRoot, `${basename(configPath, '.json')}-seed${opts.seed}-${hash}`);
  const stamp = await readStamp(dir);
  if (stamp !== null && stamp.hash === hash && existsSync(join(dir, 'config.json'))) {
    const size = await stat(join(dir, 'model.safetensors')).then(
      (s) => s.size,
      () => -1,
    );
    if (size === stamp.bytes) return { dir, hash, created: false, createMs: 0, parameterCount: stamp.parameterCount, bytes: stamp.bytes };
  }
  await rm(dir, { recursive: true, force: true });
  opts.log?.(`making seeded checkpoint ${dir} (one time; ~1 min per 10^9 parameters here)`);
  const t0 = performance.now();
  const info = await initModel(configJson, { seed: opts.seed, outDir: dir });
  const createMs = performance.now() - t0;
  const written: Stamp = { hash, seed: opts.seed, parameterCount: info.parameterCount, bytes: info.bytes };
  await writeFile(join(dir, STAMP_FILE), `${JSON.stringify(written, null, 2)}\n`);
  opts.log?.(`made ${info.parameterCount.toLocaleString('en-US')} parameters (${(info.bytes / 1e9).toFixed(2)} GB) in ${(createMs / 1000).toFixed(1)} s`);
  return { dir, hash, created: true, createMs, parameterCount: info.parameterCount, bytes: info.bytes };
}
