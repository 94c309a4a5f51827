/**
 * @module routes/completions
 * POST /v1/completions and POST /v1/chat/completions (OpenAI-compatible). Both parse their body,
 * tokenize in the gateway (raw prompts get the tokenizer's BOS unless a document precedes them;
 * chat uses the tokenizer's chat template, whose BOS is dropped after a document), then hand a
 * GenerationRequest to generation.ts.
 */
import { Hono } from 'hono';
import { validateTokenIds } from '@csa2/core';
import { invalidRequest } from '../errors.js';
import { enqueueGeneration, planGeneration, respondGeneration, type GenerationRequest, type SamplingOptions } from '../generation.js';
import type { GatewayDeps } from '../deps.js';
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
    ...(body.repetition_penalty !== null && body.repetition_penalty !== undefined && body.repetition_penalty !== 1 ? { repetitionPenalty: body.repetition_penalty } : {}),
    ...(body.presence_penalty !== null && body.presence_penalty !== undefined && body.presence_penalty !== 0 ? { presencePenalty: body.presence_penalty } : {}),
    ...(body.frequency_penalty !== null && body.frequency_penalty !== undefined && body.frequency_penalty !== 0 ? { frequencyPenalty: body.frequency_penalty } : {}),
    ...(logitBias.length > 0 ? { logitBias } : {}),
  };
}

function sampling(
  body: CompletionRequest | ChatRequest,
  vocabLimit: number,
): Pick<GenerationRequest, 'temperature' | 'topP' | 'seed' | 'samplingOptions' | 'stop' | 'ignoreEos' | 'stream' | 'includeUsage'> {
  return {
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

async function generate(c: Parameters<typeof respondGeneration>[0], deps: GatewayDeps, request: GenerationRequest): Promise<Response> {
  const plan = await planGeneration(deps, request);
  await enqueueGeneration(deps, plan);
  return respondGeneration(c, deps, plan);
}

export function completionsRoutes(deps: GatewayDeps): Hono<{ Variables: TenantVariables & RequestIdVariables }> {
  const app = new Hono<{ Variables: TenantVariables & RequestIdVariables }>();
  const { tokenizer } = deps;
  // ids the workers can sample (engine: min(tokenizer vocabulary, model rows)): logit_bias keys must be below
  const vocabLimit = Math.min(tokenizer.vocabSize, deps.model.vocabSize);

  app.post('/completions', async (c) => {
    const body = parseRequest(CompletionRequestSchema, await readJson(c));
    checkCompletionUnsupported(body);
    const documentId = body.document_id ?? null;
    const prompt = normalizePrompt(body.prompt);
    let promptIds: number[];
    if (prompt.kind === 'text') {
      promptIds = await deps.tokenize.encode(prompt.text);
      if (tokenizer.bosId !== null && documentId === null) promptIds.unshift(tokenizer.bosId);
    } else {
      promptIds = [...prompt.ids];
      try {
        validateTokenIds(promptIds, deps.model.vocabSize);
      } catch (err) {
        throw invalidRequest(`Invalid value for 'prompt': ${err instanceof Error ? err.message : String(err)}`, 'prompt', 'invalid_value');
      }
    }
    return generate(c, deps, {
      reqId: c.get('reqId'),
      endpoint: 'completions',
      tenant: c.get('tenant'),
      model: body.model,
      promptIds,
      promptParam: 'prompt',
      documentId,
      maxTokens: body.max_tokens ?? null,
      maxTokensParam: 'max_tokens',
      ...sampling(body, vocabLimit),
    });
  });

  app.post('/chat/completions', async (c) => {
    const body = parseRequest(ChatRequestSchema, await readJson(c));
    checkChatUnsupported(body);
    const documentId = body.document_id ?? null;
    const promptIds = await deps.tokenize.applyChatTemplate(normalizeMessages(body.messages));
    if (documentId !== null && tokenizer.bosId !== null && promptIds[0] === tokenizer.bosId) promptIds.shift();
    const useCompletionTokens = body.max_completion_tokens !== null && body.max_completion_tokens !== undefined;
    return generate(c, deps, {
      reqId: c.get('reqId'),
      endpoint: 'chat',
      tenant: c.get('tenant'),
      model: body.model,
      promptIds,
      promptParam: 'messages',
      documentId,
      maxTokens: (useCompletionTokens ? body.max_completion_tokens : body.max_tokens) ?? null,
      maxTokensParam: useCompletionTokens ? 'max_completion_tokens' : 'max_tokens',
      ...sampling(body, vocabLimit),
    });
  });

  return app;
}
