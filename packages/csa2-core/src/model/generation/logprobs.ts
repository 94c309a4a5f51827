/**
 * @module model/generation/logprobs
 * Log-probabilities of a chosen token and its most likely alternatives, from the distribution the
 * token was sampled from: the logits after logit_bias and the penalties (sampler.adjustLogits), divided
 * by the temperature (OpenAI documents logprobs after temperature); greedy choices (temperature below
 * GREEDY_TEMPERATURE) report the distribution at temperature 1. Ids at or above `vocabLimit` do not
 * exist for the tokenizer and are left out. float64 log-sum-exp; alternatives by probability, ties to
 * the lower id.
 */
import { GREEDY_TEMPERATURE, type TokenHistory, adjustLogits, type SamplingParams } from './sampler.js';

export interface TokenLogprob {
  readonly id: number;
  readonly logprob: number;
}

export interface TokenLogprobs {
  /** log p of the chosen token. */
  readonly logprob: number;
  /** The `top` most likely tokens, most likely first. */
  readonly top: readonly TokenLogprob[];
}

/** Logprobs of `chosen` and the top `top` (0..20) alternatives. `history` is the one the token was sampled with. */
export function tokenLogprobs(
  params: SamplingParams,
  logits: ArrayLike<number>,
  history: TokenHistory,
  vocabLimit: number,
  chosen: number,
  top: number,
): TokenLogprobs {
  const adjusted = new Float64Array(Math.min(vocabLimit, logits.length));
  const n = adjustLogits(params, logits, history, vocabLimit, adjusted);
  const t = params.temperature < GREEDY_TEMPERATURE ? 1 : params.temperature;
  let max = -Infinity;
  for (let i = 0; i < n; i++) {
    adjusted[i] = (adjusted[i] as number) / t;
    if ((adjusted[i] as number) > max) max = adjusted[i] as number;
  }
  let sum = 0;
  for (let i = 0; i < n; i++) sum += Math.exp((adjusted[i] as number) - max);
  const lse = max + Math.log(sum);
  const lp = (id: number) => (id >= 0 && id < n ? (adjusted[id] as number) - lse : -Infinity);
  const best: TokenLogprob[] = [];
  if (top > 0) {
    // a running best-`top` list (n is the vocabulary, top at most 20)
    for (let i = 0; i < n; i++) {
      const v = adjusted[i] as number;
      if (best.length === top && v <= (adjusted[(best[top - 1] as TokenLogprob).id] as number)) continue;
      let j = best.length < top ? best.length : top - 1;
      if (best.length < top) best.push({ id: i, logprob: 0 });
      while (j > 0 && (adjusted[(best[j - 1] as TokenLogprob).id] as number) < v) {
        best[j] = best[j - 1] as TokenLogprob;
        j--;
      }
      best[j] = { id: i, logprob: 0 };
    }
  }
  return { logprob: lp(chosen), top: best.map((b) => ({ id: b.id, logprob: lp(b.id) })) };
}
