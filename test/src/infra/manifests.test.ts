/**
 * infra/k8s: both overlays render (an offline kustomize subset, ./kustomize.ts), every object is
 * valid against the Kubernetes / KEDA schemas with no unknown field (./k8s-schema.ts), and the
 * objects agree with each other and with the services: references resolve, probes hit the gateway's
 * and the workers' endpoints on the ports their configs listen on, grace periods outlast the longest
 * job, GPUs only where meant, KEDA scales on the backlog metrics the code exports, each container's
 * environment passes its service's own config loader, and the gc CronJob's arguments pass the csa2 gc
 * parser.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { BACKLOG_METRIC_NAMES } from '@csa2/jobs';
import { KustomizeError, isObject, kustomizeBuild, readYamlDocuments, type JsonObject, type K8sObject } from './kustomize.js';
import { validateK8sObject } from './k8s-schema.js';
import { REPO_ROOT, loadServiceConfig, type ServiceName } from './services.js';

const K8S = join(REPO_ROOT, 'infra/k8s');
const OVERLAYS = ['cpu', 'gpu'] as const;
type Overlay = (typeof OVERLAYS)[number];
const rendered: Record<Overlay, K8sObject[]> = { cpu: kustomizeBuild(join(K8S, 'overlays/cpu')), gpu: kustomizeBuild(join(K8S, 'overlays/gpu')) };
const exampleSecret = readYamlDocuments(join(K8S, 'base/secret.example.yaml'))[0] as K8sObject;

// ---- small typed accessors over plain JSON

const obj = (v: unknown, what: string): JsonObject => {
  assert.ok(isObject(v), `${what} is an object`);
  return v;
};
const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const find = (objects: K8sObject[], kind: string, name: string): K8sObject => {
  const o = objects.find((x) => x.kind === kind && x.metadata.name === name);
  assert.ok(o !== undefined, `${kind}/${name} is rendered`);
  return o;
};
const podSpec = (d: K8sObject): JsonObject => obj(obj(obj(d['spec'], 'spec')['template'], 'template')['spec'], 'pod spec');
const containers = (d: K8sObject): JsonObject[] => list(podSpec(d)['containers']).map((c) => obj(c, 'container'));
const deployments = (objects: K8sObject[]): K8sObject[] => objects.filter((o) => o.kind === 'Deployment');
const matches = (selector: unknown, labels: unknown): boolean =>
  isObject(selector) && isObject(labels) && Object.keys(selector).length > 0 && Object.entries(selector).every(([k, v]) => labels[k] === v);

/** A container's environment as the kubelet builds it: envFrom ConfigMaps, then env (secrets from the example). */
function containerEnv(objects: K8sObject[], c: JsonObject): Record<string, string> {
  const env: Record<string, string> = {};
  for (const from of list(c['envFrom'])) {
    const ref = obj(obj(from, 'envFrom')['configMapRef'], 'envFrom.configMapRef');
    Object.assign(env, obj(find(objects, 'ConfigMap', String(ref['name']))['data'], 'ConfigMap data'));
  }
  for (const e of list(c['env'])) {
    const entry = obj(e, 'env entry');
    const name = String(entry['name']);
    if (typeof entry['value'] === 'string') env[name] = entry['value'];
    const secretRef = isObject(entry['valueFrom']) ? entry['valueFrom']['secretKeyRef'] : undefined;
    if (isObject(secretRef)) {
      assert.equal(secretRef['name'], exampleSecret.metadata.name, `${name} comes from the documented Secret`);
      const value = obj(exampleSecret['stringData'], 'example secret')[String(secretRef['key'])];
      assert.equal(typeof value, 'string', `secret.example.yaml documents key ${String(secretRef['key'])}`);
      env[name] = value as string;
    }
  }
  return env;
}

// ---- schema

test('every rendered object, and the example Secret, is valid against the Kubernetes and KEDA schemas with no unknown field', () => {
  for (const overlay of OVERLAYS) {
    assert.ok(rendered[overlay].length >= 10, `${overlay}: ${rendered[overlay].length} objects`);
    for (const o of rendered[overlay]) assert.deepEqual(validateK8sObject(o), [], `${overlay}: ${o.kind}/${o.metadata.name}`);
  }
  assert.deepEqual(validateK8sObject(exampleSecret), []);
  const kinds = new Set(rendered.gpu.map((o) => o.kind));
  for (const kind of ['Deployment', 'Service', 'ConfigMap', 'PodDisruptionBudget', 'ScaledObject']) assert.ok(kinds.has(kind), `renders a ${kind}`);
});

