/**
 * @module payloads
 * Typed job payloads and results with their parsers. Everything read from a queue goes through
 * `parse*`; a malformed payload throws JobPayloadError naming the field — workers fail such a job at
 * once, without retry (it can never succeed).
 *
 * Every field is bounded, so that a payload (which Redis keeps for the job's whole life and an hour
 * or a day after) stays small: ids and names by length, numbers by range, stop sequences by count
 * and length, and token lists at MAX_INLINE_TOKEN_IDS inline — a longer list (a document, a long
 * prompt) is stored in the object store by the producer and passed as a TokenListRef
 * (@csa2/artifacts token-lists), which the worker reads back and deletes once the job is done.
 */
import { z } from 'zod';
import { MAX_FAIR_WEIGHT, MIN_FAIR_WEIGHT } from './fair-priority.js';

/** Tenant and document ids: also used in object keys and Redis keys. */
export const ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
const id = z.string().regex(ID_PATTERN, 'must match [A-Za-z0-9_-]{1,64}');

/** Longest token list a payload carries inline (~20 KB of JSON); longer ones go by reference. */
export const MAX_INLINE_TOKEN_IDS = 4096;
/** Stop sequences per request, and characters per stop sequence. */
export const MAX_STOP_SEQUENCES = 4;
export const MAX_STOP_SEQUENCE_CHARS = 512;
/** Longest document text a payload carries inline (the gateway itself always sends token ids). */
export const MAX_INLINE_TEXT_CHARS = 65_536;
/** Longest model name. */
export const MAX_MODEL_NAME_CHARS = 256;
/** Bound of token counts (context, max_tokens, replay, a referenced list): 16M. */
export const MAX_TOKEN_COUNT = 1 << 24;
/** Most choices one request may ask for (OpenAI `n`; the engine's limit, @csa2/engine MAX_CHOICES). */
export const MAX_CHOICES = 16;
/** Most alternatives a token's logprobs may list (OpenAI chat's `top_logprobs` limit; the engine's too). */
export const MAX_TOP_LOGPROBS = 20;

const tokenIds = z
  .array(z.number().int().nonnegative().max(0xffffffff))
  .max(MAX_INLINE_TOKEN_IDS, `at most ${MAX_INLINE_TOKEN_IDS} token ids inline; a longer list goes through the object store (tokensRef)`);
const modelName = z.string().min(1).max(MAX_MODEL_NAME_CHARS);
const tokenCount = z.number().int().positive().max(MAX_TOKEN_COUNT);

/** A token list stored in the object store (@csa2/artifacts TokenListRef). */
export const TokenListRefSchema = z.object({
  key: z.string().min(1).max(1024),
  count: tokenCount,
  sha256: z.string().regex(/^[0-9a-f]{64}$/, 'must be 64 lowercase hex characters'),
});
export type TokenListRefPayload = z.infer<typeof TokenListRefSchema>;

/**
 * `x-request-id` values: what the gateway accepts from a client (and the `req_…` ids it makes when
 * none is sent), echoed in the response and carried in jobs as `reqId`, so that every log line of
 * the request, in the gateway and in the workers, names it. Not the completion id (`requestId`,
 * `cmpl-…`), which keys the request's jobs and stream.
 */
export const REQ_ID_PATTERN = /^[A-Za-z0-9._:=+/-]{1,128}$/;
export const REQ_ID_RULE = 'at most 128 characters from A-Z a-z 0-9 . _ : = + / -';
/** Optional: jobs enqueued before it existed (or by a producer without one) parse without it. */
const reqId = z.string().regex(REQ_ID_PATTERN, REQ_ID_RULE).optional();

/** logit_bias entries per request at most (this server's limit: the payload travels through Redis). */
export const MAX_LOGIT_BIAS_ENTRIES = 1024;

/**
 * @csa2/core SamplingParams as a job carries it. The fields after `seed` are optional (absent = off:
 * top_k 0, min_p 0, repetition_penalty 1, presence/frequency 0, no logit_bias), so the gateway only
 * sends the ones a request sets, and jobs enqueued before they existed still parse.
 */
