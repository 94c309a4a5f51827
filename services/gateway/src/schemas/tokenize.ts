/**
 * @module schemas/tokenize
 * POST /tokenize (a completion's `prompt` or a chat's `messages`) and POST /detokenize, in vLLM's
 * shapes, with their answers (the OpenAPI document shows both).
 */
import { z } from 'zod';
import { ID_PATTERN } from '@csa2/jobs';
import { ChatRequestSchema } from './completions.js';

const common = {
  model: z.string().nullish(),
  return_token_strs: z.boolean().nullish().describe('Also return each token as text'),
  document_id: z
    .string()
    .regex(ID_PATTERN, 'must match [A-Za-z0-9_-]{1,64}')
    .nullish()
    .describe('Extension: count the prompt as it follows this ready document'),
};

export const TokenizeCompletionRequestSchema = z
  .object({
    ...common,
    prompt: z.string({ error: 'must be a string' }),
    add_special_tokens: z.boolean().nullish().describe("Add the tokenizer's BOS (as /v1/completions does). Default true"),
  })
  .meta({ id: 'TokenizeCompletionRequest' });

export const TokenizeChatRequestSchema = z
  .object({
    ...common,
    messages: ChatRequestSchema.shape.messages,
    add_generation_prompt: z.boolean().nullish().describe('Only true (the default) is supported: the template always ends with the assistant prompt'),
    continue_final_message: z.boolean().nullish(),
    add_special_tokens: z.boolean().nullish(),
    chat_template: z.string().nullish(),
    tools: z.array(z.unknown()).nullish(),
  })
  .meta({ id: 'TokenizeChatRequest' });

export const TokenizeRequestSchema = z.union([TokenizeCompletionRequestSchema, TokenizeChatRequestSchema]).meta({ id: 'TokenizeRequest' });

export const TokenizeResponseSchema = z
  .object({
    count: z.number().int().describe('Tokens the model sees (document tokens included)'),
    max_model_len: z.number().int(),
    tokens: z.array(z.number().int()),
    token_strs: z.array(z.string()).nullable(),
    document_tokens: z.number().int().optional().describe('Extension: tokens of document_id'),
  })
  .meta({ id: 'TokenizeResponse' });

export const DetokenizeRequestSchema = z
  .object({ model: z.string().nullish(), tokens: z.array(z.number().int({ error: 'token ids are integers' }), { error: 'must be an array of token ids' }) })
  .meta({ id: 'DetokenizeRequest' });
export const DetokenizeResponseSchema = z.object({ prompt: z.string() }).meta({ id: 'DetokenizeResponse' });
