/**
 * @module engine
 * One loaded model with its tokenizer (and, when configured, its artifact store), behind the
 * operations the CLI and the workers need: generate (from a prompt, or continuing a stored
 * document), ingest (encode a document into an artifact), tokenize/detokenize.
 *
 * Every generate and ingest call becomes work for one scheduler (scheduler/*): calls made while others
 * run are batched into the same forward steps (continuous batching), prefills are chunked under the
 * step token budget, and admission is bounded by the KV memory budget. Results do not depend on what
 * else runs at the same time (batch invariance, see @csa2/core model/forward).
 *
 * `Engine` runs on the calling thread and blocks it while onnxruntime computes; services and the CLI
 * use `EngineHost` (host/engine-host), which runs an Engine in a worker thread with the same API.
 */
import { ChunkCache, artifactLayout, bytesPerToken, openStore, type ArtifactLayout, type ObjectStore } from '@csa2/artifacts';
import {
  Csa2Error,
  InputError,
  loadModel,
  loadTokenizer,
  modelFingerprint,
  applyCudaEnvironment,
  cudaCpuFallbackGraphs,
  DEFAULT_RUNTIME_OPTIONS,
  type Csa2Model,
  type ModelOptions,
  type RowArena,
  type Tokenizer,
} from '@csa2/core';
import { DEFAULT_DOCUMENT_CACHE_BYTES, DocumentCache } from './scheduler/document-cache.js';
import { EngineLoop } from './scheduler/engine-loop.js';
import { GenerateWork } from './scheduler/generate-work.js';
import { IngestWork } from './scheduler/ingest-work.js';
import { Scheduler } from './scheduler/scheduler.js';
import { DEFAULT_SCHEDULER_POLICY, resolvePolicy } from './scheduler/scheduler-policy.js';
import { sequenceBytes, type WorkContext } from './scheduler/work-context.js';
import type { Work } from './scheduler/work.js';
import type {
  EngineOptions,
  EngineStats,
  GenerateHooks,
  GenerateOutcome,
  GenerateRequest,
  IngestHooks,
  IngestOutcome,
  IngestRequest,
  ModelInfo,
} from './types.js';

export type * from './types.js';

/**
 * Model options on the CUDA provider, where a graph run costs a launch and a host round trip for
 * every input and output while the math is nearly free: the encoder as one graph run per chunk of
 * 4,096 rows (model/encoder/graph-encoder: only packed state crosses the bus); for the spans that still
 * run through the layers (decode steps, decoder replay), the indexers' scores and top-k and the
 * hyper-connections' Sinkhorn inside their graphs rather than in TypeScript, and attention runs as large
 * as the device memory allows. Explicit EngineOptions win.
 */
export const CUDA_MODEL_OPTIONS: Partial<ModelOptions> = {
  encoder: 'graph',
  chunkTokens: 4096,
  indexerScores: 'graph',
  sinkhorn: 'graph',
  scanThreads: 0,
  attentionBudgetValues: 1 << 28,
  indexerBudgetValues: 1 << 27,
};

/** Scheduler defaults on the CUDA provider: prefill spans of 4,096 rows. Explicit settings win. */
export const CUDA_SCHEDULER_DEFAULTS = { prefillChunkTokens: 4096, maxStepTokens: 4096 } as const;

function schedulerOptions(options: EngineOptions): EngineOptions['scheduler'] {
  const rows = options.encoderRows;
  const spans =
    rows !== undefined
      ? { prefillChunkTokens: rows, maxStepTokens: Math.max(rows, DEFAULT_SCHEDULER_POLICY.maxStepTokens) }
      : options.runtime?.executionProvider === 'cuda'
        ? CUDA_SCHEDULER_DEFAULTS
        : {};
  return { ...spans, ...options.scheduler };
}

function checkEncoderRows(rows: number | undefined): void {
  if (rows !== undefined && !(Number.isInteger(rows) && rows >= 1 && rows <= 1 << 20))
    throw new Csa2Error('config-invalid', `encoderRows must be an integer in [1, 1048576], got ${rows}`);
}

