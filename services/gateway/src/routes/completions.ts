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
import { enqueueGeneration, planGeneration, respondGeneration, type GenerationRequest } from '../generation.js';
import type { GatewayDeps } from '../deps.js';
import { TokenLimitError } from '../tokenize-pool.js';
import { releaseBody } from '../middleware/body-budget.js';
import type { TenantVariables } from '../middleware/api-key-auth.js';
import { readJson } from '../middleware/json-body.js';
import {
  ChatRequestSchema,
  CompletionRequestSchema,
  checkChatUnsupported,
  checkCompletionUnsupported,
  normalizeMessages,
  normalizePrompt,
  parseRequest,
  type ChatRequest,
  type CompletionRequest,
} from '../openai/schemas.js';

function stopList(stop: string | readonly string[] | null | undefined): string[] {
  if (stop === null || stop === undefined) return [];
  if (typeof stop === 'string') return stop === '' ? [] : [stop];
  return [...stop];
}

function sampling(body: CompletionRequest | ChatRequest): Pick<GenerationRequest, 'temperature' | 'topP' | 'seed' | 'stop' | 'ignoreEos' | 'stream' | 'includeUsage'> {
  return {
    temperature: body.temperature ?? 1,
    topP: body.top_p ?? 1,
    seed: body.seed ?? null,
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

async function generate(c: Context<{ Variables: TenantVariables }>, deps: GatewayDeps, request: Omit<GenerationRequest, 'weight'>): Promise<Response> {
  const keyId = c.get('keyId');
  const limits = deps.keyLimits(keyId);
  const plan = await planGeneration(deps, { ...request, weight: limits.weight });
  // the key's limits: its prompt plus what it may generate count against its tokens per minute
  const admission = await deps.keyLimiter
    .admitCompletion(keyId, limits, { requestId: plan.requestId, tokens: plan.promptTokens + plan.decodeJob.maxTokens })
    .catch((err: unknown) => {
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

export function completionsRoutes(deps: GatewayDeps): Hono<{ Variables: TenantVariables }> {
  const app = new Hono<{ Variables: TenantVariables }>();
  const { tokenizer } = deps;

  app.post('/completions', async (c) => {
    const body = parseRequest(CompletionRequestSchema, await readJson(c));
    checkCompletionUnsupported(body);
    const documentId = body.document_id ?? null;
    const prompt = normalizePrompt(body.prompt);
    let promptIds: number[];
    if (prompt.kind === 'text') {
      promptIds = await deps.tokenize.encode(prompt.text, deps.limits.maxPromptTokens).catch((err: unknown) => tooLong(err, deps, 'prompt'));
      if (tokenizer.bosId !== null && documentId === null) promptIds.unshift(tokenizer.bosId);
    } else {
      promptIds = [...prompt.ids];
      try {
        validateTokenIds(promptIds, deps.model.vocabSize);
      } catch (err) {
        throw invalidRequest(`Invalid value for 'prompt': ${err instanceof Error ? err.message : String(err)}`, 'prompt', 'invalid_value');
      }
    }
    releaseBody(c.req.raw); // tokenized: the answer may take long, the body budget is not needed for it
    return generate(c, deps, {
      endpoint: 'completions',
      tenant: c.get('tenant'),
      model: body.model,
      promptIds,
      promptParam: 'prompt',
      documentId,
      maxTokens: body.max_tokens ?? null,
      maxTokensParam: 'max_tokens',
      ...sampling(body),
    });
  });

  app.post('/chat/completions', async (c) => {
    const body = parseRequest(ChatRequestSchema, await readJson(c));
    checkChatUnsupported(body);
    const documentId = body.document_id ?? null;
    const promptIds = await deps.tokenize.applyChatTemplate(normalizeMessages(body.messages), deps.limits.maxPromptTokens).catch((err: unknown) => tooLong(err, deps, 'messages'));
    if (documentId !== null && tokenizer.bosId !== null && promptIds[0] === tokenizer.bosId) promptIds.shift();
    releaseBody(c.req.raw);
    const useCompletionTokens = body.max_completion_tokens !== null && body.max_completion_tokens !== undefined;
    return generate(c, deps, {
      endpoint: 'chat',
      tenant: c.get('tenant'),
      model: body.model,
      promptIds,
      promptParam: 'messages',
      documentId,
      maxTokens: (useCompletionTokens ? body.max_completion_tokens : body.max_tokens) ?? null,
      maxTokensParam: useCompletionTokens ? 'max_completion_tokens' : 'max_tokens',
      ...sampling(body),
    });
  });

  return app;
}