export const SamplingSchema = z.object({
  temperature: z.number().finite().min(0),
  topP: z.number().gt(0).max(1),
  seed: z.number().int().safe(),
  topK: z.number().int().min(0).safe().optional(),
  minP: z.number().min(0).max(1).optional(),
  repetitionPenalty: z.number().finite().gt(0).optional(),
  presencePenalty: z.number().min(-2).max(2).optional(),
  frequencyPenalty: z.number().min(-2).max(2).optional(),
  /** [token id, bias] pairs, bias in [-100, 100]. */
  logitBias: z
    .array(z.tuple([z.number().int().nonnegative(), z.number().min(-100).max(100)]))
    .max(MAX_LOGIT_BIAS_ENTRIES)
    .optional(),
});
export type JobSampling = z.infer<typeof SamplingSchema>;

/** A completion the decoder worker runs: [document tokens] + promptIds, then generation. */
export const DecodeJobSchema = z
  .object({
    v: z.literal(1),
    requestId: id,
    /** The x-request-id of the HTTP request that made the job (logged by the workers). */
    reqId,
    tenant: id,
    model: modelName,
    /** Tokens after the document (the whole prompt when there is no document); longer prompts go through an encoder. */
    promptIds: tokenIds,
    /** A stored document whose tokens precede promptIds (an ingested document or an encoded long prompt). */
    documentId: id.nullable(),
    /**
     * How many of the document's tokens to report as cached (usage.prompt_tokens_details.cached_tokens):
     * those served from chunks stored before this request. Absent or null: all of them (an ingested
     * document). The encoder sets it for the artifact of a long prompt, which it encoded for this very
     * request: the tokens of the leading chunks it found already stored (its first attempt's count).
     */
    cachedTokens: z.number().int().nonnegative().max(MAX_TOKEN_COUNT).nullable().optional(),
    sampling: SamplingSchema,
    /** Tokens to generate per choice; 0 = none, the prompt only (echo, usually with promptLogprobs). */
    maxTokens: z.number().int().nonnegative().max(MAX_TOKEN_COUNT),
    stop: z.array(z.string().min(1).max(MAX_STOP_SEQUENCE_CHARS)).max(MAX_STOP_SEQUENCES),
    ignoreEos: z.boolean(),
    /** Bounded replay length; null = the worker's default. */
    replayTokens: tokenCount.nullable(),
    /** When the gateway accepted the request (ms since epoch), for latency metrics. */
    acceptedAtMs: z.number().int().nonnegative(),
    /**
     * Choices generated from one prefill (OpenAI `n`), each on its own stream (queues.ts
     * choiceStreamId); choice i samples with `sampling.seed + i`, so choice 0 is the n = 1 answer.
     * Absent: 1. The optional fields below are absent in jobs from before them, which parse as before.
     */
    n: z.number().int().min(1).max(MAX_CHOICES).optional(),
    /** Each generated token's log-probability with this many most likely alternatives (0–20). Absent: none. */
    logprobs: z.number().int().min(0).max(MAX_TOP_LOGPROBS).optional(),
    /** The prompt tokens' log-probabilities (echo) with this many alternatives (0–20), one stream entry before choice 0's first token. Absent: none. */
    promptLogprobs: z.number().int().min(0).max(MAX_TOP_LOGPROBS).optional(),
  })
  .refine((j) => j.sampling.seed <= Number.MAX_SAFE_INTEGER - ((j.n ?? 1) - 1), {
    message: "sampling.seed + n - 1 (the last choice's seed) must be a safe integer",
    path: ['sampling', 'seed'],
  });
export type DecodeJob = z.infer<typeof DecodeJobSchema>;

/** Encode a document (ingestion) into an artifact. */
export const DocumentPrefillSchema = z.object({
  v: z.literal(1),
  kind: z.literal('document'),
  reqId,
  tenant: id,
  documentId: id,
  model: modelName,
  /** The document: inline text or token ids, or token ids stored in the object store. */
  input: z.union([z.object({ text: z.string().max(MAX_INLINE_TEXT_CHARS) }), z.object({ tokenIds }), z.object({ tokensRef: TokenListRefSchema })]),
  acceptedAtMs: z.number().int().nonnegative(),
});