test('every YAML file under infra/k8s is checked: a kustomization, a rendered resource, an applied patch, or the example Secret', () => {
  const files: string[] = [];
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (/\.ya?ml$/.test(name)) files.push(relative(K8S, path));
    }
  };
  walk(K8S);
  const covered = new Set<string>(['base/secret.example.yaml']);
  const visit = (dir: string): void => {
    covered.add(relative(K8S, join(dir, 'kustomization.yaml')));
    const k = obj(readYamlDocuments(join(dir, 'kustomization.yaml'))[0], 'kustomization');
    for (const r of list(k['resources'])) {
      const path = join(dir, String(r));
      if (statSync(path).isDirectory()) visit(path);
      else covered.add(relative(K8S, path));
    }
    for (const p of list(k['patches'])) covered.add(relative(K8S, join(dir, String(obj(p, 'patch')['path']))));
  };
  for (const overlay of OVERLAYS) visit(join(K8S, 'overlays', overlay));
  assert.deepEqual(
    files.filter((f) => !covered.has(f)),
    [],
    'files nothing renders or validates',
  );
});

test('the checks can fail: typos, wrong types and missing fields are schema errors; a patch without a target is refused', () => {
  const clone = <T>(v: T): T => structuredClone(v);
  const gateway = clone(find(rendered.cpu, 'Deployment', 'csa2-gateway'));
  const probe = obj(containers(gateway)[0]?.['readinessProbe'], 'readinessProbe');
  probe['httpGt'] = probe['httpGet'];
  delete probe['httpGet'];
  assert.deepEqual(validateK8sObject(gateway), ['unknown field /spec/template/spec/containers/0/readinessProbe/httpGt']);

  const so = clone(find(rendered.cpu, 'ScaledObject', 'csa2-encoder-worker'));
  const spec = obj(so['spec'], 'spec');
  spec['minReplicaCount'] = '0';
  delete spec['scaleTargetRef'];
  spec['cooldownPeriods'] = 300;
  const errors = validateK8sObject(so).join('\n');
  assert.match(errors, /minReplicaCount must be integer/);
  assert.match(errors, /scaleTargetRef/);
  assert.match(errors, /unknown field \/spec\/cooldownPeriods/);

  const service = clone(find(rendered.cpu, 'Service', 'csa2-gateway'));
  obj(service['spec'], 'spec')['ports'] = [{ name: 'http', port: 'eighty', targetPort: 'http' }];
  assert.match(validateK8sObject(service).join('\n'), /port must be integer/);
  assert.match(validateK8sObject({ apiVersion: 'apps/v1', kind: 'Deployments', metadata: { name: 'x' } }).join(), /no schema/);

  assert.throws(() => kustomizeBuild(join(REPO_ROOT, 'test/src/infra/fixtures/bad-patch-target')), KustomizeError);
  assert.throws(() => kustomizeBuild(join(REPO_ROOT, 'test/src/infra/fixtures/unsupported-field')), /outside the supported subset/);
});

// ---- consistency

test('selectors, Service ports, ConfigMap and Secret references, and the model volume resolve', () => {
  for (const overlay of OVERLAYS) {
    const objects = rendered[overlay];
    for (const o of objects) assert.equal(o.metadata.namespace, 'csa2', `${overlay}: ${o.kind}/${o.metadata.name} namespace`);
    for (const d of deployments(objects)) {
      const spec = obj(d['spec'], 'spec');
      const templateLabels = obj(obj(spec['template'], 'template')['metadata'], 'template metadata')['labels'];
      assert.ok(matches(obj(spec['selector'], 'selector')['matchLabels'], templateLabels), `${d.metadata.name}: selector matches its pods`);
      assert.equal(obj(templateLabels, 'labels')['app.kubernetes.io/part-of'], 'csa2', 'the labels transformer reached the pod template');
      for (const c of containers(d)) containerEnv(objects, c); // asserts every reference
      const claim = list(podSpec(d)['volumes'])
        .map((v) => obj(v, 'volume')['persistentVolumeClaim'])
        .find(isObject);
      assert.equal(claim?.['claimName'], 'csa2-models', `${d.metadata.name} mounts the model volume`);
    }
    for (const o of objects.filter((x) => x.kind === 'Service' || x.kind === 'PodDisruptionBudget')) {
      const spec = obj(o['spec'], 'spec');
      const selector = o.kind === 'Service' ? spec['selector'] : obj(spec['selector'], 'selector')['matchLabels'];
      const targets = deployments(objects).filter((d) => matches(selector, obj(obj(obj(d['spec'], 's')['template'], 't')['metadata'], 'm')['labels']));
      assert.equal(targets.length, 1, `${o.kind}/${o.metadata.name} selects one Deployment`);
      if (o.kind === 'Service') {
        const names = containers(targets[0] as K8sObject).flatMap((c) => list(c['ports']).map((p) => obj(p, 'port')['name']));
        for (const p of list(spec['ports']))
          assert.ok(names.includes(obj(p, 'port')['targetPort']), `${o.metadata.name}: targetPort is a named container port`);
      }
    }
    const pdbs = objects.filter((o) => o.kind === 'PodDisruptionBudget');
    assert.equal(pdbs.length, deployments(objects).length, 'one PodDisruptionBudget per Deployment');
  }
});

