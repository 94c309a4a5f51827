/**
 * @module infra/kustomize
 * A small, offline implementation of the part of kustomize that infra/k8s uses, so that tests can
 * render the overlays without a kustomize binary (none can be installed from npm here).
 *
 * Supported kustomization fields — anything else is refused, so the manifests cannot quietly depend
 * on behaviour this renderer does not have:
 *
 * - `resources`: YAML files (every document) and directories holding a kustomization.yaml;
 * - `patches`: `- path: file.yaml` only, a strategic-merge patch naming its target by kind and
 *   metadata.name (it must match exactly one resource). Merge rules, as kustomize applies them:
 *   maps merge recursively and `null` deletes a key; in built-in kinds the lists below merge by their
 *   key and every other list is replaced; in custom resources (no schema) every list is replaced;
 *   `$patch` directives are refused;
 * - `namespace`: set on every resource (all kinds used are namespaced);
 * - `labels`: `pairs` added to metadata.labels, and to pod templates (a CronJob's job template and
 *   its pod template) with `includeTemplates: true`
 *   (`includeSelectors: true` is refused: selectors stay as written);
 * - `images`: `name` → `newName` / `newTag` / `digest` on every container and init container.
 *
 * Order in one kustomization: resources, patches, namespace, labels, images.
 */
import { readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseAllDocuments } from 'yaml';

export type JsonObject = { [key: string]: unknown };
/** A rendered resource: a plain JSON object with apiVersion, kind and metadata.name. */
export interface K8sObject extends JsonObject {
  apiVersion: string;
  kind: string;
  metadata: JsonObject & { name: string; namespace?: string; labels?: Record<string, string> };
}

export class KustomizeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'KustomizeError';
  }
}

const SUPPORTED_FIELDS = new Set(['apiVersion', 'kind', 'resources', 'patches', 'namespace', 'labels', 'images']);
/** Strategic-merge keys of the lists the patches may touch (built-in kinds only). */
const LIST_MERGE_KEYS: Readonly<Record<string, readonly string[]>> = {
  containers: ['name'],
  initContainers: ['name'],
  env: ['name'],
  envFrom: [], // no merge key in the API: replaced (listed to say so)
  volumes: ['name'],
  volumeMounts: ['mountPath'],
  ports: ['containerPort', 'port'],
  imagePullSecrets: ['name'],
};

export const isObject = (v: unknown): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Every YAML document of a file, as plain JSON; a syntax error names the file and line. */
export function readYamlDocuments(path: string): unknown[] {
  const docs = parseAllDocuments(readFileSync(path, 'utf8'), { prettyErrors: true });
  const out: unknown[] = [];
  for (const doc of Array.isArray(docs) ? docs : [docs]) {
    if (doc.errors.length > 0) throw new KustomizeError(`${path}: ${doc.errors.map((e) => e.message).join('; ')}`);
    const value: unknown = doc.toJS({ maxAliasCount: 0 });
    if (value !== null && value !== undefined) out.push(value);
  }
  return out;
}

function asK8sObject(value: unknown, where: string): K8sObject {
  if (!isObject(value) || typeof value['apiVersion'] !== 'string' || typeof value['kind'] !== 'string') {
    throw new KustomizeError(`${where}: a resource needs apiVersion and kind`);
  }
  const metadata = value['metadata'];
  if (!isObject(metadata) || typeof metadata['name'] !== 'string') throw new KustomizeError(`${where}: a resource needs metadata.name`);
  return value as K8sObject;
}

/** Built-in kinds: the core group, dot-less groups (apps, policy, …) and *.k8s.io groups. */
function isBuiltin(apiVersion: string): boolean {
  const group = apiVersion.includes('/') ? (apiVersion.split('/')[0] ?? '') : '';
  return !group.includes('.') || group.endsWith('.k8s.io');
}

function mergeList(key: string, base: unknown[], patch: unknown[]): unknown[] {
  const keys = LIST_MERGE_KEYS[key] ?? [];
  const pick = (item: unknown): [string, unknown] | null => {
    if (!isObject(item)) return null;
    for (const k of keys) if (item[k] !== undefined) return [k, item[k]];
    return null;
  };
  if (keys.length === 0) return patch;
  const out = [...base];
  for (const item of patch) {
    const id = pick(item);
    if (id === null) throw new KustomizeError(`patch: an item of list '${key}' lacks its merge key (${keys.join(' or ')})`);
    const at = out.findIndex((b) => isObject(b) && b[id[0]] === id[1]);
    if (at < 0) out.push(item);
    else out[at] = strategicMerge(out[at], item, true);
  }
  return out;
}

