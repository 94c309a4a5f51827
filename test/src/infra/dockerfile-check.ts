/**
 * @module infra/dockerfile-check
 * Checks of infra/docker/Dockerfile that need no docker daemon: a Dockerfile linter
 * (dockerfile-utils) and the rules the images must keep, read from the parsed instructions
 * (dockerfile-ast). `dockerfileProblems(text)` returns every broken rule; empty = good.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { DockerfileParser } from 'dockerfile-ast';
import { validate } from 'dockerfile-utils';
import { WORKER_HTTP_PORTS } from '@csa2/jobs';
import { REPO_ROOT } from './services.js';

export interface Stage {
  readonly name: string;
  /** The image or stage it starts from. */
  readonly from: string;
  readonly instructions: readonly { readonly keyword: string; readonly args: string; readonly flags: Readonly<Record<string, string | null>> }[];
}

/** The stages in file order. */
export function parseStages(text: string): Stage[] {
  const stages: { name: string; from: string; instructions: Stage['instructions'][number][] }[] = [];
  for (const inst of DockerfileParser.parse(text).getInstructions()) {
    const keyword = inst.getKeyword().toUpperCase();
    const args = inst.getArgumentsContent() ?? '';
    const flags: Record<string, string | null> = {};
    if ('getFlags' in inst && typeof inst.getFlags === 'function') {
      for (const f of (inst as unknown as { getFlags(): { getName(): string; getValue(): string | null }[] }).getFlags()) flags[f.getName()] = f.getValue();
    }
    if (keyword === 'FROM') {
      const m = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(args.trim());
      stages.push({ name: m?.[2] ?? `#${stages.length}`, from: m?.[1] ?? '', instructions: [] });
    } else {
      stages.at(-1)?.instructions.push({ keyword, args, flags });
    }
  }
  return stages;
}

/** The targets users build (README, compose), and what each runs. */
export const TARGETS: Readonly<Record<string, { readonly service: string }>> = {
  gateway: { service: 'gateway' },
  'encoder-worker': { service: 'encoder-worker' },
  'decoder-worker': { service: 'decoder-worker' },
  'encoder-worker-gpu': { service: 'encoder-worker' },
};

/** The worker targets and the port their HTTP server listens on (WORKER_HTTP_PORTS of @csa2/jobs). */
export const WORKER_TARGET_PORTS: Readonly<Record<string, number>> = {
  'encoder-worker': WORKER_HTTP_PORTS.encoder,
  'decoder-worker': WORKER_HTTP_PORTS.decoder,
  'encoder-worker-gpu': WORKER_HTTP_PORTS.encoder,
};

/** A stage and the stages it starts from, base first. */
function chain(stages: readonly Stage[], name: string): Stage[] {
  const out: Stage[] = [];
  let current = stages.find((s) => s.name === name);
  while (current !== undefined) {
    out.unshift(current);
    const from: string = current.from;
    current = stages.find((s) => s.name === from);
  }
  return out;
}

/** Workspace directories (packages/x, services/y) of the @csa2 packages `dir` depends on, transitively. */
function workspaceClosure(dir: string): string[] {
  const dirOf = (pkg: string): string | undefined =>
    ['packages', 'services'].flatMap((root) => [`${root}/csa2-${pkg}`, `${root}/${pkg}`]).find((d) => existsSync(join(REPO_ROOT, d, 'package.json')));
  const seen = new Set<string>();
  const visit = (d: string): void => {
    if (seen.has(d)) return;
    seen.add(d);
    const manifest = JSON.parse(readFileSync(join(REPO_ROOT, d, 'package.json'), 'utf8')) as { dependencies?: Record<string, string> };
    for (const dep of Object.keys(manifest.dependencies ?? {})) {
      if (!dep.startsWith('@csa2/')) continue;
      const depDir = dirOf(dep.slice('@csa2/'.length));
      if (depDir === undefined) throw new Error(`${d} depends on ${dep}, which is no workspace`);
      visit(depDir);
    }
  };
  visit(dir);
  return [...seen].sort();
}