test('the gateway: readiness on /readyz, liveness on /healthz, listening on all interfaces, scraped for /metrics', () => {
  const gateway = find(rendered.cpu, 'Deployment', 'csa2-gateway');
  const [c] = containers(gateway);
  assert.ok(c !== undefined);
  const httpGet = (probe: string): JsonObject => obj(obj(c[probe], probe)['httpGet'], `${probe}.httpGet`);
  assert.deepEqual([httpGet('readinessProbe')['path'], httpGet('readinessProbe')['port']], ['/readyz', 'http']);
  assert.deepEqual([httpGet('livenessProbe')['path'], httpGet('livenessProbe')['port']], ['/healthz', 'http']);
  const env = containerEnv(rendered.cpu, c);
  assert.equal(env['CSA2_HOST'], '0.0.0.0');
  const port = list(c['ports'])
    .map((p) => obj(p, 'port'))
    .find((p) => p['name'] === 'http');
  assert.equal(String(port?.['containerPort']), env['PORT']);
  const annotations = obj(obj(obj(obj(gateway['spec'], 's')['template'], 't')['metadata'], 'm')['annotations'], 'annotations');
  assert.equal(annotations['prometheus.io/path'], '/metrics');
  assert.equal(annotations['prometheus.io/port'], env['PORT']);
});

test('the workers: readiness on /readyz, liveness and startup on /healthz, at the port their own config listens on (every interface), scraped for /metrics', async () => {
  const serviceOf: Record<string, ServiceName> = { 'csa2-encoder-worker': 'encoder-worker', 'csa2-decoder-worker': 'decoder-worker' };
  for (const overlay of OVERLAYS) {
    for (const [name, service] of Object.entries(serviceOf)) {
      const d = find(rendered[overlay], 'Deployment', name);
      const [c] = containers(d);
      assert.ok(c !== undefined);
      const env = containerEnv(rendered[overlay], c);
      const config = obj(await loadServiceConfig(service, env), 'config');
      assert.equal(config['httpHost'], '0.0.0.0', `${overlay}: ${name} listens on every interface (the kubelet probes the pod IP)`);
      const port = list(c['ports'])
        .map((p) => obj(p, 'port'))
        .find((p) => p['name'] === 'http');
      assert.equal(port?.['containerPort'], config['httpPort'], `${overlay}: ${name}'s http port is the one its config listens on`);
      const httpGet = (probe: string): JsonObject => obj(obj(c[probe], `${name} ${probe}`)['httpGet'], `${probe}.httpGet`);
      assert.deepEqual([httpGet('readinessProbe')['path'], httpGet('readinessProbe')['port']], ['/readyz', 'http']);
      assert.deepEqual([httpGet('livenessProbe')['path'], httpGet('livenessProbe')['port']], ['/healthz', 'http']);
      assert.deepEqual([httpGet('startupProbe')['path'], httpGet('startupProbe')['port']], ['/healthz', 'http']);
      const readiness = obj(c['readinessProbe'], 'readinessProbe');
      assert.ok(
        Number(readiness['timeoutSeconds']) * 1000 > Number(config['readyTimeoutMs']),
        `${name}: the probe waits longer than /readyz's own Redis timeout`,
      );
      const annotations = obj(obj(obj(obj(d['spec'], 's')['template'], 't')['metadata'], 'm')['annotations'], `${name} annotations`);
      assert.equal(annotations['prometheus.io/scrape'], 'true');
      assert.equal(annotations['prometheus.io/path'], '/metrics');
      assert.equal(annotations['prometheus.io/port'], String(config['httpPort']));
    }
  }
  // the check can fail: a probe on a port the worker does not listen on
  const broken = structuredClone(find(rendered.cpu, 'Deployment', 'csa2-decoder-worker'));
  const c = containers(broken)[0] as JsonObject;
  c['env'] = list(c['env']).map((e) => (obj(e, 'env')['name'] === 'CSA2_WORKER_HTTP_PORT' ? { name: 'CSA2_WORKER_HTTP_PORT', value: '9999' } : e));
  const config = obj(await loadServiceConfig('decoder-worker', containerEnv(rendered.cpu, c)), 'config');
  assert.notEqual(list(c['ports']).map((p) => obj(p, 'port')['containerPort'])[0], config['httpPort']);
});

