/**
 * @module scheduler/work
 * One unit of engine work the scheduler runs: a generation or an ingest, each owning one sequence.
 *
 * Lifecycle (the scheduler drives it; I/O runs outside the compute steps):
 *   prepare()  async, at submit: validation and what admission needs (a stored document's manifest,
 *              the tokens of a text): sets `kvBytes`;
 *   admitted   when its KV bytes fit the budget (priority, then age);
 *   load()     async, once admitted: fills the sequence (stored chunks);
 *   steps      each step the scheduler asks `next()` what it could run and gives it a span through
 *              `span(rows)`, then hands back the span's output with `took()`;
 *   finished   `finished` turns true (the work settled its own promise: result or error), and the
 *              scheduler releases its KV bytes.
 */
import type { Span, SpanOutput } from '@csa2/core';

/** What a work item could run in the next step. */
export type NextRows =
  /** `rows` decode rows (one per choice that runs): the scheduler asks span(1) for each it grants */
  | { readonly kind: 'decode'; readonly rows: number }
  /** up to `rows` prefill rows through `layers` of the model's layers */
  | { readonly kind: 'prefill'; readonly rows: number; readonly layers: number }
  /** nothing now (waiting on I/O, or finished) */
  | null;

export interface Work {
  readonly id: number;
  readonly kind: 'generate' | 'ingest';
  readonly tenant: string;
  /** Lower runs first (0: interactive, larger: batch). */
  readonly priority: number;
  readonly submittedAtMs: number;
  /** Sequences it decodes at once once admitted (a generation's choices; 1 for an ingest). */
  readonly sequences: number;
  /** Bytes the work's sequence will hold at most (admission reserves them); known after prepare(). */
  readonly kvBytes: number;
  readonly finished: boolean;
  /** True once the caller's signal asked to stop. */
  readonly cancelled: boolean;
  prepare(): Promise<void>;
  load(): Promise<void>;
  next(): NextRows;
  span(rows: number): Span;
  took(span: Span, out: SpanOutput): void;
  /** Ends the work with an error (a failed step, a failed prepare or load, the engine closing). */
  fail(err: unknown): void;
  /** Ends a cancelled work (its result says so) between steps. */
  cancel(): void;
}
