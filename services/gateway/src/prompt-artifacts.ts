/**
 * @module prompt-artifacts
 * The artifacts of long prompts (`prompt-<requestId>`, written by an encoder for one request) are not
 * the tenant's documents: the routes never show them, and they do not outlive their request.
 *
 * - When a request ends, the gateway deletes its prompt manifest if the prefill job completed
 *   (generation.ts); a prefill still running then sees the request's cancel key (set whenever a
 *   request ends without its answer) and leaves no manifest behind, or deletes the one it just wrote.
 * - What is left anyway (a gateway that died mid-request) expires: every gateway sweeps each of its
 *   tenants' `prompt-*` manifests once a minute (`PROMPT_SWEEP_INTERVAL_MS`) and deletes those whose
 *   request was accepted more than CSA2_PROMPT_ARTIFACT_TTL_MS ago (the manifest's createdAt is the
 *   request's acceptedAtMs). The default, CSA2_REQUEST_TIMEOUT_MS + 60 s, is past the end of any
 *   request: the gateway cancels every request at its timeout.
 *
 * Chunks stay (content-addressed, possibly shared); reclaiming unreferenced ones is the chunk GC's job.
 */
import { manifestObjectKey, parseManifest, tenantPrefix } from '@csa2/artifacts';
import { promptDocumentId } from '@csa2/jobs';
import type { GatewayDeps } from './capabilities.js';
import { RESERVED_DOCUMENT_PREFIX } from './documents.js';

/** The capabilities this module takes. */
export type PromptArtifactDeps = Pick<GatewayDeps, 'store' | 'logger' | 'apiKeys'>;

/** How often a gateway sweeps expired prompt artifacts. */
export const PROMPT_SWEEP_INTERVAL_MS = 60_000;

const MANIFEST_SUFFIX = '/manifest.json';

/** Deletes a request's prompt manifest (absent: nothing to do). */
export async function deletePromptArtifact(deps: PromptArtifactDeps, tenant: string, requestId: string): Promise<void> {
  await deps.store.delete(manifestObjectKey(tenant, promptDocumentId(requestId)));
}

/**
 * One sweep: deletes every prompt manifest of the gateway's tenants created more than `ttlMs` before
 * `nowMs` (an unreadable one too: nothing can use it). Returns how many it deleted. Store errors on
 * one tenant are logged and the sweep goes on with the next.
 */
export async function sweepPromptArtifacts(deps: PromptArtifactDeps, ttlMs: number, nowMs = Date.now()): Promise<number> {
  let deleted = 0;
  for (const tenant of new Set(deps.apiKeys.values())) {
    try {
      const prefix = `${tenantPrefix(tenant)}documents/${RESERVED_DOCUMENT_PREFIX}`;
      for (const { key } of await deps.store.list(prefix)) {
        if (!key.endsWith(MANIFEST_SUFFIX)) continue;
        let createdMs = Number.NaN;
        try {
          createdMs = Date.parse(parseManifest(key, await deps.store.get(key)).createdAt);
        } catch (err) {
          if ((err as { code?: unknown }).code === 'not-found') continue; // deleted meanwhile
        }
        if (Number.isFinite(createdMs) && nowMs - createdMs <= ttlMs) continue;
        await deps.store.delete(key);
        deleted++;
      }
    } catch (err) {
      deps.logger.warn({ tenant, err: err instanceof Error ? err.message : String(err) }, 'prompt artifact sweep failed');
    }
  }
  if (deleted > 0) deps.logger.info({ deleted }, 'expired prompt artifacts deleted');
  return deleted;
}

/** Sweeps every PROMPT_SWEEP_INTERVAL_MS (first after one interval); returns the function that stops it. */
export function startPromptArtifactSweeper(deps: PromptArtifactDeps, ttlMs: number, intervalMs = PROMPT_SWEEP_INTERVAL_MS): () => void {
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    void sweepPromptArtifacts(deps, ttlMs).finally(() => (running = false));
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}

/** True for the id of a long prompt's artifact (never a tenant's document). */
export function isPromptArtifactId(documentId: string): boolean {
  return documentId.startsWith(RESERVED_DOCUMENT_PREFIX);
}
