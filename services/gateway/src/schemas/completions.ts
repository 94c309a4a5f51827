/**
 * @module schemas/completions
 * Request bodies of /v1/completions and /v1/chat/completions, parsed with zod at the route edge.
 * Unknown fields are ignored (as OpenAI-compatible servers do); fields this server cannot honour
 * (suffix, tools, vLLM's min_tokens, beam search, guided decoding, …) are refused with a 400 naming
 * the field rather than silently ignored. The sampling parameters (temperature, top_p, top_k, min_p,
 * repetition/presence/frequency penalties, logit_bias, seed), `n` (with `best_of` equal to it),
 * completions' `logprobs` (0–5, OpenAI's limit) and `echo`, and chat's `logprobs` with `top_logprobs`
 * (0–20) are all honoured. Range checks that depend on config (max_tokens, n) happen in generation.ts.
 */
import { z } from 'zod';
import { ID_PATTERN, MAX_LOGIT_BIAS_ENTRIES, MAX_STOP_SEQUENCES, MAX_STOP_SEQUENCE_CHARS, MAX_TOP_LOGPROBS } from '@csa2/jobs';
import { invalidRequest, type ApiError } from '../errors.js';

const tokenId = z.number().int().nonnegative();
/** Completions' `logprobs` at most: OpenAI's limit for the legacy completions endpoint. */
export const MAX_COMPLETION_LOGPROBS = 5;
/** Stop sequences travel in the decode job's payload: bounded like every payload field. */
const stopSequence = z.string().max(MAX_STOP_SEQUENCE_CHARS, `a stop sequence has at most ${MAX_STOP_SEQUENCE_CHARS} characters`);

const VLLM_UNSUPPORTED_NAMES = [
  'min_tokens',
  'stop_token_ids',
  'bad_words',
  'allowed_token_ids',
  'include_stop_str_in_output',
  'use_beam_search',
  'length_penalty',
  'prompt_logprobs',
  'truncate_prompt_tokens',
  'guided_json',
  'guided_regex',
  'guided_choice',
  'guided_grammar',
  'structured_outputs',
] as const;

/**
 * vLLM request extensions this server does not implement, each with the test for its no-op value
 * (null and absent are always no-ops): any other value is refused by name, never ignored.
 */
const VLLM_UNSUPPORTED: Readonly<Record<(typeof VLLM_UNSUPPORTED_NAMES)[number], (v: unknown) => boolean>> = {
  min_tokens: (v) => v === 0,
  stop_token_ids: (v) => Array.isArray(v) && v.length === 0,
  bad_words: (v) => Array.isArray(v) && v.length === 0,
  allowed_token_ids: () => false,
  include_stop_str_in_output: (v) => v === false,
  use_beam_search: (v) => v === false,
  length_penalty: (v) => v === 1,
  prompt_logprobs: (v) => v === 0,
  truncate_prompt_tokens: () => false,
  guided_json: () => false,
  guided_regex: () => false,
  guided_choice: () => false,
  guided_grammar: () => false,
  structured_outputs: () => false,
};

const samplingFields = {
  model: z.string({ error: 'you must provide a model parameter' }).min(1, 'you must provide a model parameter'),
  max_tokens: z.number().int().nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0, 'must be greater than 0').max(1).nullish(),
  seed: z.number().int().min(Number.MIN_SAFE_INTEGER).max(Number.MAX_SAFE_INTEGER).nullish(),
  stop: z.union([stopSequence, z.array(stopSequence).max(MAX_STOP_SEQUENCES, `at most ${MAX_STOP_SEQUENCES} stop sequences are allowed`)]).nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().nullish() }).nullish(),
  /** Choices from one prefill, each with its own seed (seed + i); at most CSA2_MAX_CHOICES (checked in generation.ts). */
  n: z.number().int().min(1).nullish().describe('Choices generated from one prefill (at most CSA2_MAX_CHOICES, default 8); choice i samples with seed + i'),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  /** Token id (a decimal string) → bias in [-100, 100], added to its logit before sampling. */
  logit_bias: z.record(z.string(), z.number().min(-100).max(100)).nullish(),
  /** vLLM extensions (sampler.ts in @csa2/core defines them): top_k -1 or 0 = off. */
  top_k: z.number().int().min(-1).max(Number.MAX_SAFE_INTEGER).nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  repetition_penalty: z.number().gt(0).nullish(),
  /** Other vLLM extensions, kept so that checkCommonUnsupported can refuse them by name. */
  min_tokens: z.unknown().optional(),
  stop_token_ids: z.unknown().optional(),
  bad_words: z.unknown().optional(),
  allowed_token_ids: z.unknown().optional(),
  include_stop_str_in_output: z.unknown().optional(),
  use_beam_search: z.unknown().optional(),
  length_penalty: z.unknown().optional(),
  prompt_logprobs: z.unknown().optional(),
  truncate_prompt_tokens: z.unknown().optional(),
  guided_json: z.unknown().optional(),
  guided_regex: z.unknown().optional(),
  guided_choice: z.unknown().optional(),
  guided_grammar: z.unknown().optional(),
  structured_outputs: z.unknown().optional(),
  user: z.string().nullish(),
  /** Extension: a stored document (POST /v1/documents) whose tokens precede the prompt. */
  document_id: z.string().regex(ID_PATTERN, 'must match [A-Za-z0-9_-]{1,64}').nullish(),
  /** Extension (as in vLLM): keep generating past end-of-sequence tokens. */
  ignore_eos: z.boolean().nullish(),
};

