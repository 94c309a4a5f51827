/**
 * @module engine
 * One loaded model with its tokenizer (and, when configured, its artifact store), behind the
 * operations the CLI and the workers need: generate (from a prompt, or continuing a stored
 * document), ingest (encode a document into an artifact), tokenize/detokenize.
 *
 * `Engine` runs on the calling thread and blocks it while onnxruntime computes; services and the CLI
 * use `EngineHost` (host/engine-host), which runs an Engine in a worker thread with the same API.
 */
import {
  ArtifactCorruptError,
  ArtifactMissingError,
  ArtifactReader,
  ArtifactWriter,
  ModelMismatchError,
  ObjectNotFoundError,
  UnsupportedVersionError,
  chunkObjectKey,
  fullChunkKeys,
  ChunkCache,
  DEFAULT_CHUNK_TOKENS,
  artifactLayout,
  bytesPerToken,
  encodeManifest,
  existingChunkPrefix,
  openStore,
  type ArtifactLayout,
  type ObjectStore,
} from '@csa2/artifacts';
import {
  Csa2Error,
  DEFAULT_REPLAY_TOKENS,
  InputError,
  continueGeneration,
  generate,
  loadModel,
  modelFingerprint,
  type Sequence,
  loadTokenizer,
  type Csa2Model,
  type NumericsMode,
  type PrefillMode,
  type RuntimeOptions,
  type SamplingParams,
  type Tokenizer,
  DEFAULT_RUNTIME_OPTIONS,
} from '@csa2/core';

export interface EngineOptions {
  /** Checkpoint directory (config.json + model.safetensors). */
  readonly modelDir: string;
  /** @defaultValue 'bf16' */
  readonly numerics?: NumericsMode;
  readonly runtime?: Partial<RuntimeOptions>;
  /** Object store of the artifacts (file:///… or s3://bucket/prefix?…); documents need one. */
  readonly store?: string;
  /** Bytes of verified chunks kept in memory for repeated queries on the same documents. @defaultValue 256 MiB */
  readonly chunkCacheBytes?: number;
  /** Tokens per artifact chunk for documents this engine writes. @defaultValue 4096 */
  readonly chunkTokens?: number;
  /**
   * Run one chunk of placeholder tokens through the model before open() returns (Csa2Model.warmUp), so
   * the first request does not pay for memory-arena growth. Serving workers turn it on; one-shot CLI
   * runs leave it off. @defaultValue false
   */
  readonly warmUp?: boolean;
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
  /** Encoder replay when leading chunks are reused. @defaultValue 128 */
  readonly replayTokens?: number;
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
  /** Bytes of the whole artifact (every chunk + manifest). */
  readonly artifactBytes: number;
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
  /** Continue a stored document: its tokens precede promptIds (which may then be empty). */
  readonly document?: DocumentRef;
}

/** One generated token and the text it completed (possibly '' while a UTF-8 character is split). */
export interface TokenEvent {
  readonly index: number;
  readonly id: number;
  readonly text: string;
}

export type FinishReason = 'length' | 'stop' | 'cancelled';

export interface GenerateOutcome {
  readonly tokens: number[];
  readonly text: string;
  readonly finishReason: FinishReason;
  readonly promptTokens: number;
  /** Prompt tokens served from a stored artifact instead of being encoded. */
  readonly cachedTokens: number;
  readonly timings: { readonly prefillMs: number; readonly decodeMs: number };
  /** Row i: the logits token i was chosen from. Empty unless keepLogits. */
  readonly logits: Float32Array[];
}

export interface GenerateHooks {
  readonly onToken?: (event: TokenEvent) => void;
  readonly signal?: AbortSignal;
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
  readonly bytesPerToken: number;
  /** How long the warm-up at open took (ms), null when the engine was opened without one. */
  readonly warmUpMs: number | null;
}

/** Holds back text that might be the start of a stop sequence; reports where a stop sequence begins. */
export class StopMatcher {
  private pending = '';
  private readonly longest: number;

