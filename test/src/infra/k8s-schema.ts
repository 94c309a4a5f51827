/**
 * @module infra/k8s-schema
 * Offline schema validation of Kubernetes and KEDA objects: the JSON-schema validators that
 * `kubernetes-models` (Kubernetes OpenAPI) and `@kubernetes-models/keda` (KEDA's CRDs) ship, plus
 * the strictness they lack — like `kubectl apply --validate=strict`, a field the schema does not
 * know is an error (those validators only check the fields they know).
 *
 * Unknown fields are found by watching the validator: it reads every property its schema defines
 * (`data.field`) and enumerates the keys of maps (labels, ConfigMap data, trigger metadata). A
 * property of the document that the validator neither read nor enumerated is unknown to the schema.
 * An object the validator never looked into at all is free-form (e.g. an x-kubernetes-preserve-
 * unknown-fields value) and is not judged.
 */
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { Secret } from 'kubernetes-models/v1/Secret';
import { Service } from 'kubernetes-models/v1/Service';
import { PersistentVolumeClaim } from 'kubernetes-models/v1/PersistentVolumeClaim';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { CronJob } from 'kubernetes-models/batch/v1/CronJob';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { ScaledObject } from '@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject';
import { TriggerAuthentication } from '@kubernetes-models/keda/keda.sh/v1alpha1/TriggerAuthentication';

interface ModelClass {
  readonly prototype: { validate(): void };
}

/** apiVersion/kind → the model whose validator checks it. A kind not listed here is an error. */
const MODELS: Readonly<Record<string, ModelClass>> = {
  'v1/ConfigMap': ConfigMap,
  'v1/Secret': Secret,
  'v1/Service': Service,
  'v1/PersistentVolumeClaim': PersistentVolumeClaim,
  'apps/v1/Deployment': Deployment,
  'batch/v1/CronJob': CronJob,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'keda.sh/v1alpha1/ScaledObject': ScaledObject,
  'keda.sh/v1alpha1/TriggerAuthentication': TriggerAuthentication,
};

interface Visit {
  readonly path: string;
  readonly read: Set<string>;
  enumerated: boolean;
}

/** Wraps `doc` so that every property read and key enumeration is recorded per object. */
function traced(doc: unknown): { proxy: unknown; visits: Map<object, Visit> } {
  const visits = new Map<object, Visit>();
  const wrap = (value: unknown, path: string): unknown => {
    if (typeof value !== 'object' || value === null) return value;
    let visit = visits.get(value);
    if (visit === undefined) {
      visit = { path, read: new Set(), enumerated: false };
      visits.set(value, visit);
    }
    const v = visit;
    return new Proxy(value, {
      get(target, key, receiver) {
        const child: unknown = Reflect.get(target, key, receiver);
        if (typeof key !== 'string') return child;
        v.read.add(key);
        return wrap(child, `${path}/${key}`);
      },
      has(target, key) {
        if (typeof key === 'string') v.read.add(key);
        return Reflect.has(target, key);
      },
      ownKeys(target) {
        v.enumerated = true;
        return Reflect.ownKeys(target);
      },
    });
  };
  return { proxy: wrap(doc, ''), visits };
}

/**
 * Validates one object: schema errors first (the validator's message), then one error per unknown
 * field (`unknown field /spec/template/spec/containers/0/readinessProbe/httpGt`). Empty = valid.
 */
export function validateK8sObject(doc: unknown): string[] {
  if (typeof doc !== 'object' || doc === null) return ['not an object'];
  const { apiVersion, kind } = doc as { apiVersion?: unknown; kind?: unknown };
  const model = MODELS[`${String(apiVersion)}/${String(kind)}`];
  if (model === undefined) return [`no schema for ${String(apiVersion)} ${String(kind)} (add its model to MODELS)`];
  const { proxy, visits } = traced(doc);
  const errors: string[] = [];
  try {
    model.prototype.validate.call(proxy);
  } catch (err) {
    errors.push(err instanceof Error ? err.message : String(err));
  }
  for (const [object, visit] of visits) {
    if (Array.isArray(object) || visit.enumerated || visit.read.size === 0) continue;
    for (const key of Object.keys(object)) if (!visit.read.has(key)) errors.push(`unknown field ${visit.path}/${key}`);
  }
  return errors;
}