export function dockerfileProblems(text: string): string[] {
  const problems: string[] = [];
  for (const d of validate(text)) problems.push(`lint, line ${d.range.start.line + 1}: ${d.message}`);
  const stages = parseStages(text);
  const names = stages.map((s) => s.name);
  for (const target of Object.keys(TARGETS)) if (!names.includes(target)) problems.push(`no stage '${target}'`);
  const build = stages.find((s) => s.name === 'build');
  if (build === undefined) return [...problems, "no stage 'build'"];

  for (const [target, { service }] of Object.entries(TARGETS)) {
    const stagesOf = chain(stages, target);
    if (stagesOf.length === 0) continue;
    const all = stagesOf.flatMap((s) => s.instructions);
    const users = all.filter((i) => i.keyword === 'USER').map((i) => i.args.trim());
    const user = users.at(-1);
    if (user === undefined || /^(root|0)(:|$)/.test(user)) problems.push(`${target}: runs as ${user ?? 'root (no USER)'}`);
    if (!all.some((i) => i.keyword === 'ENV' && /\bNODE_ENV=production\b/.test(i.args))) problems.push(`${target}: NODE_ENV=production is not set`);
    // the dependencies in the image: installed in this chain or copied in from a stage whose chain installs them
    const installers = [
      ...stagesOf,
      ...all.filter((i) => i.keyword === 'COPY' && i.flags['from'] !== undefined).flatMap((i) => chain(stages, i.flags['from'] ?? '')),
    ];
    for (const s of installers) {
      if (s.name === 'build') continue;
      for (const i of s.instructions) {
        if (i.keyword !== 'RUN' || !/\bnpm (ci|install|i)\b/.test(i.args)) continue;
        if (!/--omit=dev\b/.test(i.args)) problems.push(`${target}: stage ${s.name} installs dev dependencies (${i.args.trim()})`);
        if (!/--ignore-scripts\b/.test(i.args))
          problems.push(`${target}: stage ${s.name} runs install scripts (root prepare = tsc -b; onnxruntime-node's download)`);
      }
    }
    for (const i of all) {
      if (i.keyword === 'COPY' && i.flags['from'] === 'build' && /node_modules/.test(i.args))
        problems.push(`${target}: copies node_modules from the build stage (dev dependencies)`);
    }
    // what it runs
    const cmd = all.filter((i) => i.keyword === 'CMD').at(-1);
    let argv: unknown = null;
    try {
      argv = cmd === undefined ? null : JSON.parse(cmd.args);
    } catch {
      argv = null;
    }
    const entry = `services/${service}/dist/main.js`;
    if (!Array.isArray(argv) || argv[0] !== 'node' || argv[1] !== entry)
      problems.push(`${target}: CMD must be ["node", "${entry}"] (exec form), got ${cmd?.args ?? 'none'}`);
    if (!existsSync(join(REPO_ROOT, 'services', service, 'src', 'main.ts')))
      problems.push(`${target}: services/${service}/src/main.ts (the source of ${entry}) does not exist`);
    const compiles = build.instructions.some(
      (i) => i.keyword === 'RUN' && /\btsc\b/.test(i.args) && i.args.includes('-b') && i.args.split(/\s+/).includes(`services/${service}`),
    );
    if (!compiles) problems.push(`${target}: the build stage does not compile services/${service}`);
    // every workspace package the service imports must be in the image, compiled
    for (const dir of workspaceClosure(`services/${service}`)) {
      const copied = all.some((i) => i.keyword === 'COPY' && i.flags['from'] === 'build' && i.args.split(/\s+/)[0]?.replace(/\/$/, '') === `/app/${dir}/dist`);
      const copiedWhole = all.some((i) => i.keyword === 'COPY' && i.flags['from'] === 'runtime' && i.args.split(/\s+/)[0]?.replace(/\/$/, '') === '/app');
      if (!copied && !copiedWhole) problems.push(`${target}: ${dir}/dist is not copied from the build stage`);
    }
  }

  const gateway = chain(stages, 'gateway').flatMap((s) => s.instructions);
  const health = gateway.filter((i) => i.keyword === 'HEALTHCHECK').at(-1);
  if (health === undefined || !health.args.includes('/healthz')) problems.push('gateway: no HEALTHCHECK on /healthz');
  if (!gateway.some((i) => i.keyword === 'EXPOSE' && i.args.split(/\s+/).includes('8080'))) problems.push('gateway: does not EXPOSE 8080');
  if (!gateway.some((i) => i.keyword === 'ENV' && /\bCSA2_HOST=0\.0\.0\.0\b/.test(i.args)))
    problems.push('gateway: CSA2_HOST=0.0.0.0 is not set (the default 127.0.0.1 is unreachable from outside the container)');
  // the workers' /healthz, /readyz, /metrics server: reachable, exposed, health-checked on the port it listens on
  for (const [target, port] of Object.entries(WORKER_TARGET_PORTS)) {
    const worker = chain(stages, target).flatMap((s) => s.instructions);
    if (worker.length === 0) continue;
    const env = worker
      .filter((i) => i.keyword === 'ENV')
      .map((i) => i.args)
      .join(' ');
    if (!/\bCSA2_HOST=0\.0\.0\.0\b/.test(env)) problems.push(`${target}: CSA2_HOST=0.0.0.0 is not set (its probes and /metrics would be unreachable)`);
    if (!new RegExp(`\\bCSA2_WORKER_HTTP_PORT=${port}\\b`).test(env)) problems.push(`${target}: CSA2_WORKER_HTTP_PORT=${port} is not set`);
    if (!worker.some((i) => i.keyword === 'EXPOSE' && i.args.split(/\s+/).includes(String(port)))) problems.push(`${target}: does not EXPOSE ${port}`);
    const check = worker.filter((i) => i.keyword === 'HEALTHCHECK').at(-1);
    if (check === undefined || !check.args.includes('/healthz') || !check.args.includes('CSA2_WORKER_HTTP_PORT'))
      problems.push(`${target}: no HEALTHCHECK on /healthz at CSA2_WORKER_HTTP_PORT`);
  }
  return problems;
}