export const CompletionRequestSchema = z.object({
  ...samplingFields,
  prompt: z.union([z.string(), z.array(tokenId), z.array(z.string()), z.array(z.array(tokenId))], {
    error: 'must be a string, an array of token ids, or a one-element array of either',
  }),
  /** Answer the prompt before each choice's text (with its logprobs when `logprobs` is set); allows `max_tokens: 0`. */
  echo: z.boolean().nullish().describe("Answer the prompt before each choice's text (its tokens first in logprobs); allows max_tokens 0"),
  /** Only equal to `n`: every choice generated is returned. */
  best_of: z.number().int().min(1).nullish().describe('Only equal to n: every choice generated is returned'),
  /** Each token's logprob and the `logprobs` most likely alternatives (0–5, OpenAI's limit). */
  logprobs: z
    .number()
    .int()
    .min(0)
    .max(MAX_COMPLETION_LOGPROBS, `must be at most ${MAX_COMPLETION_LOGPROBS} (OpenAI's limit for completions)`)
    .nullish()
    .describe("Each token's logprob (natural log, after temperature) with this many most likely alternatives (0-5, OpenAI's limit)"),
  suffix: z.string().nullish(),
});
export type CompletionRequest = z.infer<typeof CompletionRequestSchema>;

const textPart = z.object({ type: z.literal('text'), text: z.string() });

const ChatMessageSchema = z.object({
  role: z.enum(['system', 'developer', 'user', 'assistant'], {
    error: "must be one of 'system', 'developer', 'user', 'assistant' (tool messages are not supported)",
  }),
  content: z.union([z.string(), z.array(textPart), z.null()], { error: 'must be a string or an array of text parts' }).optional(),
  name: z.string().optional(),
  tool_calls: z.array(z.unknown()).nullish(),
});

export const ChatRequestSchema = z.object({
  ...samplingFields,
  messages: z.array(ChatMessageSchema).min(1, 'must contain at least one message'),
  max_completion_tokens: z.number().int().nullish(),
  /** Each generated token's logprob in `choices[].logprobs.content`. */
  logprobs: z.boolean().nullish().describe("Each generated token's logprob in choices[].logprobs.content"),
  /** With `logprobs: true`: this many most likely alternatives per token (0–20). */
  top_logprobs: z.number().int().min(0).max(MAX_TOP_LOGPROBS).nullish().describe('With logprobs: true, this many most likely alternatives per token (0-20)'),
  tools: z.array(z.unknown()).nullish(),
  functions: z.array(z.unknown()).nullish(),
  tool_choice: z.unknown().optional(),
  response_format: z.object({ type: z.string() }).nullish(),
});
export type ChatRequest = z.infer<typeof ChatRequestSchema>;

/** Refuses a field that is set to something this server does not support. */
function refuse(param: string, message: string): ApiError {
  return invalidRequest(`'${param}' ${message}`, param, 'unsupported_parameter');
}

/** Checks for fields common to both endpoints that are set to unsupported values. */
function checkCommonUnsupported(r: CompletionRequest | ChatRequest): void {
  const raw = r as unknown as Readonly<Record<string, unknown>>;
  for (const [param, isNoOp] of Object.entries(VLLM_UNSUPPORTED)) {
    const v = raw[param];
    if (v !== undefined && v !== null && !isNoOp(v)) throw refuse(param, 'is not supported by this server');
  }
  if (r.stream !== true && r.stream_options !== null && r.stream_options !== undefined) {
    throw invalidRequest("The 'stream_options' parameter is only allowed when 'stream' is enabled.", 'stream_options', 'invalid_value');
  }
  if (Array.isArray(r.stop) && r.stop.some((s) => s === ''))
    throw invalidRequest("Invalid value for 'stop': stop sequences must not be empty", 'stop', 'invalid_value');
}

