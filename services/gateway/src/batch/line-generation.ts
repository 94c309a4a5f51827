/**
 * @module batch/line-generation
 * Waits for one batch line's generation and builds the response body a direct, non-streamed call
 * answers (the same assembly of choices and formatter, `completionBody`: `n`, `logprobs` and `echo`
 * answer as they do directly): the line's request streams are relayed from their
 * start with relayStream, so a driver that restarted picks up a line mid-generation or after it
 * ended (the stream outlives its request by STREAM_TTL_SECONDS) without running it again.
 *
 * Unlike an interactive request, a line is not tracked for shutdown, its latency is not observed in
 * the interactive histograms, and its deadline is the batch's expiry, not CSA2_REQUEST_TIMEOUT_MS.
 */
import { manifestObjectKey } from '@csa2/artifacts';
import { promptDocumentId, requestDecodeJobId, requestPrefillJobId } from '@csa2/jobs';
import { ApiError, workerError } from '../errors.js';
import type { GatewayDeps } from '../capabilities.js';
import { choiceAssembly, responseMeta, type GenerationDeps, type GenerationPlan } from '../generation.js';
import { completionBody } from '../openai/format.js';
import type { OpenAiUsage } from '../openai/usage.js';
import { relayStream } from '../relay.js';

/** The capabilities this module takes. */
export type LineGenerationDeps = Pick<GatewayDeps, 'store' | 'logger'> & GenerationDeps;

export type GenerationLineResult =
  | { readonly kind: 'done'; readonly body: Record<string, unknown>; readonly usage: OpenAiUsage }
  | { readonly kind: 'cancelled' }
  /** The driver stopped following the line (shutdown): it keeps running and is picked up again. */
  | { readonly kind: 'detached' };

/** Relays the line's streams (one per choice) to their end. Throws an ApiError for a failed line. */
export async function collectGeneration(
  deps: LineGenerationDeps,
  plan: GenerationPlan,
  options: { readonly deadlineMs: number; readonly signal: AbortSignal },
): Promise<GenerationLineResult> {
  const assembly = choiceAssembly(deps, plan);
  try {
    const entries = relayStream(deps, {
      requestId: plan.requestId,
      decodeJobId: requestDecodeJobId(plan.requestId),
      prefillJobId: plan.prefillPrefix !== null ? requestPrefillJobId(plan.requestId) : null,
      deadlineMs: options.deadlineMs,
      signal: options.signal,
      choices: plan.request.n,
    });
    for await (const { choice, entry } of entries) {
      if (entry.kind === 'error') throw workerError(entry.code, entry.message);
      if (entry.kind === 'final' && entry.finishReason === 'cancelled') return { kind: 'cancelled' };
      assembly.push(choice, entry);
      if (assembly.done) {
        const usage = assembly.usage({ promptTokens: plan.promptTokens });
        // the body a direct, non-streamed call answers
        return { kind: 'done', body: completionBody({ ...responseMeta(deps, plan), includeUsage: false }, assembly.choices(), usage), usage };
      }
    }
    return { kind: 'detached' };
  } catch (err) {
    if (err instanceof ApiError && err.code === 'timeout') return { kind: 'cancelled' };
    throw err;
  }
}

/** A long prompt's artifact serves its line only: its manifest goes once the line ended (chunks stay, content-addressed). */
export async function dropPromptArtifact(deps: LineGenerationDeps, plan: GenerationPlan): Promise<void> {
  if (plan.route !== 'prefill') return;
  try {
    await deps.store.delete(manifestObjectKey(plan.request.tenant, promptDocumentId(plan.requestId)));
  } catch (err) {
    deps.logger.debug({ requestId: plan.requestId, err: err instanceof Error ? err.message : String(err) }, 'prompt artifact cleanup skipped');
  }
}
