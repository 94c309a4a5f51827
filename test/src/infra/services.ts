/**
 * @module infra/services
 * What the infra tests need to know about the services, read from the services themselves: their
 * config loaders (compiled, in services/<name>/dist/config.js, built by the root `tsc -b` before the
 * tests run) and the environment variables their config.ts files read.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root (this file runs from test/dist/infra/). */
export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));

export type ServiceName = 'gateway' | 'encoder-worker' | 'decoder-worker';
export const SERVICES: readonly ServiceName[] = ['gateway', 'encoder-worker', 'decoder-worker'];

const LOADER_EXPORT: Readonly<Record<ServiceName, string>> = {
  gateway: 'loadGatewayConfig',
  'encoder-worker': 'loadEncoderConfig',
  'decoder-worker': 'loadDecoderConfig',
};

type Env = Readonly<Record<string, string | undefined>>;

/**
 * Runs the service's own config loader on `env`: resolves to its config, or rejects with its
 * EnvConfigError naming the variable.
 */
export async function loadServiceConfig(service: ServiceName, env: Env): Promise<unknown> {
  const url = new URL(`services/${service}/dist/config.js`, `file://${REPO_ROOT}`);
  const mod = (await import(url.href)) as Record<string, unknown>;
  const load = mod[LOADER_EXPORT[service]];
  if (typeof load !== 'function') throw new Error(`${url.pathname} does not export ${LOADER_EXPORT[service]}`);
  return (load as (e: Env) => unknown)(env);
}

/** Config files of a service: src/config.ts and any src/<dir>/<name>-config.ts it delegates to. */
function configSources(service: ServiceName): string {
  const src = join(REPO_ROOT, 'services', service, 'src');
  const files = [join(src, 'config.ts')];
  for (const dir of readdirSync(src, { withFileTypes: true })) {
    if (!dir.isDirectory()) continue;
    for (const f of readdirSync(join(src, dir.name))) if (f.endsWith('-config.ts')) files.push(join(src, dir.name, f));
  }
  return files.map((f) => readFileSync(f, 'utf8')).join('\n');
}

/** The environment variables a service's config files read (`env*(env, 'NAME'…)`, `envRedisUrl(env)`). */
export function serviceEnvVariables(service: ServiceName): string[] {
  const source = configSources(service);
  const names = new Set<string>();
  for (const m of source.matchAll(/\benv[A-Za-z]*\(\s*env\s*,\s*'([A-Z][A-Z0-9_]*)'/g)) names.add(m[1] as string);
  for (const m of source.matchAll(/\benvRedisUrl\(\s*env\s*(?:,\s*'([A-Z][A-Z0-9_]*)')?\s*\)/g)) names.add(m[1] ?? 'REDIS_URL');
  // the engine scheduler's variables, read for both engine workers by @csa2/jobs envEngineScheduler
  if (/\benvEngineScheduler\(\s*env\s*\)/.test(source)) {
    const shared = readFileSync(join(REPO_ROOT, 'packages', 'csa2-jobs', 'src', 'worker-config.ts'), 'utf8');
    const body = shared.slice(shared.indexOf('export function envEngineScheduler'));
    for (const m of body.slice(0, body.indexOf('\n}\n')).matchAll(/\benv[A-Za-z]*\(\s*env\s*,\s*'([A-Z][A-Z0-9_]*)'/g)) names.add(m[1] as string);
  }
  return [...names].sort();
}
