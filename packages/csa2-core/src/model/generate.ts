/**
 * @module model/generate
 * The generation loop over Csa2Model: prefill the prompt (exact, or CED encode + decoder bounded
 * replay), then decode step by step with sampling, stop ids and optional teacher forcing.
 */
import { InputError } from '../errors.js';
import type { Csa2Model } from './model.js';
import { Sampler, TokenHistory, type SamplingParams } from './sampler.js';
import type { Sequence } from './sequence.js';

/** How the prompt is prefilled. */
export type PrefillMode =
  /** every layer over the whole prompt, as the official code does */
  | { readonly kind: 'exact' }
  /** encoder over the prompt, then the decoder over its last `replayTokens` tokens (CED serving) */
  | { readonly kind: 'replay'; readonly replayTokens: number };

export const DEFAULT_REPLAY_TOKENS = 128;

export interface GenerateOptions {
  readonly promptIds: readonly number[];
  readonly maxTokens: number;
  readonly sampling: SamplingParams;
  readonly mode: PrefillMode;
  /** Ids fed at the decode steps instead of the sampled ones (teacher forcing); length ≥ maxTokens - 1. */
  readonly forceIds?: readonly number[];
  /** Generation stops after emitting any of these ids. */
  readonly stopIds?: readonly number[];
  /** Ids at or above this are never sampled (e.g. model rows the tokenizer cannot decode). */
  readonly vocabLimit?: number;
  /** Keep each step's logits (for --dump and parity tests). */
  readonly keepLogits?: boolean;
  readonly onToken?: (id: number, index: number) => void | Promise<void>;
  readonly signal?: AbortSignal;
}

export interface GenerateResult {
  readonly tokens: number[];
  /** Row i: the logits token i was chosen from (row 0 after the prompt). Empty unless keepLogits. */
  readonly logits: Float32Array[];
  readonly finishReason: 'length' | 'stop' | 'cancelled';
  readonly promptTokens: number;
}

/** Prefills a fresh sequence with the prompt; returns the next-token logits. */
export async function prefill(model: Csa2Model, seq: Sequence, promptIds: readonly number[], mode: PrefillMode): Promise<Float32Array> {
  if (mode.kind === 'exact') return model.prefillExact(seq, promptIds);
  if (!Number.isInteger(mode.replayTokens) || mode.replayTokens < 1) throw new InputError(`replay must be a positive integer, got ${mode.replayTokens}`);
  const stream = await model.encode(seq, promptIds, { replayTokens: mode.replayTokens, keepRows: mode.replayTokens });
  return model.decoderReplay(seq, stream);
}

export async function generate(model: Csa2Model, opts: GenerateOptions): Promise<GenerateResult> {
  checkGenerateOptions(opts);
  const seq = model.createSequence();
  const logits = await prefill(model, seq, opts.promptIds, opts.mode);
  return continueGeneration(model, seq, logits, opts);
}

function checkGenerateOptions(opts: Pick<GenerateOptions, 'maxTokens' | 'forceIds'>): void {
  if (!Number.isInteger(opts.maxTokens) || opts.maxTokens < 1) throw new InputError(`max tokens must be a positive integer, got ${opts.maxTokens}`);
  if (opts.forceIds !== undefined && opts.forceIds.length < opts.maxTokens) {
    throw new InputError(`--force-ids has ${opts.forceIds.length} ids, ${opts.maxTokens} needed (one per generated token)`);
  }
}

/**
 * The decode loop from an already prefilled sequence whose next-token logits are `logits` (e.g. a
 * sequence loaded from a stored document and replayed). `promptIds`/`mode` of opts are not used.
 */
export async function continueGeneration(
  model: Csa2Model,
  seq: Sequence,
  logits: Float32Array,
  opts: Omit<GenerateOptions, 'promptIds' | 'mode'> & { readonly promptIds?: readonly number[] },
): Promise<GenerateResult> {
  checkGenerateOptions(opts);
  const promptTokens = seq.length;
  const sampler = new Sampler(opts.sampling, opts.vocabLimit ?? model.config.vocabSize);
  // the prompt for the penalties: every token before the first generated one (a document's included)
  const history = new TokenHistory(seq.tokens, seq.length);
  const stop = new Set(opts.stopIds ?? []);
  const tokens: number[] = [];
  const logitsRows: Float32Array[] = [];
  let finishReason: GenerateResult['finishReason'] = 'length';
  for (let i = 0; i < opts.maxTokens; i++) {
    if (opts.signal?.aborted) {
      finishReason = 'cancelled';
      break;
    }
    if (opts.keepLogits) logitsRows.push(logits.slice());
    const id = opts.forceIds !== undefined ? (opts.forceIds[i] as number) : sampler.next(logits, history, i);
    tokens.push(id);
    history.push(id);
    await opts.onToken?.(id, i);
    if (stop.has(id) && opts.forceIds === undefined) {
      finishReason = 'stop';
      break;
    }
    if (opts.signal?.aborted) {
      finishReason = 'cancelled';
      break;
    }
    if (i + 1 < opts.maxTokens) {
      if (seq.length >= model.config.maxSeqLen) break; // the context is full: finish with 'length'
      logits = await model.step(seq, id);
    }
  }
  return { tokens, logits: logitsRows, finishReason, promptTokens };
}
