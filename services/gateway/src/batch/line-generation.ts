/**
 * @module batch/line-generation
 * Waits for one batch line's generation and builds the response body a direct, non-streamed call
 * answers (the same formatter, `completionBody`): the line's request stream is relayed from its
 * start with relayStream, so a driver that restarted picks up a line mid-generation or after it
 * ended (the stream outlives its request by STREAM_TTL_SECONDS) without running it again.
 *
 * Unlike an interactive request, a line is not tracked for shutdown, its latency is not observed in
 * the interactive histograms, and its deadline is the batch's expiry, not CSA2_REQUEST_TIMEOUT_MS.
 */
import { manifestObjectKey } from '@csa2/artifacts';
import { promptDocumentId, requestDecodeJobId, requestPrefillJobId } from '@csa2/jobs';
import { ApiError, workerError } from '../errors.js';
import type { GatewayDeps } from '../deps.js';
import type { GenerationPlan } from '../generation.js';
import { completionBody, toOpenAiUsage, type OpenAiUsage } from '../openai/format.js';
import { relayStream } from '../relay.js';

export type GenerationLineResult =
  | { readonly kind: 'done'; readonly body: Record<string, unknown>; readonly usage: OpenAiUsage }
  | { readonly kind: 'cancelled' }
  /** The driver stopped following the line (shutdown): it keeps running and is picked up again. */
  | { readonly kind: 'detached' };

/** Relays the line's stream to its end. Throws an ApiError for a failed line. */
export async function collectGeneration(deps: GatewayDeps, plan: GenerationPlan, options: { readonly deadlineMs: number; readonly signal: AbortSignal }): Promise<GenerationLineResult> {
  let text = '';
  let tokens = 0;
  try {
    const entries = relayStream(deps, {
      requestId: plan.requestId,
      decodeJobId: requestDecodeJobId(plan.requestId),
      prefillJobId: plan.prefillPrefix !== null ? requestPrefillJobId(plan.requestId) : null,
      deadlineMs: options.deadlineMs,
      signal: options.signal,
    });
    for await (const entry of entries) {
      if (entry.kind === 'prompt') continue;
      if (entry.kind === 'token') {
        tokens += 1;
        text += entry.text;
        continue;
      }
      if (entry.kind === 'error') throw workerError(entry.code, entry.message);
      if (entry.finishReason === 'cancelled') return { kind: 'cancelled' };
      text += entry.text ?? '';
      const usage = toOpenAiUsage(entry.usage, { promptTokens: plan.promptTokens, completionTokens: tokens, cachedTokens: 0 });
      const meta = { id: plan.requestId, created: Math.floor(plan.acceptedAtMs / 1000), model: deps.model.name, endpoint: plan.request.endpoint, includeUsage: false };
      return { kind: 'done', body: completionBody(meta, text, entry.finishReason, usage), usage };
    }
    return { kind: 'detached' };
  } catch (err) {
    if (err instanceof ApiError && err.code === 'timeout') return { kind: 'cancelled' };
    throw err;
  }
}

/** A long prompt's artifact serves its line only: its manifest goes once the line ended (chunks stay, content-addressed). */
export async function dropPromptArtifact(deps: GatewayDeps, plan: GenerationPlan): Promise<void> {
  if (plan.route !== 'prefill') return;
  try {
    await deps.store.delete(manifestObjectKey(plan.request.tenant, promptDocumentId(plan.requestId)));
  } catch (err) {
    deps.logger.debug({ requestId: plan.requestId, err: err instanceof Error ? err.message : String(err) }, 'prompt artifact cleanup skipped');
  }
}
