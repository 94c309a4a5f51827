/**
 * @module requests/completions
 * A /v1/completions or /v1/chat/completions body → the GenerationRequest it stands for: parsed
 * (schemas/completions), checked, and tokenized in the gateway (raw prompts get the tokenizer's BOS
 * unless a document precedes them; chat uses the tokenizer's chat template, whose BOS is dropped
 * after a document). The routes, batch lines and /tokenize all build prompts here.
 */
import { validateTokenIds } from '@csa2/core';
import type { GatewayDeps } from '../capabilities.js';
import { invalidRequest } from '../errors.js';
import type { GenerationRequest, SamplingOptions } from '../generation.js';
import { TokenLimitError } from '../tokenize-pool.js';
import {
  ChatRequestSchema,
  CompletionRequestSchema,
  checkChatUnsupported,
  checkCompletionUnsupported,
  normalizeMessages,
  normalizePrompt,
  parseLogitBias,
  type ChatRequest,
  type CompletionRequest,
} from '../schemas/completions.js';
import { parseRequest } from '../schemas/parse.js';

/** The capabilities this module takes. */
export type CompletionRequestDeps = Pick<GatewayDeps, 'limits' | 'model' | 'tokenize' | 'tokenizer'>;

function stopList(stop: string | readonly string[] | null | undefined): string[] {
  if (stop === null || stop === undefined) return [];
  if (typeof stop === 'string') return stop === '' ? [] : [stop];
  return [...stop];
}

/** The sampling options the request set to something other than their no-op value. */
function samplingOptions(body: CompletionRequest | ChatRequest, vocabLimit: number): SamplingOptions {
  const logitBias = parseLogitBias(body.logit_bias, vocabLimit);
  const topK = body.top_k ?? 0;
  return {
    ...(topK > 0 ? { topK } : {}),
    ...(body.min_p !== null && body.min_p !== undefined && body.min_p > 0 ? { minP: body.min_p } : {}),
    ...(body.repetition_penalty !== null && body.repetition_penalty !== undefined && body.repetition_penalty !== 1
      ? { repetitionPenalty: body.repetition_penalty }
      : {}),
    ...(body.presence_penalty !== null && body.presence_penalty !== undefined && body.presence_penalty !== 0 ? { presencePenalty: body.presence_penalty } : {}),
    ...(body.frequency_penalty !== null && body.frequency_penalty !== undefined && body.frequency_penalty !== 0
      ? { frequencyPenalty: body.frequency_penalty }
      : {}),
    ...(logitBias.length > 0 ? { logitBias } : {}),
  };
}

function sampling(
  body: CompletionRequest | ChatRequest,
  vocabLimit: number,
): Pick<GenerationRequest, 'n' | 'temperature' | 'topP' | 'seed' | 'samplingOptions' | 'stop' | 'ignoreEos' | 'stream' | 'includeUsage'> {
  return {
    n: body.n ?? 1,
    temperature: body.temperature ?? 1,
    topP: body.top_p ?? 1,
    seed: body.seed ?? null,
    samplingOptions: samplingOptions(body, vocabLimit),
    stop: stopList(body.stop),
    ignoreEos: body.ignore_eos ?? false,
    stream: body.stream ?? false,
    includeUsage: body.stream === true && body.stream_options?.include_usage === true,
  };
}

/** A prompt refused by the tokenizer for its length: the 400 planGeneration gives, said before tokenizing it all. */
function tooLong(err: unknown, deps: CompletionRequestDeps, param: string): never {
  if (err instanceof TokenLimitError) {
    throw invalidRequest(
      `This model's maximum prompt length is ${deps.limits.maxPromptTokens} tokens. However, your prompt has at least ${err.tokensAtLeast} tokens. Please reduce the length of the prompt.`,
      param,
      'context_length_exceeded',
    );
  }
  throw err;
}

/**
 * The token ids of a completion prompt as the model sees them after the document (if any): text is
 * tokenized with the tokenizer's BOS in front unless a document precedes it (`addBos` false drops
 * it too); token ids are checked against the vocabulary and passed as given. `bosAdded`: whether the
 * first id is a BOS the client did not send (an echo leaves it out).
 */
