/**
 * infra/docker/Dockerfile without a docker daemon: it lints clean, every target runs as a non-root
 * user with production settings and no dev dependencies or install scripts, runs the entry point the
 * build compiles, and carries every workspace package it imports; the checks fail on broken copies.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { TARGETS, dockerfileProblems, parseStages } from './dockerfile-check.js';
import { REPO_ROOT } from './services.js';

const DOCKERFILE = readFileSync(join(REPO_ROOT, 'infra/docker/Dockerfile'), 'utf8');

test('the Dockerfile passes the linter and every rule of dockerfile-check', () => {
  assert.deepEqual(dockerfileProblems(DOCKERFILE), []);
});

test('it is multi-stage: dependencies, build and runtime are separate stages, and every target is one', () => {
  const names = parseStages(DOCKERFILE).map((s) => s.name);
  for (const stage of ['build', 'prod-deps', 'runtime', ...Object.keys(TARGETS)]) assert.ok(names.includes(stage), stage);
  // the build stage has the dev dependencies (typescript) and installs them without scripts too
  const build = parseStages(DOCKERFILE).find((s) => s.name === 'build');
  const install = build?.instructions.find((i) => i.keyword === 'RUN' && /\bnpm ci\b/.test(i.args));
  assert.ok(install !== undefined && !install.args.includes('--omit=dev') && install.args.includes('--ignore-scripts'));
});

test('the checks fail on broken copies: root user, dev dependencies, install scripts, a wrong entry point, lint errors', () => {
  const broken = (from: string | RegExp, to: string): string[] => {
    const text = DOCKERFILE.replace(from, to);
    assert.notEqual(text, DOCKERFILE, `the mutation of ${String(from)} applies`);
    return dockerfileProblems(text);
  };
  const has = (problems: string[], pattern: RegExp): void =>
    assert.ok(
      problems.some((p) => pattern.test(p)),
      `${String(pattern)} in:\n${problems.join('\n')}`,
    );
  has(broken(/\nUSER node\n\nFROM runtime AS gateway/, '\nFROM runtime AS gateway'), /gateway: runs as root/);
  has(broken('RUN npm ci --omit=dev --ignore-scripts', 'RUN npm ci --ignore-scripts'), /installs dev dependencies/);
  has(broken('RUN npm ci --omit=dev --ignore-scripts', 'RUN npm ci --omit=dev'), /runs install scripts/);
  has(broken('CMD ["node", "services/decoder-worker/dist/main.js"]', 'CMD node services/decoder-worker/dist/main.js'), /decoder-worker: CMD must be/);
  has(
    broken('services/gateway services/encoder-worker services/decoder-worker', 'services/gateway services/encoder-worker'),
    /the build stage does not compile services\/decoder-worker/,
  );
  has(broken('COPY --from=build /app/packages/csa2-jobs/dist/ ./packages/csa2-jobs/dist/\n', ''), /packages\/csa2-jobs\/dist is not copied/);
  has(broken('COPY --from=build /app/services/gateway/dist/', 'COPY --form=build /app/services/gateway/dist/'), /lint, line \d+: Unknown flag: form/);
  has(broken('ENV NODE_ENV=production\n', ''), /NODE_ENV=production is not set/);
  has(broken('/healthz', '/'), /no HEALTHCHECK on \/healthz/);
  has(
    broken(
      'FROM runtime AS decoder-worker\nENV CSA2_HOST=0.0.0.0 CSA2_WORKER_HTTP_PORT=9302',
      'FROM runtime AS decoder-worker\nENV CSA2_WORKER_HTTP_PORT=9302',
    ),
    /decoder-worker: CSA2_HOST=0\.0\.0\.0 is not set/,
  );
  has(broken('EXPOSE 9301\nHEALTHCHECK', 'HEALTHCHECK'), /encoder-worker: does not EXPOSE 9301/);
  has(
    broken(/USER node\nENV CSA2_HOST=0\.0\.0\.0 CSA2_WORKER_HTTP_PORT=9301 /, 'USER node\nENV CSA2_HOST=0.0.0.0 CSA2_WORKER_HTTP_PORT=9302 '),
    /encoder-worker-gpu: CSA2_WORKER_HTTP_PORT=9301 is not set/,
  );
});

test('.dockerignore keeps installed and built files out of the build context', () => {
  const lines = readFileSync(join(REPO_ROOT, '.dockerignore'), 'utf8')
    .split('\n')
    .map((l) => l.trim());
  for (const pattern of ['**/node_modules', '**/dist', '.git']) assert.ok(lines.includes(pattern), pattern);
});
