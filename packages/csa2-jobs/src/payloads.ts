/**
 * @module payloads
 * Typed job payloads and results with their parsers. Everything read from a queue goes through
 * `parse*`; a malformed payload throws JobPayloadError naming the field — workers fail such a job at
 * once, without retry (it can never succeed).
 */
import { z } from 'zod';

/** Tenant and document ids: also used in object keys and Redis keys. */
export const ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
const id = z.string().regex(ID_PATTERN, 'must match [A-Za-z0-9_-]{1,64}');
const tokenIds = z.array(z.number().int().nonnegative());

export const SamplingSchema = z.object({
  temperature: z.number().finite().min(0),
  topP: z.number().gt(0).max(1),
  seed: z.number().int().safe(),
});

/** A completion the decoder worker runs: [document tokens] + promptIds, then generation. */
export const DecodeJobSchema = z.object({
  v: z.literal(1),
  requestId: id,
  tenant: id,
  model: z.string().min(1),
  /** Tokens after the document (the whole prompt when there is no document). */
  promptIds: tokenIds,
  /** A stored document whose tokens precede promptIds (an ingested document or an encoded long prompt). */
  documentId: id.nullable(),
  /**
   * How many of the document's tokens to report as cached (usage.prompt_tokens_details.cached_tokens):
   * those served from chunks stored before this request. Absent or null: all of them (an ingested
   * document). The encoder sets it for the artifact of a long prompt, which it encoded for this very
   * request: the tokens of the leading chunks it found already stored (its first attempt's count).
   */
  cachedTokens: z.number().int().nonnegative().nullable().optional(),
  sampling: SamplingSchema,
  maxTokens: z.number().int().positive(),
  stop: z.array(z.string().min(1)).max(16),
  ignoreEos: z.boolean(),
  /** Bounded replay length; null = the worker's default. */
  replayTokens: z.number().int().positive().nullable(),
  /** When the gateway accepted the request (ms since epoch), for latency metrics. */
  acceptedAtMs: z.number().int().nonnegative(),
});
export type DecodeJob = z.infer<typeof DecodeJobSchema>;

/** Encode a document (ingestion) into an artifact. */
export const DocumentPrefillSchema = z.object({
  v: z.literal(1),
  kind: z.literal('document'),
  tenant: id,
  documentId: id,
  model: z.string().min(1),
  input: z.union([z.object({ text: z.string() }), z.object({ tokenIds })]),
  acceptedAtMs: z.number().int().nonnegative(),
});

/** Encode a long prompt into an artifact, then hand `decode` (documentId set to the artifact) to the decode queue. */
export const PromptPrefillSchema = z.object({
  v: z.literal(1),
  kind: z.literal('prompt'),
  tenant: id,
  requestId: id,
  model: z.string().min(1),
  /** The prompt prefix to encode; decode.promptIds is the rest (at least one token). */
  tokenIds,
  decode: DecodeJobSchema,
  acceptedAtMs: z.number().int().nonnegative(),
});

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
export const parsePrefillJob = (data: unknown): PrefillJob => parseWith(PrefillJobSchema, 'prefill', data);
