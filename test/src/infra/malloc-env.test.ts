/**
 * The worker processes' glibc allocator settings (WORKER_MALLOC_ENV of @csa2/jobs) are what `npm start`
 * and every worker image set, so the speed and memory measured with them (the pipeline harness, the
 * 1M test, the documents-scale bench all use WORKER_MALLOC_ENV) are those of what users run.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { WORKER_MALLOC_ENV } from '@csa2/jobs';
import { WORKER_TARGET_PORTS, parseStages } from './dockerfile-check.js';
import { REPO_ROOT } from './services.js';

/** KEY=VALUE pairs of ENV instructions (the form this Dockerfile uses). */
function envPairs(args: string): Record<string, string> {
  return Object.fromEntries(
    args
      .split(/\s+/)
      .filter((p) => p.includes('='))
      .map((p) => [p.slice(0, p.indexOf('=')), p.slice(p.indexOf('=') + 1)]),
  );
}

function mallocOf(env: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(env).filter(([k]) => k.startsWith('MALLOC_')));
}

test('every worker image sets exactly WORKER_MALLOC_ENV', () => {
  const stages = parseStages(readFileSync(join(REPO_ROOT, 'infra/docker/Dockerfile'), 'utf8'));
  for (const target of Object.keys(WORKER_TARGET_PORTS)) {
    const stage = stages.find((s) => s.name === target);
    assert.ok(stage !== undefined, `stage ${target}`);
    const env = Object.assign({}, ...stage.instructions.filter((i) => i.keyword === 'ENV').map((i) => envPairs(i.args))) as Record<string, string>;
    assert.deepEqual(mallocOf(env), WORKER_MALLOC_ENV, `${target}: its MALLOC_* settings`);
  }
});

test('npm start gives its services exactly WORKER_MALLOC_ENV (the user’s own environment still wins)', () => {
  const start = readFileSync(join(REPO_ROOT, 'scripts/start.mjs'), 'utf8');
  const m = /const env = \{([^}]*)\.\.\.process\.env/.exec(start);
  assert.ok(m !== null, 'scripts/start.mjs builds its services’ env with defaults before ...process.env');
  const defaults = Object.fromEntries([...(m[1] as string).matchAll(/(\w+): '([^']*)'/g)].map((x) => [x[1], x[2]]));
  assert.deepEqual(mallocOf(defaults), WORKER_MALLOC_ENV);
});
