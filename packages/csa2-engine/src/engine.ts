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
  Csa2Error,
  DEFAULT_REPLAY_TOKENS,
  InputError,
  generate,
  loadModel,
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
  private constructor(
    readonly model: Csa2Model,
    readonly tokenizer: Tokenizer,
    readonly modelDir: string,
  ) {}

  static async open(options: EngineOptions): Promise<Engine> {
    const model = await loadModel(options.modelDir, {
      numerics: options.numerics ?? 'bf16',
      runtime: { ...DEFAULT_RUNTIME_OPTIONS, ...options.runtime },
    });
    try {
      const tokenizer = await loadTokenizer({ modelDir: options.modelDir, vocabSize: model.config.vocabSize });
      return new Engine(model, tokenizer, options.modelDir);
    } catch (err) {
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
    };
  }

  tokenize(text: string): number[] {
    return this.tokenizer.encode(text);
  }

  detokenize(ids: readonly number[]): string {
    return this.tokenizer.decode(ids);
  }

  async generate(req: GenerateRequest, hooks: GenerateHooks = {}): Promise<GenerateOutcome> {
    if (req.promptIds.length === 0) throw new InputError('the prompt is empty');
    if (req.exact === true && req.replayTokens !== undefined) throw new InputError('replay and exact exclude each other');
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
      const result = await generate(this.model, {
        promptIds: req.promptIds,
        maxTokens: req.maxTokens,
        sampling: req.sampling,
        mode,
        stopIds,
        vocabLimit: Math.min(tok.vocabSize, this.model.config.vocabSize),
        keepLogits: req.keepLogits === true,
        ...(req.forceIds !== undefined ? { forceIds: req.forceIds } : {}),
        signal: abort.signal,
        onToken: (id, index) => {
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
      });
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
        cachedTokens: 0,
        timings: { prefillMs: (tFirst || tEnd) - t0, decodeMs: tFirst > 0 ? tEnd - tFirst : 0 },
        logits: result.logits,
      };
    } finally {
      hooks.signal?.removeEventListener('abort', onOuterAbort);
    }
  }

  async close(): Promise<void> {
    await this.model.dispose();
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