export function checkCompletionUnsupported(r: CompletionRequest): void {
  checkCommonUnsupported(r);
  const n = r.n ?? 1;
  if (r.best_of !== null && r.best_of !== undefined && r.best_of !== n) {
    throw invalidRequest(
      `Invalid value for 'best_of': must equal 'n' (${n}): this server returns every choice it generates, got ${r.best_of}.`,
      'best_of',
      'invalid_value',
    );
  }
  if (r.suffix !== null && r.suffix !== undefined && r.suffix !== '') throw refuse('suffix', 'is not supported');
}

export function checkChatUnsupported(r: ChatRequest): void {
  checkCommonUnsupported(r);
  if (r.top_logprobs !== null && r.top_logprobs !== undefined && r.logprobs !== true) {
    throw invalidRequest("Invalid value for 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' is used.", 'top_logprobs', 'invalid_value');
  }
  if ((r.tools?.length ?? 0) > 0) throw refuse('tools', 'are not supported');
  if ((r.functions?.length ?? 0) > 0) throw refuse('functions', 'are not supported');
  if (r.response_format !== null && r.response_format !== undefined && r.response_format.type !== 'text') {
    throw refuse('response_format', `type '${r.response_format.type}' is not supported (only 'text')`);
  }
  if (
    r.max_tokens !== null &&
    r.max_tokens !== undefined &&
    r.max_completion_tokens !== null &&
    r.max_completion_tokens !== undefined &&
    r.max_tokens !== r.max_completion_tokens
  ) {
    throw invalidRequest("'max_tokens' and 'max_completion_tokens' disagree; send one of them", 'max_completion_tokens', 'invalid_value');
  }
}

/** The prompt of a completion request: text or token ids, one prompt only. */
export type NormalizedPrompt = { readonly kind: 'text'; readonly text: string } | { readonly kind: 'ids'; readonly ids: readonly number[] };

export function normalizePrompt(prompt: CompletionRequest['prompt']): NormalizedPrompt {
  if (typeof prompt === 'string') return { kind: 'text', text: prompt };
  if (prompt.length === 0) throw invalidRequest("Invalid value for 'prompt': must not be an empty array", 'prompt', 'invalid_value');
  const first = prompt[0];
  if (typeof first === 'number') return { kind: 'ids', ids: prompt as number[] };
  if (prompt.length > 1) {
    throw invalidRequest(
      `Invalid value for 'prompt': ${prompt.length} prompts were sent; this server completes one prompt per request (send them as separate requests)`,
      'prompt',
      'multiple_prompts_unsupported',
    );
  }
  if (typeof first === 'string') return { kind: 'text', text: first };
  return { kind: 'ids', ids: first as number[] };
}

/** Chat messages as the tokenizer's template takes them ('developer' is a system message). */
export function normalizeMessages(messages: ChatRequest['messages']): { role: 'system' | 'user' | 'assistant'; content: string }[] {
  return messages.map((m, i) => {
    if ((m.tool_calls?.length ?? 0) > 0)
      throw invalidRequest(`Invalid value for 'messages[${i}].tool_calls': tool calls are not supported`, `messages[${i}].tool_calls`, 'unsupported_parameter');
    const content = m.content === undefined || m.content === null ? '' : typeof m.content === 'string' ? m.content : m.content.map((p) => p.text).join('');
    return { role: m.role === 'developer' ? 'system' : m.role, content };
  });
}

/**
 * `logit_bias` as the sampler takes it: [token id, bias] pairs. Keys are token ids as decimal strings
 * below `vocabLimit` (the ids the model can produce); at most MAX_LOGIT_BIAS_ENTRIES of them.
 */
export function parseLogitBias(bias: Readonly<Record<string, number>> | null | undefined, vocabLimit: number): [number, number][] {
  if (bias === null || bias === undefined) return [];
  const entries = Object.entries(bias);
  if (entries.length > MAX_LOGIT_BIAS_ENTRIES) {
    throw invalidRequest(
      `Invalid value for 'logit_bias': ${entries.length} entries; at most ${MAX_LOGIT_BIAS_ENTRIES} are allowed`,
      'logit_bias',
      'invalid_value',
    );
  }
  return entries.map(([key, value]) => {
    const id = /^(0|[1-9][0-9]{0,15})$/.test(key) ? Number(key) : NaN;
    if (!Number.isSafeInteger(id))
      throw invalidRequest(
        `Invalid value for 'logit_bias': the key '${key.slice(0, 32)}' is not a token id (a non-negative integer)`,
        'logit_bias',
        'invalid_value',
      );
    if (id >= vocabLimit)
      throw invalidRequest(`Invalid value for 'logit_bias': token id ${id} is outside the vocabulary [0, ${vocabLimit})`, 'logit_bias', 'invalid_value');
    return [id, value];
  });
}