  constructor(private readonly stops: readonly string[]) {
    for (const s of stops) if (typeof s !== 'string' || s.length === 0) throw new InputError('stop sequences must be non-empty strings');
    this.longest = Math.max(0, ...stops.map((s) => s.length));
  }

  /** Feeds new text; returns the text safe to emit now and whether a stop sequence was hit. */
  push(text: string): { emit: string; stopped: boolean } {
    if (this.stops.length === 0) return { emit: text, stopped: false };
    this.pending += text;
    let cut = -1;
    for (const s of this.stops) {
      const at = this.pending.indexOf(s);
      if (at >= 0 && (cut < 0 || at < cut)) cut = at;
    }
    if (cut >= 0) {
      const emit = this.pending.slice(0, cut);
      this.pending = '';
      return { emit, stopped: true };
    }
    // keep the longest suffix that is a proper prefix of some stop sequence
    let keep = 0;
    for (let k = Math.min(this.longest - 1, this.pending.length); k > 0; k--) {
      const tail = this.pending.slice(this.pending.length - k);
      if (this.stops.some((s) => s.startsWith(tail))) {
        keep = k;
        break;
      }
    }
    const emit = this.pending.slice(0, this.pending.length - keep);
    this.pending = this.pending.slice(this.pending.length - keep);
    return { emit, stopped: false };
  }

  flush(): string {
    const rest = this.pending;
    this.pending = '';
    return rest;
  }
}

export class Engine {
  private readonly cache: ChunkCache;

  private constructor(
    readonly model: Csa2Model,
    readonly tokenizer: Tokenizer,
    readonly modelDir: string,
    readonly layout: ArtifactLayout,
    private readonly store: ObjectStore | null,
    private readonly options: EngineOptions,
    private readonly warmUpMs: number | null,
  ) {
    this.cache = new ChunkCache({ maxBytes: options.chunkCacheBytes ?? 256 * 1024 * 1024 });
  }

  static async open(options: EngineOptions): Promise<Engine> {
    const numerics = options.numerics ?? 'bf16';
    const model = await loadModel(options.modelDir, { numerics, runtime: { ...DEFAULT_RUNTIME_OPTIONS, ...options.runtime } });
    let store: ObjectStore | null = null;
    try {
      const tokenizer = await loadTokenizer({ modelDir: options.modelDir, vocabSize: model.config.vocabSize });
      const modelId = (await modelFingerprint(options.modelDir)) + (numerics === 'fp32' ? '-fp32' : '');
      const layout = artifactLayout(model.config, model.plan, modelId);
      store = options.store === undefined ? null : openStore(options.store);
      const warmUpMs = options.warmUp === true ? await model.warmUp() : null;
      return new Engine(model, tokenizer, options.modelDir, layout, store, options, warmUpMs);
    } catch (err) {
      await store?.close();
      await model.dispose();
      throw err;
    }
  }

  info(): ModelInfo {
    return {
      modelDir: this.modelDir,
      vocabSize: this.model.config.vocabSize,
      tokenizerVocabSize: this.tokenizer.vocabSize,
      tokenizerKind: this.tokenizer.kind,
      maxSeqLen: this.model.config.maxSeqLen,
      bosId: this.tokenizer.bosId,
      eosIds: this.tokenizer.eosIds,
      modelId: this.layout.modelId,
      bytesPerToken: bytesPerToken(this.layout),
      warmUpMs: this.warmUpMs,
    };
  }

  tokenize(text: string): number[] {
    return this.tokenizer.encode(text);
  }

  detokenize(ids: readonly number[]): string {
    return this.tokenizer.decode(ids);
  }

  private requireStore(): ObjectStore {
    if (this.store === null) throw new InputError('documents need an object store: start the engine with a store URL (--store / CSA2_STORE_URL)');
    return this.store;
  }

