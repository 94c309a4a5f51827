/**
 * @module routes/completions
 * POST /v1/completions and POST /v1/chat/completions (OpenAI-compatible). Both parse their body,
 * tokenize in the gateway (raw prompts get the tokenizer's BOS unless a document precedes them;
 * chat uses the tokenizer's chat template, whose BOS is dropped after a document), then hand a
 * GenerationRequest to generation.ts.
 */
import { Hono, type Context } from 'hono';
import { validateTokenIds } from '@csa2/core';
import { invalidRequest, isRedisUnavailable, redisUnavailable } from '../errors.js';
import { enqueueGeneration, planGeneration, plannedTokens, respondGeneration, type GenerationRequest, type SamplingOptions } from '../generation.js';
import type { GatewayDeps } from '../deps.js';
import { TokenLimitError } from '../tokenize-pool.js';
import { releaseBody } from '../middleware/body-budget.js';
import type { TenantVariables } from '../middleware/api-key-auth.js';
import type { RequestIdVariables } from '../middleware/request-id.js';
import { readJson } from '../middleware/json-body.js';
import {
  ChatRequestSchema,
  CompletionRequestSchema,
  checkChatUnsupported,
  checkCompletionUnsupported,
  normalizeMessages,
  normalizePrompt,
  parseLogitBias,
  parseRequest,
  type ChatRequest,
  type CompletionRequest,
} from '../openai/schemas.js';

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
function tooLong(err: unknown, deps: GatewayDeps, param: string): never {
  if (err instanceof TokenLimitError) {
    throw invalidRequest(
      `This model's maximum prompt length is ${deps.limits.maxPromptTokens} tokens. However, your prompt has at least ${err.tokensAtLeast} tokens. Please reduce the length of the prompt.`,
      param,
      'context_length_exceeded',
    );
  }
  throw err;
}

async function generate(
  c: Context<{ Variables: TenantVariables & RequestIdVariables }>,
  deps: GatewayDeps,
  request: Omit<GenerationRequest, 'weight'>,
): Promise<Response> {
  const keyId = c.get('keyId');
  const limits = deps.keyLimits(keyId);
  const plan = await planGeneration(deps, { ...request, weight: limits.weight });
  // the key's limits: its prompt plus what it may generate count against its tokens per minute
  const admission = await deps.keyLimiter.admitCompletion(keyId, limits, { requestId: plan.requestId, tokens: plannedTokens(plan) }).catch((err: unknown) => {
    throw isRedisUnavailable(err) ? redisUnavailable(err) : err;
  });
  try {
    await enqueueGeneration(deps, plan);
  } catch (err) {
    admission.release();
    throw err;
  }
  return respondGeneration(c, deps, plan, admission);
}

/**
 * The token ids of a completion prompt as the model sees them after the document (if any): text is
 * tokenized with the tokenizer's BOS in front unless a document precedes it (`addBos` false drops
 * it too); token ids are checked against the vocabulary and passed as given. `bosAdded`: whether the
 * first id is a BOS the client did not send (an echo leaves it out).
 */
export async function completionPrompt(
  deps: GatewayDeps,
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
  deps: GatewayDeps,
  prompt: CompletionRequest['prompt'],
  options: { documentId: string | null; addBos?: boolean },
): Promise<number[]> {
  return (await completionPrompt(deps, prompt, options)).ids;
}

/** The token ids of chat messages as the model sees them: the tokenizer's chat template, whose BOS is dropped after a document. */
export async function chatPromptIds(deps: GatewayDeps, messages: ChatRequest['messages'], options: { documentId: string | null }): Promise<number[]> {
  const ids = await deps.tokenize
    .applyChatTemplate(normalizeMessages(messages), deps.limits.maxPromptTokens)
    .catch((err: unknown) => tooLong(err, deps, 'messages'));
  if (options.documentId !== null && deps.tokenizer.bosId !== null && ids[0] === deps.tokenizer.bosId) ids.shift();
  return ids;
}

/** A /v1/completions body → the GenerationRequest it stands for (parsed, checked, tokenized). Throws ApiError 400s. */
export async function completionRequest(deps: GatewayDeps, tenant: string, raw: unknown, reqId?: string): Promise<GenerationRequest> {
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
export async function chatRequest(deps: GatewayDeps, tenant: string, raw: unknown, reqId?: string): Promise<GenerationRequest> {
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
function vocabLimit(deps: GatewayDeps): number {
  return Math.min(deps.tokenizer.vocabSize, deps.model.vocabSize);
}

export function completionsRoutes(deps: GatewayDeps): Hono<{ Variables: TenantVariables & RequestIdVariables }> {
  const app = new Hono<{ Variables: TenantVariables & RequestIdVariables }>();
  app.post('/completions', async (c) => {
    const request = await completionRequest(deps, c.get('tenant'), await readJson(c), c.get('reqId'));
    releaseBody(c.req.raw); // tokenized: the answer may take long, the body budget is not needed for it
    return generate(c, deps, request);
  });
  app.post('/chat/completions', async (c) => {
    const request = await chatRequest(deps, c.get('tenant'), await readJson(c), c.get('reqId'));
    releaseBody(c.req.raw);
    return generate(c, deps, request);
  });
  return app;
}
