/**
 * @module openai/format
 * Response bodies and stream chunks exactly as OpenAI shapes them:
 *
 * - completions: `text_completion` objects with `choices[0].text`; streamed chunks are the same object
 *   with the new text, the last one carries `finish_reason`;
 * - chat: `chat.completion` with `choices[0].message`; streamed `chat.completion.chunk` objects with
 *   `choices[0].delta` (the first carries the role, then content pieces, the last an empty delta and
 *   `finish_reason`);
 * - with `stream_options.include_usage`, every chunk carries `usage: null` and one more chunk follows
 *   the finish chunk with `choices: []` and the usage.
 */
import type { Usage } from '@csa2/jobs';
import type { Endpoint } from '../metrics.js';

export type FinishReason = 'stop' | 'length';

export interface ResponseMeta {
  readonly id: string;
  readonly created: number;
  readonly model: string;
  readonly endpoint: Endpoint;
  readonly includeUsage: boolean;
}

export interface OpenAiUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

/** Normalizes a worker's usage (fields checked, totals recomputed) with fallbacks known to the gateway. */
export function toOpenAiUsage(usage: Usage | null | undefined, fallback: { promptTokens: number; completionTokens: number; cachedTokens: number }): OpenAiUsage {
  const int = (v: unknown, d: number): number => (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : d);
  const prompt = int(usage?.prompt_tokens, fallback.promptTokens);
  const completion = int(usage?.completion_tokens, fallback.completionTokens);
  const cached = Math.min(prompt, int(usage?.prompt_tokens_details?.cached_tokens, fallback.cachedTokens));
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, prompt_tokens_details: { cached_tokens: cached } };
}

function chunkBase(meta: ResponseMeta): Record<string, unknown> {
  return {
    id: meta.id,
    object: meta.endpoint === 'chat' ? 'chat.completion.chunk' : 'text_completion',
    created: meta.created,
    model: meta.model,
    system_fingerprint: null,
  };
}

function withUsageNull(meta: ResponseMeta, chunk: Record<string, unknown>): Record<string, unknown> {
  return meta.includeUsage ? { ...chunk, usage: null } : chunk;
}

/** The chat stream's first chunk: the assistant role, empty content. Null for completions. */
export function roleChunk(meta: ResponseMeta): Record<string, unknown> | null {
  if (meta.endpoint !== 'chat') return null;
  return withUsageNull(meta, { ...chunkBase(meta), choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] });
}

/** A chunk carrying new text. */
export function textChunk(meta: ResponseMeta, text: string): Record<string, unknown> {
  const choice =
    meta.endpoint === 'chat'
      ? { index: 0, delta: { content: text }, logprobs: null, finish_reason: null }
      : { index: 0, text, logprobs: null, finish_reason: null };
  return withUsageNull(meta, { ...chunkBase(meta), choices: [choice] });
}

/** The chunk that ends the choice. */
export function finishChunk(meta: ResponseMeta, finishReason: FinishReason): Record<string, unknown> {
  const choice =
    meta.endpoint === 'chat'
      ? { index: 0, delta: {}, logprobs: null, finish_reason: finishReason }
      : { index: 0, text: '', logprobs: null, finish_reason: finishReason };
  return withUsageNull(meta, { ...chunkBase(meta), choices: [choice] });
}

/** The usage chunk sent after the finish chunk when include_usage is set. */
export function usageChunk(meta: ResponseMeta, usage: OpenAiUsage): Record<string, unknown> {
  return { ...chunkBase(meta), choices: [], usage };
}

/** The whole (non-streamed) response body. */
export function completionBody(meta: ResponseMeta, text: string, finishReason: FinishReason, usage: OpenAiUsage): Record<string, unknown> {
  if (meta.endpoint === 'chat') {
    return {
      id: meta.id,
      object: 'chat.completion',
      created: meta.created,
      model: meta.model,
      system_fingerprint: null,
      choices: [{ index: 0, message: { role: 'assistant', content: text, refusal: null }, logprobs: null, finish_reason: finishReason }],
      usage,
    };
  }
  return {
    id: meta.id,
    object: 'text_completion',
    created: meta.created,
    model: meta.model,
    system_fingerprint: null,
    choices: [{ index: 0, text, logprobs: null, finish_reason: finishReason }],
    usage,
  };
}