  /**
   * Loads a stored document into a fresh sequence, encodes `promptIds` after it with encoder replay
   * of the last R cached tokens, and replays the decoder over the last R tokens. Returns the
   * sequence, the next-token logits and the number of tokens served from the artifact.
   */
  private async prefillFromDocument(doc: DocumentRef, promptIds: readonly number[], replayTokens: number): Promise<{ seq: Sequence; logits: Float32Array; cachedTokens: number }> {
    const reader = new ArtifactReader({ store: this.requireStore(), layout: this.layout, cache: this.cache });
    const manifest = await reader.readManifest(doc.tenant, doc.documentId);
    if (manifest.tokenCount + promptIds.length > this.model.config.maxSeqLen) {
      throw new InputError(`document ${doc.documentId} (${manifest.tokenCount} tokens) plus the prompt (${promptIds.length}) exceed max_seq_len ${this.model.config.maxSeqLen}`);
    }
    const seq = this.model.createSequence();
    await listedChunks(doc, () => reader.loadInto(seq, manifest));
    const stream = await this.model.encode(seq, promptIds, { replayTokens, keepRows: replayTokens });
    const logits = await this.model.decoderReplay(seq, stream);
    return { seq, logits, cachedTokens: Math.min(manifest.tokenCount, doc.cachedTokens ?? manifest.tokenCount) };
  }

  async generate(req: GenerateRequest, hooks: GenerateHooks = {}): Promise<GenerateOutcome> {
    if (req.promptIds.length === 0 && req.document === undefined) throw new InputError('the prompt is empty');
    if (req.exact === true && req.replayTokens !== undefined) throw new InputError('replay and exact exclude each other');
    if (req.exact === true && req.document !== undefined) throw new InputError('exact mode runs the whole prompt through every layer; it cannot continue a stored document');
    const mode: PrefillMode = req.exact === true ? { kind: 'exact' } : { kind: 'replay', replayTokens: req.replayTokens ?? DEFAULT_REPLAY_TOKENS };
    const tok = this.tokenizer;
    const stopIds = [...(req.stopIds ?? []), ...(req.ignoreEos === true ? [] : tok.eosIds)];
    const stops = new StopMatcher(req.stopSequences ?? []);
    const decoder = tok.createDecodeStream();
    let text = '';
    let stoppedByText = false;
    const abort = new AbortController();
    const onOuterAbort = () => abort.abort();
    hooks.signal?.addEventListener('abort', onOuterAbort, { once: true });
    if (hooks.signal?.aborted === true) abort.abort();
    const t0 = performance.now();
    let tFirst = 0;
    try {
      const opts = {
        promptIds: req.promptIds,
        maxTokens: req.maxTokens,
        sampling: req.sampling,
        mode,
        stopIds,
        vocabLimit: Math.min(tok.vocabSize, this.model.config.vocabSize),
        keepLogits: req.keepLogits === true,
        ...(req.forceIds !== undefined ? { forceIds: req.forceIds } : {}),
        signal: abort.signal,
        onToken: (id: number, index: number) => {
          if (index === 0) tFirst = performance.now();
          const piece = stopIds.includes(id) ? '' : decoder.push(id);
          const { emit, stopped } = stops.push(piece);
          text += emit;
          hooks.onToken?.({ index, id, text: emit });
          if (stopped) {
            stoppedByText = true;
            abort.abort();
          }
        },
      };
      let cachedTokens = 0;
      let result;
      if (req.document === undefined) result = await generate(this.model, opts);
      else {
        const pre = await this.prefillFromDocument(req.document, req.promptIds, req.replayTokens ?? DEFAULT_REPLAY_TOKENS);
        cachedTokens = pre.cachedTokens;
        result = await continueGeneration(this.model, pre.seq, pre.logits, opts);
      }
      const tEnd = performance.now();
      if (!stoppedByText && result.finishReason !== 'cancelled') {
        const rest = stops.push(decoder.flush()).emit + stops.flush();
        if (rest.length > 0) {
          text += rest;
          hooks.onToken?.({ index: result.tokens.length, id: -1, text: rest });
        }
      }
      const finishReason: FinishReason = stoppedByText ? 'stop' : result.finishReason;
      return {
        tokens: result.tokens,
        text,
        finishReason,
        promptTokens: result.promptTokens,
        cachedTokens,
        timings: { prefillMs: (tFirst || tEnd) - t0, decodeMs: tFirst > 0 ? tEnd - tFirst : 0 },
        logits: result.logits,
      };
    } finally {
      hooks.signal?.removeEventListener('abort', onOuterAbort);
    }
  }