test('terminationGracePeriodSeconds outlasts CSA2_SHUTDOWN_GRACE_MS, which covers the longest decode (CSA2_REQUEST_TIMEOUT_MS)', () => {
  const MARGIN_MS = 20_000; // engine close, Redis hand-back, the preStop pause
  for (const overlay of OVERLAYS) {
    const objects = rendered[overlay];
    for (const d of deployments(objects)) {
      const env = containerEnv(objects, containers(d)[0] as JsonObject);
      const graceS = podSpec(d)['terminationGracePeriodSeconds'];
      assert.equal(typeof graceS, 'number', `${d.metadata.name}: terminationGracePeriodSeconds is set`);
      const shutdownMs = Number(env['CSA2_SHUTDOWN_GRACE_MS']);
      assert.ok(shutdownMs > 0, `${d.metadata.name}: CSA2_SHUTDOWN_GRACE_MS is set`);
      assert.ok((graceS as number) * 1000 >= shutdownMs + MARGIN_MS, `${d.metadata.name}: ${String(graceS)} s vs ${shutdownMs} ms`);
      if (d.metadata.name !== 'csa2-encoder-worker') {
        assert.ok(shutdownMs >= Number(env['CSA2_REQUEST_TIMEOUT_MS']), `${d.metadata.name}: a request may run CSA2_REQUEST_TIMEOUT_MS`);
      }
    }
  }
});

test('resources, non-root security context and images: every container; GPUs only for the encoder of the gpu overlay', () => {
  for (const overlay of OVERLAYS) {
    for (const d of deployments(rendered[overlay])) {
      const podSecurity = obj(podSpec(d)['securityContext'], 'pod securityContext');
      assert.equal(podSecurity['runAsNonRoot'], true);
      assert.equal(podSecurity['runAsUser'], 1000, 'the uid of `node` in the images');
      for (const c of containers(d)) {
        const resources = obj(c['resources'], 'resources');
        for (const part of ['requests', 'limits'])
          for (const r of ['cpu', 'memory']) assert.ok(obj(resources[part], part)[r] !== undefined, `${d.metadata.name}: ${part}.${r}`);
        assert.match(String(c['image']), /^registry\.example\.com\/csa2\/[a-z-]+:0\.1\.0$/, 'the overlay set the image');
        assert.equal(obj(c['securityContext'], 'securityContext')['allowPrivilegeEscalation'], false);
        const gpus = obj(resources['limits'], 'limits')['nvidia.com/gpu'];
        const env = containerEnv(rendered[overlay], c);
        if (overlay === 'gpu' && d.metadata.name === 'csa2-encoder-worker') {
          assert.equal(gpus, 1);
          assert.equal(env['CSA2_PROVIDER'], 'cuda');
          assert.equal(c['image'], 'registry.example.com/csa2/encoder-worker-gpu:0.1.0');
          assert.ok(list(podSpec(d)['tolerations']).some((t) => obj(t, 'toleration')['key'] === 'nvidia.com/gpu'));
        } else {
          assert.equal(gpus, undefined, `${overlay}: ${d.metadata.name} asks for no GPU`);
          assert.notEqual(env['CSA2_PROVIDER'], 'cuda');
        }
      }
    }
  }
});

