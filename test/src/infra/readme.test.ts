/**
 * infra/README.md stays true: its one environment table lists every variable the services read and
 * every variable the deployment files set, durations and sizes carry their unit in the name, the
 * documented build targets exist, and every backlog metric is documented.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BACKLOG_METRIC_NAMES } from '@csa2/jobs';
import { isObject, kustomizeBuild, readYamlDocuments, type JsonObject } from './kustomize.js';
import { parseStages } from './dockerfile-check.js';
import { REPO_ROOT, SERVICES, serviceEnvVariables } from './services.js';

const README = readFileSync(join(REPO_ROOT, 'infra/README.md'), 'utf8');

/** The variables named in the first column of the README's environment table. */
function tableVariables(): Set<string> {
  const section = README.slice(README.indexOf('## Environment variables'));
  const rows = section.split('\n').filter((l) => l.startsWith('| `'));
  const names = new Set<string>();
  for (const row of rows) for (const m of (row.split('|')[1] ?? '').matchAll(/`([A-Z][A-Z0-9_]*)`/g)) names.add(m[1] as string);
  return names;
}

/** Variables the deployment files set: .env.example, compose `environment`, ConfigMaps and container env. */
function deploymentVariables(): Set<string> {
  const names = new Set<string>();
  for (const line of readFileSync(join(REPO_ROOT, 'infra/compose/.env.example'), 'utf8').split('\n')) {
    const m = /^([A-Z][A-Z0-9_]*)=/.exec(line.trim());
    if (m !== null) names.add(m[1] as string);
  }
  const compose = readYamlDocuments(join(REPO_ROOT, 'infra/compose/compose.yaml'))[0] as JsonObject;
  for (const s of Object.values(compose['services'] as Record<string, JsonObject>))
    for (const k of Object.keys((s['environment'] ?? {}) as JsonObject)) names.add(k);
  for (const overlay of ['cpu', 'gpu']) {
    for (const o of kustomizeBuild(join(REPO_ROOT, 'infra/k8s/overlays', overlay))) {
      if (o.kind === 'ConfigMap') for (const k of Object.keys((o['data'] ?? {}) as JsonObject)) names.add(k);
      const spec = o['spec'];
      const template = isObject(spec) ? spec['template'] : undefined;
      const pod = isObject(template) ? template['spec'] : undefined;
      for (const c of isObject(pod) && Array.isArray(pod['containers']) ? pod['containers'] : []) {
        for (const e of isObject(c) && Array.isArray(c['env']) ? c['env'] : []) if (isObject(e)) names.add(String(e['name']));
      }
    }
  }
  return names;
}

test('the environment table lists every variable the services read and every variable the deployment files set', () => {
  const table = tableVariables();
  for (const service of SERVICES) {
    const read = serviceEnvVariables(service);
    assert.ok(read.length >= 10, `${service}: ${read.length} variables found in src/config.ts`);
    for (const name of read) assert.ok(table.has(name), `${name} (read by ${service}) is in the README table`);
  }
  for (const name of deploymentVariables()) assert.ok(table.has(name), `${name} (set by infra/) is in the README table`);
});

test('durations, sizes and limits carry their unit in the name', () => {
  for (const name of tableVariables()) {
    if (/TIMEOUT|INTERVAL|GRACE|DURATION|DELAY|TTL|_POLL|KEEPALIVE|BYTES|CACHE|SIZE/.test(name)) assert.match(name, /_(MS|BYTES|TOKENS|SECONDS)$/, name);
    if (/^CSA2_MAX_/.test(name)) assert.match(name, /_(MS|BYTES|TOKENS|DEPTH|CHOICES)$/, name);
  }
});

test('the documented build targets are Dockerfile stages, and every backlog metric is documented', () => {
  const stages = new Set(parseStages(readFileSync(join(REPO_ROOT, 'infra/docker/Dockerfile'), 'utf8')).map((s) => s.name));
  const targets = [...README.matchAll(/--target (\S+)/g)].map((m) => m[1] as string);
  assert.ok(targets.length >= 4);
  for (const t of targets) assert.ok(stages.has(t), `--target ${t}`);
  for (const name of Object.values(BACKLOG_METRIC_NAMES)) assert.ok(README.includes(`\`${name}\``), name);
});
