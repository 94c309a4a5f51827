/**
 * @module openai/usage
 * The `usage` object of OpenAI's answers (the prompt once, the choices' tokens summed; cached prompt
 * tokens in `prompt_tokens_details`) made from a worker's, and the finish reasons a choice ends with.
 * Shared by the choice assembly (choice-assembly.ts) and the response shapes (openai/format.ts).
 */
import type { Usage } from '@csa2/jobs';

export type FinishReason = 'stop' | 'length';

export interface OpenAiUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

/** Normalizes a worker's usage (fields checked, totals recomputed) with fallbacks known to the gateway. */
export function toOpenAiUsage(
  usage: Usage | null | undefined,
  fallback: { promptTokens: number; completionTokens: number; cachedTokens: number },
): OpenAiUsage {
  const int = (v: unknown, d: number): number => (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : d);
  const prompt = int(usage?.prompt_tokens, fallback.promptTokens);
  const completion = int(usage?.completion_tokens, fallback.completionTokens);
  const cached = Math.min(prompt, int(usage?.prompt_tokens_details?.cached_tokens, fallback.cachedTokens));
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, prompt_tokens_details: { cached_tokens: cached } };
}