test('KEDA: one ScaledObject per worker role, on the backlog metrics @csa2/jobs exports; encoders scale to zero', () => {
  const exported = new Set<string>(Object.values(BACKLOG_METRIC_NAMES));
  for (const overlay of OVERLAYS) {
    const objects = rendered[overlay];
    const scaled = objects.filter((o) => o.kind === 'ScaledObject');
    assert.deepEqual(scaled.map((s) => s.metadata.name).sort(), ['csa2-decoder-worker', 'csa2-encoder-worker']);
    for (const s of scaled) {
      const spec = obj(s['spec'], 'spec');
      const target = find(objects, 'Deployment', String(obj(spec['scaleTargetRef'], 'scaleTargetRef')['name']));
      assert.equal(obj(target['spec'], 'spec')['replicas'], undefined, `${target.metadata.name}: replicas are KEDA's, not in the manifest`);
      const queue = s.metadata.name === 'csa2-encoder-worker' ? 'prefill' : 'decode';
      assert.equal(spec['minReplicaCount'], queue === 'prefill' ? 0 : 1);
      const triggers = list(spec['triggers']).map((t) => obj(t, 'trigger'));
      assert.ok(triggers.length > 0);
      for (const t of triggers) {
        assert.equal(t['type'], 'prometheus', 'not redis-list: it misses prioritized and delayed jobs');
        const meta = obj(t['metadata'], 'metadata');
        const query = String(meta['query']);
        const metrics = [...query.matchAll(/\b(csa2_[a-z0-9_]+)/g)].map((m) => m[1] as string);
        assert.ok(metrics.length >= 2, `${query}: waiting + running work`);
        for (const m of metrics) assert.ok(exported.has(m), `${m} is a metric renderBacklogMetrics writes`);
        for (const label of query.matchAll(/queue="([a-z]+)"/g)) assert.equal(label[1], queue, query);
        assert.ok(
          metrics.every((m) => !m.startsWith('csa2_prefill_') || queue === 'prefill'),
          query,
        );
        assert.match(query, /^max\(.+\) \+ max\(.+\)$/, 'every gateway replica reports the same numbers: max, not sum');
        assert.ok(Number(meta['threshold']) > 0, 'threshold');
        assert.match(String(meta['serverAddress']), /^https?:\/\//);
      }
    }
  }
  const gpuTokens = list(obj(find(rendered.gpu, 'ScaledObject', 'csa2-encoder-worker')['spec'], 's')['triggers']).map((t) =>
    Number(obj(obj(t, 't')['metadata'], 'm')['threshold']),
  );
  const cpuTokens = list(obj(find(rendered.cpu, 'ScaledObject', 'csa2-encoder-worker')['spec'], 's')['triggers']).map((t) =>
    Number(obj(obj(t, 't')['metadata'], 'm')['threshold']),
  );
  assert.ok((gpuTokens[0] ?? 0) > (cpuTokens[0] ?? 0), 'the gpu overlay patched the encoder trigger');
});

test("each container's environment (ConfigMap + env + the Secret's keys) passes its service's own config loader", async () => {
  const serviceOf: Record<string, ServiceName> = {
    'csa2-gateway': 'gateway',
    'csa2-encoder-worker': 'encoder-worker',
    'csa2-decoder-worker': 'decoder-worker',
  };
  for (const overlay of OVERLAYS) {
    for (const d of deployments(rendered[overlay])) {
      const service = serviceOf[d.metadata.name];
      assert.ok(service !== undefined, `${d.metadata.name} is a known service`);
      const env = containerEnv(rendered[overlay], containers(d)[0] as JsonObject);
      const config = obj(await loadServiceConfig(service, env), 'config');
      assert.equal(config['redisUrl'], env['REDIS_URL']);
      if (service !== 'gateway') assert.equal(config['provider'], overlay === 'gpu' && service === 'encoder-worker' ? 'cuda' : 'cpu');
    }
  }
  // and the loader does refuse a bad value, so the check above means something
  const decoder = containerEnv(rendered.cpu, containers(find(rendered.cpu, 'Deployment', 'csa2-decoder-worker'))[0] as JsonObject);
  await assert.rejects(loadServiceConfig('decoder-worker', { ...decoder, CSA2_THREADS: 'four' }), /CSA2_THREADS/);
});

test("the gc CronJob: hourly, one run at a time, within its period, the gateway image (its csa2 CLI), non-root; its arguments pass csa2 gc's own parser, with the store URL the services use", async () => {
  const gcCli = (await import(new URL('packages/csa2-engine/dist/cli/gc.js', `file://${REPO_ROOT}`).href)) as {
    parseGcArgs(args: readonly string[]): { store: string; graceMs: number; markerTtlMs: number; promptTtlMs: number | null; dryRun: boolean };
    GC_GRACE_WARNING_MS: number;
  };
  const { DEFAULT_INGEST_MARKER_RENEW_MS } = await import('@csa2/artifacts');
  const dockerfile = readFileSync(join(REPO_ROOT, 'infra/docker/Dockerfile'), 'utf8');
  for (const overlay of OVERLAYS) {
    const objects = rendered[overlay];
    const cron = find(objects, 'CronJob', 'csa2-gc');
    const spec = obj(cron['spec'], 'spec');
    assert.equal(spec['concurrencyPolicy'], 'Forbid', 'one collection at a time');
    const fields = String(spec['schedule']).split(' ');
    assert.equal(fields.length, 5);
    assert.match(fields[0] ?? '', /^[0-5]?[0-9]$/);
    assert.deepEqual(fields.slice(1), ['*', '*', '*', '*'], 'hourly');
    const job = obj(obj(spec['jobTemplate'], 'jobTemplate')['spec'], 'job spec');
    assert.ok(Number(job['activeDeadlineSeconds']) < 3600, 'a run ends before the next is due');
    const template = obj(job['template'], 'pod template');
    assert.equal(
      obj(obj(template['metadata'], 'metadata')['labels'], 'labels')['app.kubernetes.io/part-of'],
      'csa2',
      'the labels transformer reached the pod template',
    );
    const pod = obj(template['spec'], 'pod spec');
    assert.equal(pod['restartPolicy'], 'Never');
    const podSecurity = obj(pod['securityContext'], 'pod securityContext');
    assert.deepEqual([podSecurity['runAsNonRoot'], podSecurity['runAsUser']], [true, 1000]);
    const [c] = list(pod['containers']).map((x) => obj(x, 'container'));
    assert.ok(c !== undefined);
    assert.equal(c['image'], 'registry.example.com/csa2/gateway:0.1.0', 'the overlay set the image');
    assert.equal(obj(c['securityContext'], 'securityContext')['allowPrivilegeEscalation'], false);
    const resources = obj(c['resources'], 'resources');
    for (const part of ['requests', 'limits']) for (const r of ['cpu', 'memory']) assert.ok(obj(resources[part], part)[r] !== undefined, `${part}.${r}`);
    // the command is the CLI the image carries
    const command = list(c['command']).map(String);
    assert.deepEqual(command.slice(0, 2), ['node', 'packages/csa2-engine/bin/csa2.js']);
    assert.ok(statSync(join(REPO_ROOT, command[1] as string)).isFile());
    assert.match(dockerfile, /COPY --from=build \/app\/packages\/csa2-engine\/bin\/ \.\/packages\/csa2-engine\/bin\//, 'the runtime image copies the CLI');
    // $(VAR) in args expands from the container's environment, as the kubelet does
    const env = containerEnv(objects, c);
    const args = list(c['args']).map((a) =>
      String(a).replace(/\$\(([A-Z0-9_]+)\)/g, (_, name: string) => {
        assert.ok(env[name] !== undefined, `$(${name}) is set in the container`);
        return env[name] as string;
      }),
    );
    assert.equal(args[0], 'gc');
    const cmd = gcCli.parseGcArgs(args.slice(1));
    const gateway = containerEnv(objects, containers(find(objects, 'Deployment', 'csa2-gateway'))[0] as JsonObject);
    assert.equal(cmd.store, gateway['CSA2_STORE_URL'], 'the store the services write');
    assert.equal(cmd.dryRun, false);
    assert.ok(cmd.graceMs >= gcCli.GC_GRACE_WARNING_MS, `grace ${cmd.graceMs} ms`);
    assert.ok(cmd.markerTtlMs >= 5 * DEFAULT_INGEST_MARKER_RENEW_MS, `an ingest marker survives missed renewals (ttl ${cmd.markerTtlMs} ms)`);
    assert.ok(cmd.promptTtlMs === null || cmd.promptTtlMs >= 2 * Number(gateway['CSA2_REQUEST_TIMEOUT_MS']), 'a prompt artifact outlives its request');
  }
  assert.throws(() => gcCli.parseGcArgs(['--store', 's3://b/p', '--grace', '1']), /Unknown option/, 'the parser does refuse a bad flag');
});
