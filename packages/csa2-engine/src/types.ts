/**
 * @module types
 * The engine's requests, results and events: what callers (the CLI, the workers, EngineHost) pass to
 * Engine and get back.
 */
import type { NumericsMode, RuntimeOptions, SamplingParams, ScanThreadsState, TokenLogprob, Tokenizer } from '@csa2/core';
import type { ChunkCacheStats } from '@csa2/artifacts';
import type { FlowControl } from './flow-control.js';
import type { DocumentCacheStats } from './scheduler/document-cache.js';
import type { SchedulerPolicy } from './scheduler/scheduler-policy.js';

export interface EngineOptions {
  /** Checkpoint directory (config.json + model.safetensors). */
  readonly modelDir: string;
  /** @defaultValue 'bf16' */
  readonly numerics?: NumericsMode;
  readonly runtime?: Partial<RuntimeOptions>;
  /** Worker threads that take part of the long index scans (@csa2/core ModelOptions.scanThreads): a count or 'auto'. @defaultValue 'auto' */
  readonly scanThreads?: number | 'auto';
  /**
   * How encode chunks run (@csa2/core ModelOptions.encoder): through the layers ('layers', the CPU's
   * default) or as one graph run a chunk ('graph', the CUDA provider's default); `{ topk: true }` is
   * 'graph' with the index lists shown to the model's observer (tests).
   */
  readonly encoder?: 'layers' | 'graph' | { readonly topk: true };
  /**
   * Rows of one encode run: the model's prefill chunk (the graph encoder's fixed row count) and the
   * scheduler's prefill span and step budget, unless `scheduler` sets those. Larger spans amortize a
   * graph run's fixed cost (on CUDA, a kernel launch per node) over more rows, at more device memory.
   * @defaultValue 4096 on CUDA; the model's and the scheduler's own defaults on the CPU
   */
  readonly encoderRows?: number;
  /** Object store of the artifacts (file:///… or s3://bucket/prefix?…); documents need one. */
  readonly store?: string;
  /**
   * Bytes of verified chunks kept in memory: re-used prefixes of ingests, and documents loaded
   * outside the document cache. @defaultValue 256 MiB
   */
  readonly chunkCacheBytes?: number;
  /**
   * Bytes of loaded documents kept for the questions on them (scheduler/document-cache): every
   * generation on a cached document reads its rows in place. 0 turns it off (each generation loads
   * a private copy through the chunk cache). @defaultValue 2 GiB
   */
  readonly documentCacheBytes?: number;
  /**
   * Load documents into memory the document cache keeps (@csa2/core RowArena, documentCacheBytes of
   * it): a document that replaces an evicted one is written into pages the process already holds, not
   * new ones (a page fault each: most of a 1M-token document's load on a VM). The process keeps what
   * documents have used, at most documentCacheBytes, resident. false: every load allocates anew and
   * an evicted document's memory goes back to the system when collected. @defaultValue true
   */
  readonly documentArena?: boolean;
  /**
   * Bytes of the document cache's memory (documentArena) faulted in when the engine opens, at most
   * documentCacheBytes: the first documents then load into pages the process holds, as later ones do
   * (a serving engine that takes its KV memory at start). It costs the time to fault them in (this
   * project's VM: ~3 ms a MB) and keeps them resident from the start. @defaultValue 0
   */
  readonly documentPrefaultBytes?: number;
  /** Tokens per artifact chunk for documents this engine writes. @defaultValue 4096 */
  readonly chunkTokens?: number;
  /**
   * Run one chunk of placeholder tokens through the model before open() returns (Csa2Model.warmUp), so
   * the first request does not pay for memory-arena growth. Serving workers turn it on; one-shot CLI
   * runs leave it off. @defaultValue false
   */
  readonly warmUp?: boolean;
  /** How the engine batches (decode batch, step token budget, KV budget, …); see scheduler/scheduler-policy. */
  readonly scheduler?: Partial<SchedulerPolicy>;
}

/** A stored document whose tokens precede the prompt. */
export interface DocumentRef {
  readonly tenant: string;
  readonly documentId: string;
  /**
   * How many of its tokens count as cached in the outcome (`cachedTokens`): those served from chunks
   * stored before the request. @defaultValue all of them (an ingested document)
   */
  readonly cachedTokens?: number;
}

export interface IngestRequest {
  readonly tenant: string;
  /** Lower runs first (0: interactive, larger: batch work). @defaultValue 0 */
  readonly priority?: number;
  readonly documentId: string;
  /** The document as token ids, or as text to tokenize (exactly one; text gets the tokenizer's BOS first). */
  readonly tokenIds?: readonly number[];
  readonly text?: string;
  /** Tokens per chunk. @defaultValue the engine's chunkTokens */
  readonly chunkTokens?: number;
  /**
   * A stored document of the same tenant whose tokens come first (a long prompt that follows a
   * document): its full chunks are re-used as stored, not encoded again.
   */
  readonly prefix?: DocumentRef;
  /**
   * Store the document's encoder tail for CED questions with this decoder replay (their default, 128),
   * so that no question encodes the document's last tokens again (scheduler/stored-tail); 0: none. A
   * document too short for a reusable tail (encoderTailReusable) gets none. @defaultValue 128
   */
  readonly tailReplayTokens?: number;
  /**
   * When the document was accepted (ms since epoch): the manifest's createdAt, so that a document's
   * creation time is the same before and after it is encoded (and on every retry). @defaultValue now
   */
  readonly createdAtMs?: number;
}

