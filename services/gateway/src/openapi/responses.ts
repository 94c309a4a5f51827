/**
 * @module openapi/responses
 * zod schemas of the response bodies that are not already defined next to their code (the Files,
 * Batch and tokenize objects are, and the spec uses those). These document what openai/format.ts,
 * documents.ts and the health routes build; the request schemas, by contrast, are the very ones the
 * routes validate with.
 */
import { z } from 'zod';

export const ErrorResponseSchema = z
  .object({ error: z.object({ message: z.string(), type: z.string(), param: z.string().nullable(), code: z.string().nullable() }) })
  .meta({ id: 'Error', description: "OpenAI's error shape" });

const UsageSchema = z
  .object({
    prompt_tokens: z.number().int(),
    completion_tokens: z.number().int(),
    total_tokens: z.number().int(),
    prompt_tokens_details: z.object({ cached_tokens: z.number().int().describe('Prompt tokens served from a stored artifact') }),
  })
  .meta({ id: 'Usage' });

const FinishReason = z.enum(['stop', 'length']);

export const CompletionLogprobsSchema = z
  .object({
    tokens: z.array(z.string()).describe("Each token's text on its own (U+FFFD where it holds part of a character)"),
    token_logprobs: z.array(z.number().nullable()).describe("Natural log; null for a token without context (an echoed prompt's first)"),
    top_logprobs: z.array(z.record(z.string(), z.number()).nullable()).describe('The logprobs most likely tokens plus the sampled one, text → logprob'),
    text_offset: z.array(z.number().int()).describe("Where each token's text starts in the choice's text, in code points"),
  })
  .meta({ id: 'CompletionLogprobs', description: 'completions logprobs: parallel arrays, echoed prompt tokens first' });

const ChatTokenLogprobSchema = z.object({
  token: z.string(),
  logprob: z.number(),
  bytes: z.array(z.number().int()).describe("The token's raw bytes (part of a character possibly)"),
});

export const ChatLogprobsSchema = z
  .object({
    content: z.array(
      ChatTokenLogprobSchema.extend({ top_logprobs: z.array(ChatTokenLogprobSchema).describe('The top_logprobs most likely tokens, most likely first') }),
    ),
    refusal: z.null(),
  })
  .meta({ id: 'ChatLogprobs', description: 'chat logprobs: one entry per generated token' });

export const CompletionResponseSchema = z
  .object({
    id: z.string(),
    object: z.literal('text_completion'),
    created: z.number().int(),
    model: z.string(),
    system_fingerprint: z.null(),
    choices: z
      .array(
        z.object({
          index: z.number().int(),
          text: z.string(),
          logprobs: CompletionLogprobsSchema.nullable().describe('With logprobs set, else null'),
          finish_reason: FinishReason.nullable(),
        }),
      )
      .describe('One per choice (n); a streamed chunk carries one choice'),
    usage: UsageSchema.optional().describe('Absent on streamed chunks (or null with stream_options.include_usage) but the last'),
  })
  .meta({ id: 'CompletionResponse', description: 'A completion, or (stream: true) each SSE chunk of one' });

export const ChatCompletionResponseSchema = z
  .object({
    id: z.string(),
    object: z.literal('chat.completion'),
    created: z.number().int(),
    model: z.string(),
    system_fingerprint: z.null(),
    choices: z
      .array(
        z.object({
          index: z.number().int(),
          message: z.object({ role: z.literal('assistant'), content: z.string(), refusal: z.null() }),
          logprobs: ChatLogprobsSchema.nullable().describe('With logprobs: true, else null'),
          finish_reason: FinishReason,
        }),
      )
      .describe('One per choice (n)'),
    usage: UsageSchema,
  })
  .meta({ id: 'ChatCompletionResponse', description: 'A chat completion; streamed as chat.completion.chunk objects with choices[].delta' });

export const ModelSchema = z.object({ id: z.string(), object: z.literal('model'), created: z.number().int(), owned_by: z.string() }).meta({ id: 'Model' });
export const ModelListSchema = z.object({ object: z.literal('list'), data: z.array(ModelSchema) }).meta({ id: 'ModelList' });

export const DocumentObjectSchema = z
  .object({
    id: z.string(),
    object: z.literal('document'),
    status: z.enum(['queued', 'encoding', 'ready', 'failed']),
    created_at: z.number().int(),
    tokens: z.number().int().nullable().optional(),
    bytes: z.number().int().optional().describe('ready: bytes of the stored artifact'),
    progress: z.object({ tokens_done: z.number().int(), tokens_total: z.number().int().nullable() }).optional().describe('encoding only'),
    reason: z.string().optional().describe('failed only'),
    error_code: z.string().optional().describe('failed only'),
  })
  .meta({ id: 'Document' });

export const DocumentListSchema = z.object({ object: z.literal('list'), data: z.array(DocumentObjectSchema) }).meta({ id: 'DocumentList' });
export const DocumentPageSchema = z
  .object({
    object: z.literal('list'),
    data: z.array(DocumentObjectSchema),
    first_id: z.string().nullable(),
    last_id: z.string().nullable(),
    has_more: z.boolean(),
  })
  .meta({ id: 'DocumentPage' });
export const DocumentDeletedSchema = z
  .object({ id: z.string(), object: z.literal('document.deleted'), deleted: z.literal(true) })
  .meta({ id: 'DocumentDeleted' });

export const HealthSchema = z.object({ status: z.literal('ok') }).meta({ id: 'Health' });
export const ReadySchema = z.object({ status: z.enum(['ready', 'unavailable']), checks: z.record(z.string(), z.string()) }).meta({ id: 'Readiness' });