export async function completionPrompt(
  deps: CompletionRequestDeps,
  prompt: CompletionRequest['prompt'],
  options: { documentId: string | null; addBos?: boolean },
): Promise<{ ids: number[]; bosAdded: boolean }> {
  const normalized = normalizePrompt(prompt);
  if (normalized.kind === 'text') {
    const ids = await deps.tokenize.encode(normalized.text, deps.limits.maxPromptTokens).catch((err: unknown) => tooLong(err, deps, 'prompt'));
    const bosAdded = deps.tokenizer.bosId !== null && options.documentId === null && options.addBos !== false;
    if (bosAdded) ids.unshift(deps.tokenizer.bosId as number);
    return { ids, bosAdded };
  }
  const ids = [...normalized.ids];
  try {
    validateTokenIds(ids, deps.model.vocabSize);
  } catch (err) {
    throw invalidRequest(`Invalid value for 'prompt': ${err instanceof Error ? err.message : String(err)}`, 'prompt', 'invalid_value');
  }
  return { ids, bosAdded: false };
}

/** completionPrompt's ids alone. */
export async function completionPromptIds(
  deps: CompletionRequestDeps,
  prompt: CompletionRequest['prompt'],
  options: { documentId: string | null; addBos?: boolean },
): Promise<number[]> {
  return (await completionPrompt(deps, prompt, options)).ids;
}

/** The token ids of chat messages as the model sees them: the tokenizer's chat template, whose BOS is dropped after a document. */
export async function chatPromptIds(deps: CompletionRequestDeps, messages: ChatRequest['messages'], options: { documentId: string | null }): Promise<number[]> {
  const ids = await deps.tokenize
    .applyChatTemplate(normalizeMessages(messages), deps.limits.maxPromptTokens)
    .catch((err: unknown) => tooLong(err, deps, 'messages'));
  if (options.documentId !== null && deps.tokenizer.bosId !== null && ids[0] === deps.tokenizer.bosId) ids.shift();
  return ids;
}

/** A /v1/completions body → the GenerationRequest it stands for (parsed, checked, tokenized). Throws ApiError 400s. */
export async function completionRequest(deps: CompletionRequestDeps, tenant: string, raw: unknown, reqId?: string): Promise<GenerationRequest> {
  const body = parseRequest(CompletionRequestSchema, raw);
  checkCompletionUnsupported(body);
  const documentId = body.document_id ?? null;
  const prompt = await completionPrompt(deps, body.prompt, { documentId });
  return {
    ...(reqId !== undefined ? { reqId } : {}),
    endpoint: 'completions',
    tenant,
    model: body.model,
    promptIds: prompt.ids,
    promptParam: 'prompt',
    documentId,
    maxTokens: body.max_tokens ?? null,
    maxTokensParam: 'max_tokens',
    ...sampling(body, vocabLimit(deps)),
    logprobs: body.logprobs ?? null,
    echo: body.echo === true ? { skipTokens: prompt.bosAdded ? 1 : 0 } : null,
  };
}

/** A /v1/chat/completions body → the GenerationRequest it stands for. Throws ApiError 400s. */
export async function chatRequest(deps: CompletionRequestDeps, tenant: string, raw: unknown, reqId?: string): Promise<GenerationRequest> {
  const body = parseRequest(ChatRequestSchema, raw);
  checkChatUnsupported(body);
  const documentId = body.document_id ?? null;
  const useCompletionTokens = body.max_completion_tokens !== null && body.max_completion_tokens !== undefined;
  return {
    ...(reqId !== undefined ? { reqId } : {}),
    endpoint: 'chat',
    tenant,
    model: body.model,
    promptIds: await chatPromptIds(deps, body.messages, { documentId }),
    promptParam: 'messages',
    documentId,
    maxTokens: (useCompletionTokens ? body.max_completion_tokens : body.max_tokens) ?? null,
    maxTokensParam: useCompletionTokens ? 'max_completion_tokens' : 'max_tokens',
    ...sampling(body, vocabLimit(deps)),
    logprobs: body.logprobs === true ? (body.top_logprobs ?? 0) : null,
    echo: null,
  };
}

/** Ids the workers can sample (engine: min(tokenizer vocabulary, model rows)): logit_bias keys must be below. */
function vocabLimit(deps: CompletionRequestDeps): number {
  return Math.min(deps.tokenizer.vocabSize, deps.model.vocabSize);
}
