/**
 * @module testing/greedy
 * A plain greedy (or teacher-forced) generation loop over one sequence, for tests that compare the
 * model's forward modes. Serving uses @csa2/engine's scheduler instead.
 */
import type { Csa2Model } from '../model/model.js';
import { argmax } from '../model/generation/sampler.js';

export interface GreedyRun {
  readonly tokens: number[];
  /** Row i: the logits token i was chosen from (row 0 after the prompt). */
  readonly logits: Float32Array[];
}

/**
 * Prefills `promptIds` (exact, or CED with decoder replay over the last `replayTokens`), then takes
 * `maxTokens` tokens: argmax, or `forceIds[i]` when given.
 */
export async function runGreedy(
  model: Csa2Model,
  promptIds: readonly number[],
  opts: { readonly maxTokens: number; readonly mode: 'exact' | { readonly replayTokens: number }; readonly forceIds?: readonly number[] },
): Promise<GreedyRun> {
  const seq = model.createSequence();
  let logits =
    opts.mode === 'exact'
      ? await model.prefillExact(seq, promptIds)
      : await model.decoderReplay(seq, await model.encode(seq, promptIds, { replayTokens: opts.mode.replayTokens, keepRows: opts.mode.replayTokens }));
  const tokens: number[] = [];
  const rows: Float32Array[] = [];
  for (let i = 0; i < opts.maxTokens; i++) {
    rows.push(logits);
    const id = opts.forceIds?.[i] ?? argmax(logits);
    tokens.push(id);
    if (i + 1 < opts.maxTokens) logits = await model.step(seq, id);
  }
  return { tokens, logits: rows };
}