  /**
   * Encodes a document into an artifact: leading chunks that already exist in the tenant's store are
   * loaded (and verified) instead of encoded (then the encoder replays the last R cached tokens),
   * chunks are written as the encoder completes them, the manifest last. Re-running the same ingest
   * rewrites nothing. A stored chunk that fails verification ends the re-used prefix and is written
   * again (`chunksRepaired`), as is any other stored chunk the writer finds damaged.
   */
  async ingest(req: IngestRequest, hooks: IngestHooks = {}): Promise<IngestOutcome> {
    const store = this.requireStore();
    if ((req.tokenIds === undefined) === (req.text === undefined)) throw new InputError('give the document as exactly one of tokenIds and text');
    // a text document starts with the tokenizer's BOS, as the gateway sends it
    const bos = this.tokenizer.bosId;
    const own = req.tokenIds !== undefined ? req.tokenIds : [...(bos !== null ? [bos] : []), ...this.tokenize(req.text as string)];
    const ids = req.prefix !== undefined ? (await this.documentTokens(store, req.prefix)).concat(own) : [...own];
    if (ids.length === 0) throw new InputError(`document ${req.documentId} is empty`);
    const chunkTokens = req.chunkTokens ?? this.options.chunkTokens ?? DEFAULT_CHUNK_TOKENS;
    const replayTokens = req.replayTokens ?? DEFAULT_REPLAY_TOKENS;
    const createdAtMs = req.createdAtMs;
    const writer = new ArtifactWriter({
      store,
      layout: this.layout,
      tenant: req.tenant,
      documentId: req.documentId,
      chunkTokens,
      // a stored chunk this ingest does not load (past a damaged one, the trailing partial chunk) is
      // downloaded and verified before it counts as written; a corrupt one is replaced
      verifyExisting: 'full',
      ...(createdAtMs !== undefined ? { now: () => new Date(createdAtMs) } : {}),
    });
    // leading chunks that exist already (an equal prefix ingested before) are loaded, not encoded;
    // each is verified, and the first one that fails verification ends the prefix: it is encoded again
    const existing = ids.length > chunkTokens ? await existingChunkPrefix(store, this.layout, req.tenant, ids, chunkTokens) : 0;
    const { seq, chunks: reusedChunks, damaged } = await this.loadStoredPrefix(store, req.tenant, ids, chunkTokens, existing);
    const reusedTokens = reusedChunks * chunkTokens;
    if (reusedChunks > 0) await writer.adoptStoredChunks(seq, reusedChunks); // verified by the reader: not packed again
    const segmentStart = reusedTokens === 0 ? 0 : Math.max(0, reusedTokens - Math.max(1, replayTokens));
    const total = ids.length;
    hooks.onProgress?.({ tokensDone: reusedTokens, tokensTotal: total, reusedTokens });
    const rest = ids.slice(reusedTokens);
    let pendingWrite: Promise<void> = Promise.resolve();
    if (rest.length > 0) {
      await this.model.encode(seq, rest, {
        replayTokens,
        keepRows: 1,
        onProgress: (done) => {
          if (hooks.signal?.aborted === true) throw new Csa2Error('runtime', `ingest of ${req.documentId} was cancelled`);
          const upto = segmentStart + done;
          pendingWrite = writer.writeAvailable(seq, upto);
          pendingWrite.catch(() => undefined); // surfaced by finish()
          hooks.onProgress?.({ tokensDone: Math.max(reusedTokens, upto), tokensTotal: total, reusedTokens });
        },
      });
    }
    await pendingWrite.catch(() => undefined);
    const manifest = await writer.finish(seq);
    const stats = writer.stats;
    // (a damaged chunk was deleted before it was written again, so the writer counts it as written)
    const artifactBytes = manifest.chunks.reduce((a, c) => a + c.sizeBytes, 0) + encodeManifest(manifest).length;
    return {
      documentId: req.documentId,
      tokens: manifest.tokenCount,
      bytesWritten: stats.bytesWritten,
      artifactBytes,
      reusedTokens,
      chunksWritten: stats.chunksWritten,
      chunksSkipped: stats.chunksSkipped,
      chunksRepaired: damaged + stats.chunksRepaired,
      bytesPerToken: bytesPerToken(this.layout),
    };
  }