/** Encode a long prompt into an artifact, then hand `decode` (documentId set to the artifact) to the decode queue. */
export const PromptPrefillSchema = z
  .object({
    v: z.literal(1),
    kind: z.literal('prompt'),
    reqId,
    tenant: id,
    requestId: id,
    model: modelName,
    /** The prompt prefix to encode, inline or stored (exactly one); decode.promptIds is the rest (at least one token). */
    tokenIds: tokenIds.optional(),
    tokensRef: TokenListRefSchema.optional(),
    /** A stored document of the tenant whose tokens precede the prompt (they are re-used, not encoded again). */
    prefixDocumentId: id.nullable().optional(),
    decode: DecodeJobSchema,
    /** The flow's fair-share weight (its API key's; a batch line's times CSA2_BATCH_WEIGHT), for the priority of the decode job the encoder adds. */
    weight: z.number().min(MIN_FAIR_WEIGHT).max(MAX_FAIR_WEIGHT).optional(),
    /** A batch line: the decode job goes to the tenant's batch flow (fair-priority fairFlow). */
    batch: z.boolean().optional(),
    acceptedAtMs: z.number().int().nonnegative(),
  })
  .refine((j) => (j.tokenIds === undefined) !== (j.tokensRef === undefined), { message: 'exactly one of tokenIds and tokensRef', path: ['tokenIds'] });

export const PrefillJobSchema = z.discriminatedUnion('kind', [DocumentPrefillSchema, PromptPrefillSchema]);
export type PrefillJob = z.infer<typeof PrefillJobSchema>;
export type DocumentPrefillJob = z.infer<typeof DocumentPrefillSchema>;
export type PromptPrefillJob = z.infer<typeof PromptPrefillSchema>;

/** What a prefill job returns (BullMQ returnvalue). */
export interface PrefillResult {
  readonly documentId: string;
  readonly tokens: number;
  readonly bytesWritten: number;
  readonly artifactBytes: number;
  /** Bytes of the document's stored encoder tail (absent from workers before it existed; 0: none). */
  readonly tailBytes?: number;
  readonly reusedTokens: number;
}

/** Prefill progress (job.updateProgress): tokens encoded of total. */
export interface PrefillProgress {
  readonly tokensDone: number;
  readonly tokensTotal: number;
  /**
   * Leading tokens whose chunks were stored before the job's first attempt (a retry keeps the first
   * attempt's count: the chunks an interrupted attempt wrote were computed for this request).
   */
  readonly reusedTokens?: number;
}

/** What a decode job returns. */
export interface DecodeResult {
  readonly finishReason: 'length' | 'stop' | 'cancelled';
  readonly promptTokens: number;
  readonly cachedTokens: number;
  readonly completionTokens: number;
}

export class JobPayloadError extends Error {
  readonly issues: readonly string[];
  constructor(what: string, issues: readonly string[]) {
    super(`malformed ${what} job: ${issues.join('; ')}`);
    this.name = 'JobPayloadError';
    this.issues = issues;
  }
}

function parseWith<T>(schema: z.ZodType<T>, what: string, data: unknown): T {
  const r = schema.safeParse(data);
  if (r.success) return r.data;
  throw new JobPayloadError(
    what,
    r.error.issues.map((i) => `${i.path.length > 0 ? i.path.join('.') : '(root)'}: ${i.message}`),
  );
}

export const parseDecodeJob = (data: unknown): DecodeJob => parseWith(DecodeJobSchema, 'decode', data);

/** Tokens of a prompt job's prefix (inline or referenced). */
export function promptPrefixTokens(job: Pick<PromptPrefillJob, 'tokenIds' | 'tokensRef'>): number {
  return job.tokenIds?.length ?? job.tokensRef?.count ?? 0;
}
export const parsePrefillJob = (data: unknown): PrefillJob => parseWith(PrefillJobSchema, 'prefill', data);