/** Strategic-merge `patch` into `base` (see the module header for the rules). Pure. */
export function strategicMerge(base: unknown, patch: unknown, builtin: boolean): unknown {
  if (!isObject(patch) || !isObject(base)) return patch;
  const out: JsonObject = { ...base };
  for (const [key, value] of Object.entries(patch)) {
    if (key.startsWith('$')) throw new KustomizeError(`patch: directive '${key}' is not supported`);
    if (value === null) {
      delete out[key];
    } else if (Array.isArray(value)) {
      const current = out[key];
      out[key] = builtin && Array.isArray(current) ? mergeList(key, current, value) : value;
    } else {
      out[key] = strategicMerge(out[key], value, builtin);
    }
  }
  return out;
}

/** The pod templates of a workload: `spec.template` (Deployment, Job, …) or a CronJob's `spec.jobTemplate.spec.template`. */
export function podTemplatesOf(o: K8sObject): JsonObject[] {
  const spec = o['spec'];
  if (!isObject(spec)) return [];
  const jobTemplate = spec['jobTemplate'];
  const template = isObject(jobTemplate) && isObject(jobTemplate['spec']) ? jobTemplate['spec']['template'] : spec['template'];
  return isObject(template) ? [template] : [];
}

function podSpecsOf(o: K8sObject): JsonObject[] {
  return podTemplatesOf(o).flatMap((t) => (isObject(t['spec']) ? [t['spec']] : []));
}

/** `name[:tag][@digest]` → its parts (a registry port is not a tag). */
export function parseImageRef(ref: string): { name: string; tag: string | null; digest: string | null } {
  const [withTag, digest = null] = ref.split('@') as [string, string?];
  const slash = withTag.lastIndexOf('/');
  const colon = withTag.lastIndexOf(':');
  if (colon > slash) return { name: withTag.slice(0, colon), tag: withTag.slice(colon + 1), digest };
  return { name: withTag, tag: null, digest };
}

function applyImages(objects: K8sObject[], images: unknown, where: string): void {
  if (!Array.isArray(images)) throw new KustomizeError(`${where}: images must be a list`);
  for (const image of images) {
    if (!isObject(image) || typeof image['name'] !== 'string') throw new KustomizeError(`${where}: an images entry needs a name`);
    for (const k of Object.keys(image))
      if (!['name', 'newName', 'newTag', 'digest'].includes(k)) throw new KustomizeError(`${where}: images.${k} is not supported`);
    const { name, newName, newTag, digest } = image as { name: string; newName?: string; newTag?: string; digest?: string };
    for (const podSpec of objects.flatMap(podSpecsOf)) {
      for (const listKey of ['containers', 'initContainers']) {
        const list = podSpec[listKey];
        if (!Array.isArray(list)) continue;
        for (const c of list) {
          if (!isObject(c) || typeof c['image'] !== 'string') continue;
          const ref = parseImageRef(c['image']);
          if (ref.name !== name) continue;
          const finalName = newName ?? ref.name;
          c['image'] =
            digest !== undefined ? `${finalName}@${digest}` : `${finalName}${newTag !== undefined ? `:${newTag}` : ref.tag !== null ? `:${ref.tag}` : ''}`;
        }
      }
    }
  }
}