export interface IngestProgress {
  readonly tokensDone: number;
  readonly tokensTotal: number;
  /** Leading tokens whose chunks were already stored (loaded, not encoded). */
  readonly reusedTokens: number;
}

export interface IngestOutcome {
  readonly documentId: string;
  readonly tokens: number;
  /** Bytes this run put into the store (chunks that already existed are not rewritten). */
  readonly bytesWritten: number;
  /** Bytes of the whole artifact (every chunk + manifest), the stored encoder tail not included. */
  readonly artifactBytes: number;
  /** Bytes of the stored encoder tail (0: none stored) and its replay length. */
  readonly tailBytes: number;
  readonly tailReplayTokens: number;
  /** Leading tokens whose chunks already existed and were loaded instead of encoded. */
  readonly reusedTokens: number;
  readonly chunksWritten: number;
  readonly chunksSkipped: number;
  /** Stored chunks that failed verification (corrupt, or gone) and were written again. */
  readonly chunksRepaired: number;
  /** Global-cache bytes per token of this model's layout (890 at the released configuration). */
  readonly bytesPerToken: number;
}

export interface IngestHooks {
  readonly onProgress?: (p: IngestProgress) => void;
  readonly signal?: AbortSignal;
}

export interface GenerateRequest {
  /** Who the request is for: scheduling is fair between tenants. @defaultValue the document's tenant, else 'default' */
  readonly tenant?: string;
  /** Lower runs first (0: interactive, larger: batch work). @defaultValue 0 */
  readonly priority?: number;
  /**
   * Tokens an earlier attempt already produced (and streamed): they are fed at the first decode steps
   * instead of being sampled and are not reported again; generation then continues from index
   * resumeTokens.length exactly as an undisturbed run would (greedy, or seeded sampling, whose
   * randomness depends on (seed, token index) only).
   */
  readonly resumeTokens?: readonly number[];
  readonly promptIds: readonly number[];
  readonly maxTokens: number;
  readonly sampling: SamplingParams;
  /** Decoder (and encoder) bounded replay over the last R tokens. @defaultValue 128 */
  readonly replayTokens?: number;
  /** Prefill every layer over the whole prompt, as the official code does (no replay). */
  readonly exact?: boolean;
  /** Stop after any of these ids (in addition to the tokenizer's EOS ids unless `ignoreEos`). */
  readonly stopIds?: readonly number[];
  /** Stop when the generated text contains any of these strings; the text is cut before it. */
  readonly stopSequences?: readonly string[];
  readonly ignoreEos?: boolean;
  /** Teacher forcing: ids fed at the decode steps instead of the sampled ones. */
  readonly forceIds?: readonly number[];
  /** Return each step's logits (for --dump and parity tests). */
  readonly keepLogits?: boolean;
  /**
   * Report each token's log-probability and this many most likely alternatives (0–20) with its event,
   * from the distribution it was sampled from (after logit_bias, penalties and temperature; greedy:
   * temperature 1). Unset: no logprobs.
   */
  readonly logprobs?: number;
  /**
   * Choices generated from one prefill (OpenAI `n`, 1–16): after the prompt the sequence is forked
   * (a stored document stays shared) and each choice decodes on its own, batched with the others.
   * Choice i samples with `seeds[i]` (default `sampling.seed + i`), so choice 0 is what n = 1 gives.
   * `maxTokens`, stops and logprobs apply to each choice. @defaultValue 1
   */
  readonly n?: number;
  /** Per-choice seeds (length n), overriding sampling.seed + i. */
  readonly seeds?: readonly number[];
  /**
   * Per choice (index = choice, length n): tokens an earlier attempt produced, as resumeTokens is
   * for one choice (resumeTokens and resumeChoices exclude each other).
   */
  readonly resumeChoices?: readonly (readonly number[])[];
  /**
   * Log-probabilities of the prompt tokens (echo with logprobs): for each promptIds[i], log p of it
   * given everything before it (the document's tokens too), with this many most likely alternatives
   * (0–20), from the model's distribution (temperature 1, no penalties). promptIds[0] without a
   * document has none (null). The decoder replay then covers the whole prompt (CED), or the exact
   * prefill keeps every row's logits. Unset: none.
   */
  readonly promptLogprobs?: number;
  /** Continue a stored document: its tokens precede promptIds (which may then be empty). */
  readonly document?: DocumentRef;
}

/** One generated token and the text it completed (possibly '' while a UTF-8 character is split). */
export interface TokenEvent {
  /** The choice this token belongs to (0 unless n > 1). */
  readonly choice: number;
  readonly index: number;
  readonly id: number;
  readonly text: string;
  /** log p of the token (when the request asked for logprobs). */
  readonly logprob?: number;
  /** The most likely tokens at this position, most likely first (when asked for). */
  readonly topLogprobs?: readonly TokenLogprob[];
}