  /** A stored document's token ids (its manifest, then every chunk, verified). */
  private async documentTokens(store: ObjectStore, doc: DocumentRef): Promise<number[]> {
    const reader = new ArtifactReader({ store, layout: this.layout, cache: this.cache });
    const manifest = await reader.readManifest(doc.tenant, doc.documentId);
    return listedChunks(doc, () => reader.readTokens(manifest));
  }

  /**
   * Loads the first `chunkCount` stored full chunks of `ids` into a fresh sequence, each verified by
   * the reader. A chunk that fails verification (or vanished since it was found) ends the prefix
   * there: it is deleted, so that the writer stores it again, and the chunks before it are loaded
   * again (from the chunk cache) into a new sequence. Returns the sequence, the chunks loaded and the
   * number of damaged chunks found (0 or 1).
   */
  private async loadStoredPrefix(
    store: ObjectStore,
    tenant: string,
    ids: readonly number[],
    chunkTokens: number,
    chunkCount: number,
  ): Promise<{ seq: Sequence; chunks: number; damaged: number }> {
    const reader = new ArtifactReader({ store, layout: this.layout, cache: this.cache });
    const objectKeys = fullChunkKeys(this.layout.modelId, ids, chunkTokens, chunkCount).map((k) => chunkObjectKey(tenant, k));
    let count = chunkCount;
    let damaged = 0;
    for (;;) {
      const seq = this.model.createSequence();
      if (count === 0) return { seq, chunks: 0, damaged };
      try {
        await reader.loadChunkPrefix(seq, { tenant, tokenIds: ids, chunkTokens, chunkCount: count });
        return { seq, chunks: count, damaged };
      } catch (err) {
        if (!isDamagedChunkError(err)) throw err;
        const bad = objectKeys.indexOf(err.key);
        if (bad < 0 || bad >= count) throw err;
        // the key is its content's hash: whatever is stored under it that does not verify is damage
        await store.delete(err.key);
        this.cache.delete(err.key);
        damaged = 1;
        count = bad;
      }
    }
  }

  async close(): Promise<void> {
    await this.model.dispose();
    await this.store?.close();
  }
}

/**
 * Runs a read of the chunks a manifest lists: one that is missing is storage loss
 * (ArtifactMissingError), not an unknown document.
 */
async function listedChunks<T>(doc: DocumentRef, read: () => Promise<T>): Promise<T> {
  try {
    return await read();
  } catch (err) {
    if (err instanceof ObjectNotFoundError) throw new ArtifactMissingError(err.key, `document ${doc.documentId} of tenant ${doc.tenant}`, { cause: err });
    throw err;
  }
}

/** A stored chunk that cannot be used as it is: it failed verification, or it is gone. */
function isDamagedChunkError(err: unknown): err is ArtifactCorruptError | ObjectNotFoundError | ModelMismatchError | UnsupportedVersionError {
  return err instanceof ArtifactCorruptError || err instanceof ObjectNotFoundError || err instanceof ModelMismatchError || err instanceof UnsupportedVersionError;
}

/** Errors cross the worker-thread boundary as plain data; this is their shape. */
export interface SerializedError {
  readonly name: string;
  readonly message: string;
  readonly code: string | null;
  readonly stack?: string;
}

export function serializeError(err: unknown): SerializedError {
  if (err instanceof Csa2Error) return { name: err.name, message: err.message, code: err.code, ...(err.stack !== undefined ? { stack: err.stack } : {}) };
  if (err instanceof Error) return { name: err.name, message: err.message, code: null, ...(err.stack !== undefined ? { stack: err.stack } : {}) };
  return { name: 'Error', message: String(err), code: null };
}