export class Engine {
  private readonly cache: ChunkCache;
  private readonly documents: DocumentCache;
  private readonly documentPrefaultMs: number | null;
  private readonly scheduler: Scheduler;
  private readonly loop: EngineLoop;
  private readonly ctx: WorkContext;
  private nextWorkId = 1;
  private closed = false;

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
    this.documents = new DocumentCache(options.documentCacheBytes ?? DEFAULT_DOCUMENT_CACHE_BYTES, { arena: options.documentArena ?? true });
    const prefault = options.documentPrefaultBytes ?? 0;
    if (!(Number.isSafeInteger(prefault) && prefault >= 0))
      throw new Csa2Error('config-invalid', `document prefault bytes must be a non-negative integer, got ${prefault}`);
    if (prefault > 0 && this.documents.arena === null)
      throw new Csa2Error('config-invalid', 'document prefault bytes need the document cache and its arena (documentCacheBytes > 0, documentArena on)');
    this.documentPrefaultMs = prefault > 0 ? (this.documents.arena as RowArena).prefault(prefault) : null;
    const policy = resolvePolicy(schedulerOptions(options));
    this.scheduler = new Scheduler(policy, () => this.loop.poke());
    this.loop = new EngineLoop(model, this.scheduler);
    this.ctx = {
      model,
      tokenizer,
      layout,
      cache: this.cache,
      documents: this.documents,
      requireStore: () => this.requireStore(),
      chunkTokens: options.chunkTokens ?? 4096,
      replayChunkBytes: policy.replayChunkBytes,
      wake: () => this.loop.poke(),
    };
  }

  static async open(options: EngineOptions): Promise<Engine> {
    checkEncoderRows(options.encoderRows);
    resolvePolicy(schedulerOptions(options)); // a bad policy fails before the model loads
    const numerics = options.numerics ?? 'bf16';
    const runtime = { ...DEFAULT_RUNTIME_OPTIONS, ...options.runtime };
    applyCudaEnvironment(runtime); // on the main thread (the CLI); EngineHost does it before its thread starts
    const model = await loadModel(options.modelDir, {
      numerics,
      runtime,
      ...(runtime.executionProvider === 'cuda' ? CUDA_MODEL_OPTIONS : {}),
      ...(options.scanThreads !== undefined ? { scanThreads: options.scanThreads } : {}),
      ...(options.encoder !== undefined ? { encoder: options.encoder } : {}),
      ...(options.encoderRows !== undefined ? { chunkTokens: options.encoderRows } : {}),
    });
    let store: ObjectStore | null = null;
    try {
      const tokenizer = await loadTokenizer({ modelDir: options.modelDir, vocabSize: model.config.vocabSize });
      const modelId = (await modelFingerprint(options.modelDir)) + (numerics === 'fp32' ? '-fp32' : '');
      // the reference encoder's chunks are the CPU provider's; another provider's numerics differ in the
      // last bits, and with its path and rows a run, so its chunks live in a key space of their own for
      // each (every decoder of the model reads them all)
      const layout = artifactLayout(model.config, model.plan, modelId, model.encoderName);
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
      executionProvider: this.model.options.runtime.executionProvider,
      cudaCpuFallbackGraphs: cudaCpuFallbackGraphs(),
      documentPrefaultMs: this.documentPrefaultMs,
      scheduler: this.scheduler.policy,
      sequenceBytesAtMaxContext: sequenceBytes(this.model, this.model.config.maxSeqLen),
      batchCapacity: Math.max(
        1,
        Math.min(this.scheduler.policy.maxRunning, Math.floor(this.scheduler.policy.kvBudgetBytes / sequenceBytes(this.model, this.model.config.maxSeqLen))),
      ),
    };
  }

  /** The scheduler's state and counters (for metrics). */
  stats(): EngineStats {
    return { ...this.scheduler.stats(), documentCache: this.documents.stats, chunkCache: this.cache.stats, scanThreads: this.model.scanThreads };
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
   * Generates from a prompt (or continues a stored document): tokens are reported through
   * `hooks.onToken` as they come; `hooks.signal` stops it (finish reason 'cancelled').
   */
  generate(req: GenerateRequest, hooks: GenerateHooks = {}): Promise<GenerateOutcome> {
    return this.submit((id, settle) => new GenerateWork(id, this.ctx, req, hooks, settle), hooks.signal);
  }

  /**
   * Encodes a document into an artifact: leading chunks that already exist in the tenant's store are
   * loaded (and verified) instead of encoded (then the encoder replays the last R cached tokens),
   * chunks are written as the encoder completes them, the manifest last. Re-running the same ingest
   * rewrites nothing. A stored chunk that fails verification ends the re-used prefix and is written
   * again (`chunksRepaired`), as is any other stored chunk the writer finds damaged.
   */
  ingest(req: IngestRequest, hooks: IngestHooks = {}): Promise<IngestOutcome> {
    return this.submit((id, settle) => new IngestWork(id, this.ctx, req, hooks, settle), hooks.signal);
  }

  private submit<T>(make: (id: number, settle: { resolve(v: T): void; reject(e: unknown): void }) => Work, signal: AbortSignal | undefined): Promise<T> {
    if (this.closed) return Promise.reject(new Csa2Error('runtime', 'the engine is closed'));
    return new Promise<T>((resolve, reject) => {
      const onAbort = () => this.loop.poke();
      const settle = {
        resolve: (v: T) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(v);
        },
        reject: (e: unknown) => {
          signal?.removeEventListener('abort', onAbort);
          reject(e);
        },
      };
      let work: Work;
      try {
        work = make(this.nextWorkId++, settle);
      } catch (err) {
        reject(err);
        return;
      }
      signal?.addEventListener('abort', onAbort, { once: true });
      this.scheduler.submit(work);
      this.loop.poke();
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    this.loop.close();
    this.scheduler.failAll(new Csa2Error('runtime', 'the engine closed'));
    await this.model.dispose();
    await this.store?.close();
  }
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