function applyLabels(objects: K8sObject[], labels: unknown, where: string): void {
  if (!Array.isArray(labels)) throw new KustomizeError(`${where}: labels must be a list`);
  for (const entry of labels) {
    if (!isObject(entry) || !isObject(entry['pairs'])) throw new KustomizeError(`${where}: a labels entry needs pairs`);
    for (const k of Object.keys(entry))
      if (!['pairs', 'includeSelectors', 'includeTemplates'].includes(k)) throw new KustomizeError(`${where}: labels.${k} is not supported`);
    if (entry['includeSelectors'] === true) throw new KustomizeError(`${where}: labels.includeSelectors: true is not supported`);
    const pairs = entry['pairs'] as Record<string, string>;
    for (const o of objects) {
      o.metadata.labels = { ...(o.metadata.labels ?? {}), ...pairs };
      if (entry['includeTemplates'] === true) {
        // as kustomize: pod templates, and a CronJob's job template too
        const spec = o['spec'];
        const jobTemplate = isObject(spec) ? spec['jobTemplate'] : undefined;
        for (const template of [...(isObject(jobTemplate) ? [jobTemplate] : []), ...podTemplatesOf(o)]) {
          const meta = isObject(template['metadata']) ? template['metadata'] : (template['metadata'] = {});
          meta['labels'] = { ...(isObject(meta['labels']) ? meta['labels'] : {}), ...pairs };
        }
      }
    }
  }
}

/** Renders the kustomization in `dir` (like `kustomize build dir`, within the supported subset). */
export function kustomizeBuild(dir: string): K8sObject[] {
  const file = join(dir, 'kustomization.yaml');
  const [k, ...more] = readYamlDocuments(file);
  if (!isObject(k) || more.length > 0) throw new KustomizeError(`${file}: must hold one Kustomization`);
  if (k['apiVersion'] !== 'kustomize.config.k8s.io/v1beta1' || k['kind'] !== 'Kustomization')
    throw new KustomizeError(`${file}: not a kustomize.config.k8s.io/v1beta1 Kustomization`);
  for (const key of Object.keys(k)) if (!SUPPORTED_FIELDS.has(key)) throw new KustomizeError(`${file}: field '${key}' is outside the supported subset`);

  // resources
  const objects: K8sObject[] = [];
  const resources = k['resources'] ?? [];
  if (!Array.isArray(resources)) throw new KustomizeError(`${file}: resources must be a list`);
  for (const r of resources) {
    if (typeof r !== 'string') throw new KustomizeError(`${file}: a resource must be a path`);
    const path = resolve(dir, r);
    let isDir: boolean;
    try {
      isDir = statSync(path).isDirectory();
    } catch {
      throw new KustomizeError(`${file}: resource ${r} does not exist`);
    }
    if (isDir) objects.push(...kustomizeBuild(path));
    else objects.push(...readYamlDocuments(path).map((d, i) => asK8sObject(d, `${path} document ${i + 1}`)));
  }

  // patches
  const patches = k['patches'] ?? [];
  if (!Array.isArray(patches)) throw new KustomizeError(`${file}: patches must be a list`);
  for (const p of patches) {
    if (!isObject(p) || typeof p['path'] !== 'string' || Object.keys(p).length !== 1)
      throw new KustomizeError(`${file}: only '- path: file' patches are supported`);
    const patchPath = resolve(dir, p['path']);
    const docs = readYamlDocuments(patchPath);
    if (docs.length !== 1) throw new KustomizeError(`${patchPath}: a patch file holds one document`);
    const patch = asK8sObject(docs[0], patchPath);
    const matches = objects
      .map((o, i) => [o, i] as const)
      .filter(([o]) => o.kind === patch.kind && o.metadata.name === patch.metadata.name && o.apiVersion.split('/')[0] === patch.apiVersion.split('/')[0]);
    if (matches.length !== 1)
      throw new KustomizeError(`${patchPath}: the patch targets ${patch.kind}/${patch.metadata.name}, which matches ${matches.length} resources`);
    const [target, index] = matches[0] as readonly [K8sObject, number];
    objects[index] = strategicMerge(target, patch, isBuiltin(target.apiVersion)) as K8sObject;
  }

  // namespace
  if (k['namespace'] !== undefined) {
    if (typeof k['namespace'] !== 'string') throw new KustomizeError(`${file}: namespace must be a string`);
    for (const o of objects) o.metadata.namespace = k['namespace'];
  }
  if (k['labels'] !== undefined) applyLabels(objects, k['labels'], file);
  if (k['images'] !== undefined) applyImages(objects, k['images'], file);

  const ids = new Set<string>();
  for (const o of objects) {
    const id = `${o.apiVersion.split('/')[0]}|${o.kind}|${o.metadata.namespace ?? ''}|${o.metadata.name}`;
    if (ids.has(id)) throw new KustomizeError(`${file}: ${o.kind}/${o.metadata.name} is defined twice`);
    ids.add(id);
  }
  return objects;
}
