/**
 * @module cli/gc
 * `csa2 gc`: garbage collection of the artifact store (@csa2/artifacts gc: chunks no manifest
 * references, older than the grace period and not protected by a live ingest; abandoned ingest
 * markers; prompt-artifact manifests past their TTL). Prints one line per tenant and the totals, or
 * the report as JSON. Needs no model: it only talks to the store.
 */
import { parseArgs } from 'node:util';
import {
  DEFAULT_GC_GRACE_MS,
  DEFAULT_INGEST_MARKER_TTL_MS,
  DEFAULT_PROMPT_TTL_MS,
  collectGarbage,
  openStore,
  type GcReport,
  type GcTenantReport,
} from '@csa2/artifacts';
import { InputError } from '@csa2/core';

export const GC_USAGE = `usage: csa2 gc --store URL [--grace-ms N] [--marker-ttl-ms N] [--prompt-ttl-ms N|off]
               [--tenant T ...] [--dry-run] [--json]

  Deletes chunk objects no manifest references once they are older than the grace period (and no
  ingest started before them is still running), abandoned ingest markers, and prompt-artifact
  manifests older than the prompt TTL. --dry-run reports what would go and deletes nothing.
  defaults: --grace-ms ${DEFAULT_GC_GRACE_MS} (1 h), --marker-ttl-ms ${DEFAULT_INGEST_MARKER_TTL_MS} (15 min), --prompt-ttl-ms ${DEFAULT_PROMPT_TTL_MS} (24 h)`;

/** Below this grace period gc warns: it must exceed clock skew and the time an ingest takes to adopt what it found. */
export const GC_GRACE_WARNING_MS = 60_000;

export interface GcCommand {
  readonly store: string;
  readonly graceMs: number;
  readonly markerTtlMs: number;
  readonly promptTtlMs: number | null;
  readonly tenants: readonly string[] | null;
  readonly dryRun: boolean;
  readonly json: boolean;
}

/** A command line `csa2 gc` cannot run (missing --store, an unknown flag): exit 2 with the usage. */
export class GcUsageError extends Error {
  override readonly name = 'GcUsageError';
}

function msOption(value: string | undefined, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!/^[0-9]+$/.test(value) || !Number.isSafeInteger(n))
    throw new InputError(`--${name} must be a non-negative integer number of milliseconds, got "${value}"`);
  return n;
}

/**
 * Parses the arguments after `csa2 gc`.
 * @throws GcUsageError for a malformed command line, InputError for a bad value.
 * @example parseGcArgs(['--store', 's3://bucket/prod', '--dry-run'])
 */
export function parseGcArgs(args: readonly string[]): GcCommand {
  let values: Record<string, string | boolean | string[] | undefined>;
  try {
    values = parseArgs({
      args: [...args],
      options: {
        store: { type: 'string' },
        'grace-ms': { type: 'string' },
        'marker-ttl-ms': { type: 'string' },
        'prompt-ttl-ms': { type: 'string' },
        tenant: { type: 'string', multiple: true },
        'dry-run': { type: 'boolean' },
        json: { type: 'boolean' },
      },
      allowPositionals: false,
      strict: true,
    }).values;
  } catch (err) {
    throw new GcUsageError((err as Error).message);
  }
  const str = (name: string): string | undefined => (typeof values[name] === 'string' ? (values[name] as string) : undefined);
  const store = str('store');
  if (store === undefined || store === '') throw new GcUsageError('--store URL is required');
  const promptTtl = str('prompt-ttl-ms');
  const tenants = Array.isArray(values['tenant']) ? values['tenant'] : null;
  return {
    store,
    graceMs: msOption(str('grace-ms'), 'grace-ms', DEFAULT_GC_GRACE_MS),
    markerTtlMs: msOption(str('marker-ttl-ms'), 'marker-ttl-ms', DEFAULT_INGEST_MARKER_TTL_MS),
    promptTtlMs: promptTtl === 'off' ? null : msOption(promptTtl, 'prompt-ttl-ms', DEFAULT_PROMPT_TTL_MS),
    tenants,
    dryRun: values['dry-run'] === true,
    json: values['json'] === true,
  };
}

const mb = (bytes: number): string => `${(bytes / 1e6).toFixed(1)} MB`;

/** One line about a tenant. */
export function describeTenant(r: GcTenantReport, dryRun: boolean): string {
  const head = `tenant ${r.tenant}: ${r.chunks} chunks (${mb(r.chunkBytes)}), ${r.manifests} manifests, ${r.liveMarkers} ingests running`;
  if (r.skipped !== null) return `${head}; skipped: ${r.skipped}`;
  const verb = dryRun ? 'would delete' : 'deleted';
  return (
    `${head}; ${verb} ${r.chunksDeleted} chunks (${mb(r.chunkBytesDeleted)}), ${r.markersDeleted} abandoned markers, ${r.promptManifestsDeleted} expired prompt manifests; ` +
    `kept ${r.unreferencedKept} unreferenced chunks in their grace period${r.keptTouched > 0 ? `, ${r.keptTouched} touched by an ingest meanwhile` : ''}`
  );
}

/** The totals lines. */
export function describeReport(report: GcReport): string[] {
  const what = report.dryRun ? 'reclaimable (dry run, nothing deleted)' : 'reclaimed';
  return [`objects ${what}: ${report.objectsReclaimed}`, `bytes ${what}: ${report.bytesReclaimed} (${mb(report.bytesReclaimed)})`];
}

/**
 * Runs `csa2 gc ARGS`: returns the exit code (2 for a usage error, printed with the usage).
 * Store and input errors propagate (the CLI prints them as one line).
 */
export async function cmdGc(
  args: readonly string[],
  out: (line: string) => void = (l) => void process.stdout.write(`${l}\n`),
  err: (line: string) => void = (l) => void process.stderr.write(`${l}\n`),
): Promise<number> {
  let cmd: GcCommand;
  try {
    cmd = parseGcArgs(args);
  } catch (error) {
    if (!(error instanceof GcUsageError)) throw error;
    err(`csa2 gc: ${error.message}\n${GC_USAGE}`);
    return 2;
  }
  if (cmd.graceMs < GC_GRACE_WARNING_MS)
    err(
      `csa2 gc: warning: --grace-ms ${cmd.graceMs} is below ${GC_GRACE_WARNING_MS}: chunks an ingest is about to adopt, or that a store clock ahead of this one shows as old, may be deleted`,
    );
  const store = openStore(cmd.store);
  try {
    await store.ping();
    const report = await collectGarbage({
      store,
      graceMs: cmd.graceMs,
      markerTtlMs: cmd.markerTtlMs,
      promptTtlMs: cmd.promptTtlMs,
      dryRun: cmd.dryRun,
      ...(cmd.tenants !== null ? { tenants: cmd.tenants } : {}),
      ...(cmd.json ? {} : { onTenant: (r) => out(describeTenant(r, cmd.dryRun)) }),
    });
    if (cmd.json) out(JSON.stringify(report));
    else for (const line of describeReport(report)) out(line);
    return 0;
  } finally {
    await store.close();
  }
}
