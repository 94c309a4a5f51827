/**
 * @module scheduler/scheduler-policy
 * What the scheduler decides with, as one object: how many sequences decode at once, how many token
 * rows one step may run, how big a prefill chunk may be, how much KV memory sequences may hold, and how
 * long running streams may wait for a step while prefills are mixed in. The scheduler (scheduler/
 * scheduler) applies it between steps, the way vLLM's and SGLang's schedulers apply their configs.
 *
 * Step composition (continuous batching with chunked prefill):
 * 1. every running decode sequence gets its row (one token each), up to `maxRunning`;
 * 2. the remaining token budget goes to prefill work (exact prefill, encode, decoder replay chunks) of
 *    one tenant, the one that has had the least prefill time so far (time-fair: a row deep in a long
 *    document costs more than a prompt's, so sharing rows would not share time; ties go to the tenant
 *    whose last turn is oldest; a tenant back from idle is placed up to `prefillIdleCreditMs` behind
 *    the others, never before where it left off), its oldest work first, at most `prefillChunkTokens`
 *    rows a span; while sequences are decoding, prefill rows are further limited so that the step's
 *    predicted time stays within `decodeLatencyFactor` × a decode-only step (the scheduler's cost model,
 *    fitted from measured steps), which bounds the running streams' inter-token latency during a long
 *    prefill;
 * 3. new work is admitted as soon as it is prepared (its load then overlaps the running step) and
 *    between steps, oldest first within a priority, when its KV bytes (global
 *    cache of prompt + max tokens, windows, ids) fit in `kvBudgetBytes`; work that cannot fit even
 *    alone is refused with an error naming the figures.
 */
import { Csa2Error } from '@csa2/core';

export interface SchedulerPolicy {
  /** Sequences decoding at once (the decode batch). @defaultValue 32 */
  readonly maxRunning: number;
  /** Token rows one step may run, decode rows and prefill rows together. @defaultValue 512 */
  readonly maxStepTokens: number;
  /** Rows one prefill span may run (a chunk of a prompt or a document). @defaultValue 256 */
  readonly prefillChunkTokens: number;
  /** Bytes the admitted sequences may hold (packed global cache, windows, token ids). @defaultValue 4 GiB */
  readonly kvBudgetBytes: number;
  /**
   * While sequences decode, a step that also runs prefill rows may take at most this many times as long
   * as a decode-only step (predicted). 1 turns prefill off while anything decodes; Infinity never
   * limits. @defaultValue 2.5
   */
  readonly decodeLatencyFactor: number;
  /** Prefill rows each prefilling work may always run in a step while sequences decode, whatever the prediction (progress). @defaultValue 16 */
  readonly minPrefillTokens: number;
  /**
   * Prefill time (ms) a tenant coming back from idle may be behind the others: it runs alone for up to
   * this long (no more than the others had while it was idle) before it shares the steps. 0: it starts
   * level with them. @defaultValue 2000
   */
  readonly prefillIdleCreditMs: number;
  /**
   * A CED decoder replay runs in chunks whose attention tables (every row's selected entries and
   * window, unpacked) stay within this many bytes (at least 16 rows a chunk): a question's transient
   * memory stays bounded, whatever its replay length. @defaultValue 16 MiB
   */
  readonly replayChunkBytes: number;
}

export const DEFAULT_SCHEDULER_POLICY: SchedulerPolicy = {
  maxRunning: 32,
  maxStepTokens: 512,
  prefillChunkTokens: 256,
  kvBudgetBytes: 4 * 1024 ** 3,
  decodeLatencyFactor: 2.5,
  minPrefillTokens: 16,
  prefillIdleCreditMs: 2000,
  replayChunkBytes: 16 * 1024 ** 2,
};

/** Checks a policy's fields (positive integers, the step budget at least the decode batch). */
export function resolvePolicy(overrides: Partial<SchedulerPolicy> = {}): SchedulerPolicy {
  const p: SchedulerPolicy = { ...DEFAULT_SCHEDULER_POLICY, ...overrides };
  for (const k of ['maxRunning', 'maxStepTokens', 'prefillChunkTokens', 'minPrefillTokens'] as const) {
    if (!(Number.isInteger(p[k]) && p[k] >= 1)) throw new Csa2Error('config-invalid', `scheduler policy: ${k} must be a positive integer, got ${p[k]}`);
  }
  if (!(Number.isFinite(p.kvBudgetBytes) && p.kvBudgetBytes > 0))
    throw new Csa2Error('config-invalid', `scheduler policy: kvBudgetBytes must be a positive number, got ${p.kvBudgetBytes}`);
  if (!(Number.isFinite(p.replayChunkBytes) && p.replayChunkBytes > 0))
    throw new Csa2Error('config-invalid', `scheduler policy: replayChunkBytes must be a positive number, got ${p.replayChunkBytes}`);
  if (!(Number.isFinite(p.prefillIdleCreditMs) && p.prefillIdleCreditMs >= 0))
    throw new Csa2Error('config-invalid', `scheduler policy: prefillIdleCreditMs must be a number ≥ 0, got ${p.prefillIdleCreditMs}`);
  if (!(p.decodeLatencyFactor >= 1))
    throw new Csa2Error('config-invalid', `scheduler policy: decodeLatencyFactor must be at least 1, got ${p.decodeLatencyFactor}`);
  if (p.maxStepTokens < p.maxRunning) {
    throw new Csa2Error(
      'config-invalid',
      `scheduler policy: maxStepTokens (${p.maxStepTokens}) must be at least maxRunning (${p.maxRunning}), or running sequences could not all step`,
    );
  }
  return p;
}
