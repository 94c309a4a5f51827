/**
 * @module model/generation/sampler
 * Next-token selection as a pure function of (params, logits, the sequence's previous tokens, the
 * token's index): `sampleToken` / `Sampler.next`. Nothing carries over from one call to the next —
 * the randomness of token i is `uniformAt(seed, i)`, a counter-based generator (SplitMix64 of the
 * seed and the index), not a stateful stream — so a resumed run, a retried job or a sequence in a
 * batch samples exactly what an undisturbed run samples.
 *
 * Order of operations (vLLM's v1 sampler, `vllm/v1/sample/sampler.py`, whose order is: logit bias,
 * penalties, greedy, temperature, min_p, top_k/top_p, draw):
 *
 * 1. Ids at or above `vocabLimit` are never chosen (model rows the tokenizer cannot decode).
 * 2. `logitBias` (OpenAI `logit_bias`): bias[id] is added to logit[id] before everything else;
 *    biases lie in [-100, 100] (−100 effectively bans a token, +100 effectively forces it).
 * 3. Penalties, in this order:
 *    a. `repetitionPenalty` r (vLLM's `repetition_penalty`, from CTRL): for every id that occurs in
 *       the prompt or in the output so far, a positive logit is divided by r and a negative one
 *       multiplied by r (r > 1 discourages repeats, r < 1 encourages them, 1 = off);
 *    b. `frequencyPenalty` f (OpenAI `frequency_penalty`, in [-2, 2]): logit[id] −= f × (times id
 *       occurs in the OUTPUT so far);
 *    c. `presencePenalty` p (OpenAI `presence_penalty`, in [-2, 2]): logit[id] −= p if id occurs in
 *       the OUTPUT so far.
 *    "The prompt" is every token before the first generated one: a stored document's tokens, then
 *    the request's prompt.
 * 4. Temperature below 1e-5 (0 = the default) is greedy: the argmax of the logits after 1–3, ties to
 *    the lower id (the reference's `argmax`). min_p, top_k and top_p all keep the argmax, so they do
 *    not change a greedy choice.
 * 5. Temperature T: p(id) ∝ exp(logit / T) (float64).
 * 6. `minP` (vLLM `min_p`, in [0, 1], 0 = off): ids whose probability is below min_p × the top
 *    probability (after temperature) are dropped.
 * 7. `topK` (vLLM `top_k`, 0 = off): ids whose probability is below the k-th largest are dropped
 *    (ids tied with the k-th are kept, as vLLM's threshold mask keeps them).
 * 8. `topP` (nucleus, in (0, 1], 1 = off), over the distribution left by 6–7 and renormalized: ids
 *    sorted by probability, descending; the smallest leading set whose mass reaches top_p is kept,
 *    with every id tied with its last member.
 * 9. Draw: u = uniformAt(seed, index) in [0, 1); the chosen id is the first (in ascending id order)
 *    at which the cumulative kept probability exceeds u × (the kept mass).
 *
 * Steps 6–8 run only when they can drop something; top_k and top_p sort only the largest weights
 * (those above a cut that is lowered until they suffice), not the whole vocabulary.
 */
import { InputError } from '../../errors.js';

export interface SamplingParams {
  /** Below 1e-5 (0) = greedy. @defaultValue 0 */
  readonly temperature: number;
  /** Nucleus mass in (0, 1]; 1 = off. @defaultValue 1 */
  readonly topP: number;
  /** Seed of the counter-based generator (a safe integer). @defaultValue 0 */
  readonly seed: number;
  /** Keep the k most likely ids (ties with the k-th kept); 0 = off. @defaultValue 0 */
  readonly topK?: number | undefined;
  /** Drop ids less likely than minP × the top probability, in [0, 1]; 0 = off. @defaultValue 0 */
  readonly minP?: number | undefined;
  /** > 0; 1 = off. Applies to ids seen in the prompt or the output. @defaultValue 1 */
  readonly repetitionPenalty?: number | undefined;
  /** In [-2, 2], over the output tokens. @defaultValue 0 */
  readonly presencePenalty?: number | undefined;
  /** In [-2, 2], per occurrence in the output tokens. @defaultValue 0 */
  readonly frequencyPenalty?: number | undefined;
  /** `[tokenId, bias]` pairs, bias in [-100, 100], each id at most once. @defaultValue none */
  readonly logitBias?: ReadonlyArray<readonly [tokenId: number, bias: number]> | undefined;
}

/** Temperatures below this are greedy (vLLM's _SAMPLING_EPS). */
export const GREEDY_TEMPERATURE = 1e-5;
/** |logit_bias| at most this (OpenAI's range). */
export const LOGIT_BIAS_LIMIT = 100;
/** presence_penalty and frequency_penalty lie in [-this, this] (OpenAI's range). */
export const PENALTY_LIMIT = 2;