export type FinishReason = 'length' | 'stop' | 'cancelled';

/** One choice of a generation (GenerateRequest.n). */
export interface ChoiceOutcome {
  readonly tokens: number[];
  readonly text: string;
  readonly finishReason: FinishReason;
  /** Row i: the logits token i was chosen from. Empty unless keepLogits. */
  readonly logits: Float32Array[];
}

/** A prompt token's log-probability given the tokens before it (GenerateRequest.promptLogprobs). */
export interface PromptTokenLogprob {
  readonly id: number;
  readonly logprob: number;
  /** The most likely tokens at this position, most likely first. */
  readonly topLogprobs: readonly TokenLogprob[];
}

export interface GenerateOutcome {
  /** Choice 0's tokens, text and finish reason (all of them when n = 1). */
  readonly tokens: number[];
  readonly text: string;
  readonly finishReason: FinishReason;
  /** Every choice, in order (length n; choices[0] is the fields above). */
  readonly choices: readonly ChoiceOutcome[];
  /** Per prompt token (promptLogprobs asked): its logprob, null for a first token without context. */
  readonly promptLogprobs?: readonly (PromptTokenLogprob | null)[];
  readonly promptTokens: number;
  /** Prompt tokens served from a stored artifact instead of being encoded. */
  readonly cachedTokens: number;
  /**
   * The document's stored encoder tail was not used for this generation, and why (missing, damaged, not
   * this model's): it computed the tail instead, with the same result. Absent otherwise.
   */
  readonly storedTailRejected?: string;
  readonly timings: { readonly prefillMs: number; readonly decodeMs: number };
  /** Choice 0's row i: the logits token i was chosen from. Empty unless keepLogits. */
  readonly logits: Float32Array[];
}

export interface GenerateHooks {
  readonly onToken?: (event: TokenEvent) => void;
  /** The prompt logprobs (promptLogprobs asked), once, before the first token event. */
  readonly onPromptLogprobs?: (logprobs: readonly (PromptTokenLogprob | null)[]) => void;
  readonly signal?: AbortSignal;
  /** Pauses decoding while the consumer cannot take more tokens (flow-control). */
  readonly flow?: FlowControl;
}

export interface ModelInfo {
  readonly modelDir: string;
  readonly vocabSize: number;
  readonly tokenizerVocabSize: number;
  readonly tokenizerKind: Tokenizer['kind'];
  readonly maxSeqLen: number;
  readonly bosId: number | null;
  readonly eosIds: readonly number[];
  /** The artifacts' model id: the checkpoint fingerprint (+ '-fp32' in fp32 numerics). */
  readonly modelId: string;
  /** Where the graphs run. */
  readonly executionProvider: 'cpu' | 'cuda';
  /** Graphs opened on the CUDA provider with nodes it cannot run, placed on the CPU (RuntimeOptions.cudaCpuFallback 'allow'). */
  readonly cudaCpuFallbackGraphs: readonly string[];
  readonly bytesPerToken: number;
  /** How long the warm-up at open took (ms), null when the engine was opened without one. */
  readonly warmUpMs: number | null;
  /** How long faulting in documentPrefaultBytes took at open (ms), null without it. */
  readonly documentPrefaultMs: number | null;
  /** The scheduler policy in force. */
  readonly scheduler: SchedulerPolicy;
  /** Bytes one sequence at max_seq_len holds (packed cache, windows, ids): what admission reserves at most. */
  readonly sequenceBytesAtMaxContext: number;
  /**
   * Sequences the engine can run at once whatever their length: min(maxRunning, KV budget ÷ the
   * bytes of a sequence at max_seq_len), at least 1. Workers take that many jobs by default.
   */
  readonly batchCapacity: number;
}

/** A snapshot of the engine's scheduler, for metrics (counters are totals since the engine opened). */
export interface EngineStats extends SchedulerStats {
  readonly documentCache: DocumentCacheStats;
  readonly chunkCache: ChunkCacheStats;
  /** The model's scan threads (@csa2/core Csa2Model.scanThreads); null without any. */
  readonly scanThreads: ScanThreadsState | null;
}

export interface SchedulerStats {
  /** Work admitted (holding KV bytes): decoding, prefilling or loading. */
  readonly running: number;
  /** Work waiting for admission (KV budget or decode batch full). */
  readonly waiting: number;
  readonly kvBytesInUse: number;
  readonly kvBudgetBytes: number;
  readonly steps: number;
  readonly decodeTokens: number;
  readonly prefillTokens: number;
  /** Work refused at admission because it could not fit the KV budget even alone. */
  readonly refused: number;
  /** Histograms as cumulative bucket counts (Prometheus style): upper bounds and counts, plus sum. */
  readonly stepMs: Histogram;
  readonly batchRows: Histogram;
  readonly decodeBatch: Histogram;
}

export interface Histogram {
  readonly bounds: readonly number[];
  /** counts[i]: observations ≤ bounds[i]; the last entry counts all (+Inf). */
  readonly counts: readonly number[];
  readonly sum: number;
}
