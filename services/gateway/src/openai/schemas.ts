/**
 * @module openai/schemas
 * Request bodies of /v1/completions and /v1/chat/completions, parsed with zod at the route edge.
 * Unknown fields are ignored (as OpenAI-compatible servers do); fields this server cannot honour
 * (n > 1, echo, logprobs, tools, penalties, …) are refused with a 400 naming the field rather than
 * silently ignored. Range checks that depend on config (max_tokens) happen in generation.ts.
 */
import { z } from 'zod';
import { ID_PATTERN, MAX_STOP_SEQUENCES, MAX_STOP_SEQUENCE_CHARS } from '@csa2/jobs';
import { invalidRequest, type ApiError } from '../errors.js';

const tokenId = z.number().int().nonnegative();
/** Stop sequences travel in the decode job's payload: bounded like every payload field. */
const stopSequence = z.string().max(MAX_STOP_SEQUENCE_CHARS, `a stop sequence has at most ${MAX_STOP_SEQUENCE_CHARS} characters`);

const samplingFields = {
  model: z.string({ error: 'you must provide a model parameter' }).min(1, 'you must provide a model parameter'),
  max_tokens: z.number().int().nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0, 'must be greater than 0').max(1).nullish(),
  seed: z.number().int().min(Number.MIN_SAFE_INTEGER).max(Number.MAX_SAFE_INTEGER).nullish(),
  stop: z.union([stopSequence, z.array(stopSequence).max(MAX_STOP_SEQUENCES, `at most ${MAX_STOP_SEQUENCES} stop sequences`)]).nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().nullish() }).nullish(),
  n: z.number().int().nullish(),
  presence_penalty: z.number().nullish(),
  frequency_penalty: z.number().nullish(),
  logit_bias: z.record(z.string(), z.number()).nullish(),
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
  echo: z.boolean().nullish(),
  best_of: z.number().int().nullish(),
  logprobs: z.number().int().nullish(),
  suffix: z.string().nullish(),
});
export type CompletionRequest = z.infer<typeof CompletionRequestSchema>;

const textPart = z.object({ type: z.literal('text'), text: z.string() });

const ChatMessageSchema = z.object({
  role: z.enum(['system', 'developer', 'user', 'assistant'], { error: "must be one of 'system', 'developer', 'user', 'assistant' (tool messages are not supported)" }),
  content: z.union([z.string(), z.array(textPart), z.null()], { error: 'must be a string or an array of text parts' }).optional(),
  name: z.string().optional(),
  tool_calls: z.array(z.unknown()).nullish(),
});

export const ChatRequestSchema = z.object({
  ...samplingFields,
  messages: z.array(ChatMessageSchema).min(1, 'must contain at least one message'),
  max_completion_tokens: z.number().int().nullish(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().nullish(),
  tools: z.array(z.unknown()).nullish(),
  functions: z.array(z.unknown()).nullish(),
  tool_choice: z.unknown().optional(),
  response_format: z.object({ type: z.string() }).nullish(),
});
export type ChatRequest = z.infer<typeof ChatRequestSchema>;

function paramOf(path: readonly PropertyKey[]): string | null {
  if (path.length === 0) return null;
  return path.map((p) => (typeof p === 'number' ? `[${p}]` : String(p))).join('.').replaceAll('.[', '[');
}

/** Parses `body` with `schema`; the first issue becomes a 400 naming its parameter. */
export function parseRequest<T>(schema: z.ZodType<T>, body: unknown): T {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw invalidRequest('the request body must be a JSON object');
  const r = schema.safeParse(body);
  if (r.success) return r.data;
  const issue = r.error.issues[0];
  const param = paramOf(issue?.path ?? []);
  const detail = issue?.message ?? 'invalid';
  throw invalidRequest(param === null ? detail : `Invalid value for '${param}': ${detail}`, param, 'invalid_value');
}

/** Refuses a field that is set to something this server does not support. */
function refuse(param: string, message: string): ApiError {
  return invalidRequest(`'${param}' ${message}`, param, 'unsupported_parameter');
}

/** Checks for fields common to both endpoints that are set to unsupported values. */
function checkCommonUnsupported(r: CompletionRequest | ChatRequest): void {
  if (r.n !== null && r.n !== undefined && r.n !== 1) throw refuse('n', 'must be 1: this server generates one choice per request');
  if (r.presence_penalty !== null && r.presence_penalty !== undefined && r.presence_penalty !== 0) throw refuse('presence_penalty', 'is not supported (only 0)');
  if (r.frequency_penalty !== null && r.frequency_penalty !== undefined && r.frequency_penalty !== 0) throw refuse('frequency_penalty', 'is not supported (only 0)');
  if (r.logit_bias !== null && r.logit_bias !== undefined && Object.keys(r.logit_bias).length > 0) throw refuse('logit_bias', 'is not supported');
  if (r.stream !== true && r.stream_options !== null && r.stream_options !== undefined) {
    throw invalidRequest("The 'stream_options' parameter is only allowed when 'stream' is enabled.", 'stream_options', 'invalid_value');
  }
  if (Array.isArray(r.stop) && r.stop.some((s) => s === '')) throw invalidRequest("Invalid value for 'stop': stop sequences must not be empty", 'stop', 'invalid_value');
}

export function checkCompletionUnsupported(r: CompletionRequest): void {
  checkCommonUnsupported(r);
  if (r.echo === true) throw refuse('echo', 'is not supported');
  if (r.best_of !== null && r.best_of !== undefined && r.best_of !== 1) throw refuse('best_of', 'must be 1');
  if (r.logprobs !== null && r.logprobs !== undefined && r.logprobs > 0) throw refuse('logprobs', 'is not supported');
  if (r.suffix !== null && r.suffix !== undefined && r.suffix !== '') throw refuse('suffix', 'is not supported');
}

export function checkChatUnsupported(r: ChatRequest): void {
  checkCommonUnsupported(r);
  if (r.logprobs === true) throw refuse('logprobs', 'is not supported');
  if ((r.tools?.length ?? 0) > 0) throw refuse('tools', 'are not supported');
  if ((r.functions?.length ?? 0) > 0) throw refuse('functions', 'are not supported');
  if (r.response_format !== null && r.response_format !== undefined && r.response_format.type !== 'text') {
    throw refuse('response_format', `type '${r.response_format.type}' is not supported (only 'text')`);
  }
  if (r.max_tokens !== null && r.max_tokens !== undefined && r.max_completion_tokens !== null && r.max_completion_tokens !== undefined && r.max_tokens !== r.max_completion_tokens) {
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
    if ((m.tool_calls?.length ?? 0) > 0) throw invalidRequest(`Invalid value for 'messages[${i}].tool_calls': tool calls are not supported`, `messages[${i}].tool_calls`, 'unsupported_parameter');
    const content = m.content === undefined || m.content === null ? '' : typeof m.content === 'string' ? m.content : m.content.map((p) => p.text).join('');
    return { role: m.role === 'developer' ? 'system' : m.role, content };
  });
}