/**
 * Checks every field; names it (by its API name) in the InputError. With `vocabLimit`, logit_bias
 * ids must be below it.
 */
export function validateSampling(p: SamplingParams, vocabLimit?: number): void {
  if (!Number.isFinite(p.temperature) || p.temperature < 0) throw new InputError(`temperature must be a finite number >= 0, got ${p.temperature}`);
  if (!Number.isFinite(p.topP) || p.topP <= 0 || p.topP > 1) throw new InputError(`top_p must be in (0, 1], got ${p.topP}`);
  if (!Number.isSafeInteger(p.seed)) throw new InputError(`seed must be an integer, got ${p.seed}`);
  const topK = p.topK ?? 0;
  if (!Number.isSafeInteger(topK) || topK < 0) throw new InputError(`top_k must be an integer >= 0 (0 = off), got ${topK}`);
  const minP = p.minP ?? 0;
  if (!Number.isFinite(minP) || minP < 0 || minP > 1) throw new InputError(`min_p must be in [0, 1], got ${minP}`);
  const rep = p.repetitionPenalty ?? 1;
  if (!Number.isFinite(rep) || rep <= 0) throw new InputError(`repetition_penalty must be a finite number > 0, got ${rep}`);
  for (const [name, v] of [
    ['presence_penalty', p.presencePenalty ?? 0],
    ['frequency_penalty', p.frequencyPenalty ?? 0],
  ] as const) {
    if (!Number.isFinite(v) || Math.abs(v) > PENALTY_LIMIT) throw new InputError(`${name} must be in [-${PENALTY_LIMIT}, ${PENALTY_LIMIT}], got ${v}`);
  }
  const seen = new Set<number>();
  for (const [i, entry] of (p.logitBias ?? []).entries()) {
    const [id, bias] = entry;
    if (!Number.isSafeInteger(id) || id < 0) throw new InputError(`logit_bias: entry ${i}: token id must be an integer >= 0, got ${id}`);
    if (vocabLimit !== undefined && id >= vocabLimit) throw new InputError(`logit_bias: token id ${id} is outside the vocabulary [0, ${vocabLimit})`);
    if (!Number.isFinite(bias) || Math.abs(bias) > LOGIT_BIAS_LIMIT)
      throw new InputError(`logit_bias: the bias of token ${id} must be in [-${LOGIT_BIAS_LIMIT}, ${LOGIT_BIAS_LIMIT}], got ${bias}`);
    if (seen.has(id)) throw new InputError(`logit_bias: token id ${id} appears twice`);
    seen.add(id);
  }
}

/**
 * The tokens a sequence has seen, as the penalties need them: the prompt (every token before the
 * first generated one) and the output so far, with per-id output counts. `push` each token as it
 * is chosen. The prompt is read (once, on first use by a repetition penalty) from `promptIds[0,
 * promptLength)`, so the caller may pass a growing token array without copying it — but must not
 * change those first entries.
 *
 * @example
 * const history = new TokenHistory(seq.tokens, seq.length); // before the first decode step
 * const id = sampler.next(logits, history, history.outputLength);
 * history.push(id);
 */
export class TokenHistory {
  private readonly output: number[] = [];
  private readonly counts = new Map<number, number>();
  private promptSeen: Uint8Array | null = null;

  constructor(
    private readonly promptIds: ArrayLike<number>,
    private readonly promptLength: number = promptIds.length,
  ) {
    if (!Number.isInteger(promptLength) || promptLength < 0 || promptLength > promptIds.length) {
      throw new InputError(`TokenHistory: prompt length ${promptLength} is outside [0, ${promptIds.length}]`);
    }
  }

  /** A history from a prompt and the output tokens generated so far (e.g. a resumed run). */
  static of(promptIds: ArrayLike<number>, outputIds: readonly number[] = []): TokenHistory {
    const h = new TokenHistory(promptIds);
    for (const id of outputIds) h.push(id);
    return h;
  }

  push(id: number): void {
    this.output.push(id);
    this.counts.set(id, (this.counts.get(id) ?? 0) + 1);
  }

  /** Tokens generated so far (= the index of the next one). */
  get outputLength(): number {
    return this.output.length;
  }

  /** Times `id` occurs in the output so far. */
  outputCount(id: number): number {
    return this.counts.get(id) ?? 0;
  }

  /** Distinct output ids with their counts. */
  outputCounts(): ReadonlyMap<number, number> {
    return this.counts;
  }

