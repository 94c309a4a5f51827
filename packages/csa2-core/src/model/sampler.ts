/**
 * @module model/sampler
 * Next-token selection. Temperature 0 is greedy (argmax, ties to the lower id, like the reference's
 * `argmax`). Otherwise softmax(logits / T) restricted to the nucleus of cumulative probability top_p,
 * sampled with a seeded generator, so the same seed reproduces the same tokens.
 */
import { InputError } from '../errors.js';
import { SeededRandom } from '../weights/init-model.js';

export interface SamplingParams {
  /** 0 = greedy. @defaultValue 0 */
  readonly temperature: number;
  /** Nucleus mass in (0, 1]. @defaultValue 1 */
  readonly topP: number;
  /** Seed of the sampling generator. @defaultValue 0 */
  readonly seed: number;
}

export function validateSampling(p: SamplingParams): void {
  if (!Number.isFinite(p.temperature) || p.temperature < 0) throw new InputError(`temperature must be a finite number >= 0, got ${p.temperature}`);
  if (!Number.isFinite(p.topP) || p.topP <= 0 || p.topP > 1) throw new InputError(`top_p must be in (0, 1], got ${p.topP}`);
  if (!Number.isSafeInteger(p.seed)) throw new InputError(`seed must be an integer, got ${p.seed}`);
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

export function argmax(logits: ArrayLike<number>, limit = logits.length): number {
  let best = 0;
  for (let i = 1; i < limit; i++) if ((logits[i] as number) > (logits[best] as number)) best = i;
  return best;
}

export class Sampler {
  private readonly rng: SeededRandom;

  /** `vocabLimit` excludes ids at or above it (model rows the tokenizer cannot decode). */
  constructor(readonly params: SamplingParams, readonly vocabLimit: number) {
    validateSampling(params);
    this.rng = new SeededRandom(params.seed);
  }

  next(logits: Float32Array): number {
    const n = Math.min(this.vocabLimit, logits.length);
    if (this.params.temperature === 0) return argmax(logits, n);
    const t = this.params.temperature;
    let max = -Infinity;
    for (let i = 0; i < n; i++) max = Math.max(max, (logits[i] as number) / t);
    const probs = new Float64Array(n);
    let sum = 0;
    for (let i = 0; i < n; i++) {
      probs[i] = Math.exp((logits[i] as number) / t - max);
      sum += probs[i] as number;
    }
    const order = Array.from({ length: n }, (_, i) => i);
    let kept = n;
    if (this.params.topP < 1) {
      order.sort((a, b) => (probs[b] as number) - (probs[a] as number) || a - b);
      let mass = 0;
      kept = 0;
      while (kept < n) {
        mass += (probs[order[kept] as number] as number) / sum;
        kept++;
        if (mass >= this.params.topP) break;
      }
    }
    let keptMass = 0;
    for (let i = 0; i < kept; i++) keptMass += probs[order[i] as number] as number;
    let u = this.rng.nextUniform() * keptMass;
    for (let i = 0; i < kept; i++) {
      u -= probs[order[i] as number] as number;
      if (u < 0) return order[i] as number;
    }
    return order[kept - 1] as number;
  }
}
