/**
 * @module openai/format
 * Response bodies and stream chunks exactly as OpenAI shapes them:
 *
 * - completions: `text_completion` objects with `choices[i].text` (`index` i, one per choice, `n`);
 *   streamed chunks are the same object with one choice's new text, and a chunk with its
 *   `finish_reason` ends each choice;
 * - chat: `chat.completion` with `choices[i].message`; streamed `chat.completion.chunk` objects with
 *   `choices[0].delta` of one choice each (its first carries the role, then content pieces, its last
 *   an empty delta and `finish_reason`);
 * - with logprobs asked, each choice (and each streamed chunk with text or tokens) carries its tokens'
 *   logprobs in the endpoint's shape (openai/logprobs.ts), else `logprobs: null`;
 * - with `stream_options.include_usage`, every chunk carries `usage: null` and one more chunk follows
 *   the finish chunks with `choices: []` and the usage (the prompt once, the choices' tokens summed).
 */
import type { AssembledChoice, ChoiceDelta } from '../choice-assembly.js';
import type { Endpoint } from '../metrics.js';
import { chatLogprobs, completionLogprobs, type ChatLogprobs, type CompletionLogprobs, type TokenLogprobs } from './logprobs.js';
import type { FinishReason, OpenAiUsage } from './usage.js';

export interface ResponseMeta {
  readonly id: string;
  readonly created: number;
  readonly model: string;
  readonly endpoint: Endpoint;
  readonly includeUsage: boolean;
  /** Alternatives per token when the request asked for logprobs (completions `logprobs`, chat `top_logprobs`), else null. */
  readonly logprobs: number | null;
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

/** The logprobs object of some tokens in the endpoint's shape; null when the request asked for none. */
function logprobsOf(meta: ResponseMeta, tokens: readonly TokenLogprobs[], textOffset: number): CompletionLogprobs | ChatLogprobs | null {
  if (meta.logprobs === null) return null;
  return meta.endpoint === 'chat' ? chatLogprobs(tokens, { topN: meta.logprobs }) : completionLogprobs(tokens, { topN: meta.logprobs, textOffset });
}

/** A chat stream's first chunk for a choice: the assistant role, empty content. Null for completions. */
export function roleChunk(meta: ResponseMeta, index: number): Record<string, unknown> | null {
  if (meta.endpoint !== 'chat') return null;
  return withUsageNull(meta, { ...chunkBase(meta), choices: [{ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] });
}

/** A chunk carrying a choice's new text, and its tokens' logprobs when the request asked for them. */
export function textChunk(meta: ResponseMeta, delta: ChoiceDelta): Record<string, unknown> {
  const logprobs = logprobsOf(meta, delta.tokens, delta.textOffset);
  const choice =
    meta.endpoint === 'chat'
      ? { index: delta.choice, delta: { content: delta.text }, logprobs, finish_reason: null }
      : { index: delta.choice, text: delta.text, logprobs, finish_reason: null };
  return withUsageNull(meta, { ...chunkBase(meta), choices: [choice] });
}

/** The chunk that ends a choice. */
export function finishChunk(meta: ResponseMeta, index: number, finishReason: FinishReason): Record<string, unknown> {
  const choice =
    meta.endpoint === 'chat'
      ? { index, delta: {}, logprobs: null, finish_reason: finishReason }
      : { index, text: '', logprobs: null, finish_reason: finishReason };
  return withUsageNull(meta, { ...chunkBase(meta), choices: [choice] });
}

/** The usage chunk sent after the finish chunks when include_usage is set. */
export function usageChunk(meta: ResponseMeta, usage: OpenAiUsage): Record<string, unknown> {
  return { ...chunkBase(meta), choices: [], usage };
}

/** The whole (non-streamed) response body: every choice, in order. */
export function completionBody(meta: ResponseMeta, choices: readonly AssembledChoice[], usage: OpenAiUsage): Record<string, unknown> {
  const base = {
    id: meta.id,
    object: meta.endpoint === 'chat' ? 'chat.completion' : 'text_completion',
    created: meta.created,
    model: meta.model,
    system_fingerprint: null,
  };
  return {
    ...base,
    choices: choices.map((c) =>
      meta.endpoint === 'chat'
        ? {
            index: c.index,
            message: { role: 'assistant', content: c.text, refusal: null },
            logprobs: logprobsOf(meta, c.tokens, 0),
            finish_reason: c.finishReason,
          }
        : { index: c.index, text: c.text, logprobs: logprobsOf(meta, c.tokens, 0), finish_reason: c.finishReason },
    ),
    usage,
  };
}