  /** 1 at every id below `size` that occurs in the prompt (built once, then reused). */
  promptMask(size: number): Uint8Array {
    if (this.promptSeen === null || this.promptSeen.length < size) {
      const mask = new Uint8Array(size);
      for (let i = 0; i < this.promptLength; i++) {
        const id = this.promptIds[i] as number;
        if (id >= 0 && id < size) mask[id] = 1;
      }
      this.promptSeen = mask;
    }
    return this.promptSeen;
  }
}

const MASK64 = (1n << 64n) - 1n;
const GOLDEN_GAMMA = 0x9e3779b97f4a7c15n;

/** SplitMix64's finalizer (Steele, Lea & Flood 2014): a bijective 64-bit mix. */
function mix64(z: bigint): bigint {
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK64;
  return z ^ (z >> 31n);
}

/**
 * The uniform in [0, 1) (53 random bits) that draws token `index` under `seed`: a function of the
 * two alone (counter-based: SplitMix64 at position index+1 of the seed's key), so any token of any
 * run can be re-drawn without replaying the ones before it.
 */
export function uniformAt(seed: number, index: number): number {
  if (!Number.isSafeInteger(seed)) throw new InputError(`seed must be a safe integer, got ${seed}`);
  if (!Number.isSafeInteger(index) || index < 0) throw new InputError(`token index must be an integer >= 0, got ${index}`);
  const key = mix64((BigInt.asUintN(64, BigInt(seed)) + GOLDEN_GAMMA) & MASK64);
  const z = mix64((key + BigInt(index + 1) * GOLDEN_GAMMA) & MASK64);
  return Number(z >> 11n) / 2 ** 53;
}

/**
 * KL(p ‖ q) in nats between the softmax distributions of two logit rows (float64 log-sum-exp), e.g.
 * an exact run's next-token distribution against a bounded-replay one. 0 for equal rows and for rows
 * that differ by a constant.
 */
export function klDivergence(pLogits: ArrayLike<number>, qLogits: ArrayLike<number>): number {
  const lse = (x: ArrayLike<number>) => {
    let m = -Infinity;
    for (let i = 0; i < x.length; i++) m = Math.max(m, x[i] as number);
    let s = 0;
    for (let i = 0; i < x.length; i++) s += Math.exp((x[i] as number) - m);
    return m + Math.log(s);
  };
  const lp = lse(pLogits);
  const lq = lse(qLogits);
  let kl = 0;
  for (let i = 0; i < pLogits.length; i++) {
    const logP = (pLogits[i] as number) - lp;
    kl += Math.exp(logP) * (logP - ((qLogits[i] as number) - lq));
  }
  return Math.max(0, kl);
}

/** The index of the largest of the first `limit` values; ties go to the lower index. */
export function argmax(logits: ArrayLike<number>, limit = logits.length): number {
  let best = 0;
  for (let i = 1; i < limit; i++) if ((logits[i] as number) > (logits[best] as number)) best = i;
  return best;
}

/**
 * Steps 1–3 of the module doc: `out[0, n)` = the logits after logit_bias and the penalties, in
 * float64, with n = min(vocabLimit, logits.length). Returns n.
 */
export function adjustLogits(params: SamplingParams, logits: ArrayLike<number>, history: TokenHistory, vocabLimit: number, out: Float64Array): number {
  const n = Math.min(vocabLimit, logits.length);
  for (let i = 0; i < n; i++) out[i] = logits[i] as number;
  for (const [id, bias] of params.logitBias ?? []) if (id < n) out[id] = (out[id] as number) + bias;
  const rep = params.repetitionPenalty ?? 1;
  if (rep !== 1) {
    const promptSeen = history.promptMask(n);
    const penalize = (id: number): void => {
      const v = out[id] as number;
      out[id] = v > 0 ? v / rep : v * rep;
    };
    for (let id = 0; id < n; id++) if (promptSeen[id] === 1) penalize(id);
    for (const id of history.outputCounts().keys()) if (id < n && promptSeen[id] !== 1) penalize(id);
  }
  const freq = params.frequencyPenalty ?? 0;
  const presence = params.presencePenalty ?? 0;
  if (freq !== 0 || presence !== 0) {
    for (const [id, count] of history.outputCounts()) if (id < n) out[id] = (out[id] as number) - freq * count - presence;
  }
  return n;
}

/**
 * The smallest value v of `sortedAscending` (the largest weights, ascending) such that the values ≥ v
 * hold at least `target` (a descending walk).
 */
function massThreshold(sortedAscending: Float64Array, target: number): number {
  let acc = 0;
  for (let i = sortedAscending.length - 1; i >= 0; i--) {
    acc += sortedAscending[i] as number;
    if (acc >= target) return sortedAscending[i] as number;
  }
  return sortedAscending[0] ?? 0;
}

/**
 * Samples one token id. Reuses its work buffers between calls (one Sampler per thread or per
 * batch is enough), but keeps no state that changes what it returns: `next(logits, history, i)` is
 * a function of its arguments, the params and the vocabulary limit.
 */
export class Sampler {
  private adjusted = new Float64Array(0);
  private weights = new Float64Array(0);
  private scratch = new Float64Array(0);

  /** `vocabLimit` excludes ids at or above it (model rows the tokenizer cannot decode). */
  constructor(
    readonly params: SamplingParams,
    readonly vocabLimit: number,
  ) {
    if (!Number.isSafeInteger(vocabLimit) || vocabLimit < 1) throw new InputError(`vocabulary limit must be a positive integer, got ${vocabLimit}`);
    validateSampling(params, vocabLimit);
  }

  private buffers(n: number): void {
    if (this.adjusted.length < n) {
      this.adjusted = new Float64Array(n);
      this.weights = new Float64Array(n);
      this.scratch = new Float64Array(n);
    }
  }

  /**
   * The id of token `index` (0 = the first generated token) given the logits it is chosen from and
   * the tokens before it (`history.outputLength` is normally `index`).
   */
  next(logits: ArrayLike<number>, history: TokenHistory, index: number): number {
    const p = this.params;
    this.buffers(Math.min(this.vocabLimit, logits.length));
    const x = this.adjusted;
    const n = adjustLogits(p, logits, history, this.vocabLimit, x);
    if (p.temperature < GREEDY_TEMPERATURE) return argmax(x, n);
    const u = uniformAt(p.seed, index);

    // 5. temperature: w = exp((x - max) / T), so the top id has weight 1
    const t = p.temperature;
    let max = -Infinity;
    for (let i = 0; i < n; i++) if ((x[i] as number) > max) max = x[i] as number;
    const w = this.weights;
    for (let i = 0; i < n; i++) w[i] = Math.exp(((x[i] as number) - max) / t);
    // 6. min_p relative to the top probability (whose weight is 1)
    const minP = p.minP ?? 0;
    if (minP > 0) for (let i = 0; i < n; i++) if ((w[i] as number) < minP) w[i] = 0;
    // 7. top_k: the k-th largest weight is the threshold
    const topK = p.topK ?? 0;
    if (topK > 0 && topK < n) {
      const sorted = this.largestWeights(n, (count) => count >= topK);
      if (sorted.length >= topK) {
        const threshold = sorted[sorted.length - topK] as number;
        for (let i = 0; i < n; i++) if ((w[i] as number) < threshold) w[i] = 0;
      }
    }
    // 8. top_p over what is left
    if (p.topP < 1) {
      let total = 0;
      for (let i = 0; i < n; i++) total += w[i] as number;
      const target = p.topP * total;
      const threshold = massThreshold(
        this.largestWeights(n, (_, mass) => mass >= target),
        target,
      );
      for (let i = 0; i < n; i++) if ((w[i] as number) < threshold) w[i] = 0;
    }
    // 9. inverse CDF in ascending id order
    let mass = 0;
    for (let i = 0; i < n; i++) mass += w[i] as number;
    const target = u * mass;
    let acc = 0;
    let last = 0;
    for (let i = 0; i < n; i++) {
      const wi = w[i] as number;
      if (wi === 0) continue;
      acc += wi;
      last = i;
      if (acc > target) return i;
    }
    return last;
  }

  /**
   * The largest positive weights, sorted ascending (in the scratch buffer): those ≥ a cut lowered from
   * 1e-3 of the top weight by factors of 1000 until `enough(count, mass)` holds of them, or every
   * positive weight. They are always a leading set of the descending order, so a threshold that lies
   * among them (the k-th largest, the nucleus' last) is the one the full sort would give; sorting a
   * few hundred weights instead of a 129K vocabulary is what keeps top_k/top_p cheap.
   */
  private largestWeights(n: number, enough: (count: number, mass: number) => boolean): Float64Array {
    const w = this.weights;
    const out = this.scratch;
    let m = 0;
    for (let cut = 1e-3; ; cut = cut > 1e-300 ? cut / 1000 : 0) {
      m = 0;
      let mass = 0;
      for (let i = 0; i < n; i++) {
        const wi = w[i] as number;
        if (wi > 0 && wi >= cut) {
          out[m++] = wi;
          mass += wi;
        }
      }
      if (cut === 0 || enough(m, mass)) break;
    }
    return out.subarray(0, m).sort();
  }
}

/** One-shot form of `Sampler.next` (allocates its buffers each call). */
export function sampleToken(params: SamplingParams, logits: ArrayLike<number>, history: TokenHistory, index: number, vocabLimit = logits.length): number {
  return new Sampler(params, vocabLimit).next(logits, history, index);
}
