/**
 * @module scheduler/segment-run
 * One prefill phase of a sequence: the rows of a segment [start, end) through a layer range, run as
 * chunks of whatever size the scheduler grants each step (chunking never changes the result: the
 * segment, not the chunk, fixes the attention layout). Exact prefill is one run over every layer; a
 * CED prefill is an encode run (the encoder layers plus the first decoder KV source's compressor,
 * keeping the last R rows of the decoder-input stream) followed by a replay run over those rows.
 */
import { Csa2Error, type Sequence, type SourceSelections, type Span, type SpanOutput, type StreamRows } from '@csa2/core';

export interface SegmentRunOptions {
  readonly start: number;
  readonly end: number;
  readonly l0: number;
  readonly l1: number;
  /** The stream entering l0 (rows covering the segment); null: embed the tokens (l0 = 0). */
  readonly input: StreamRows | null;
  /** Extend the first decoder KV source's cache from the output (encode runs). */
  readonly compressAtEnd?: boolean;
  /** Keep the output stream of the last `keepRows` rows (encode runs, for the decoder replay). */
  readonly keepRows?: number;
  /** The last chunk asks for the next-token logits. */
  readonly logits?: boolean;
  /** Every chunk asks for the logits after each of its rows (SpanOutput.rowLogits: prompt logprobs). */
  readonly allLogits?: boolean;
  /**
   * The first row to run (default `start`): rows [start, from) were run already, into the sequence's
   * state (a document's stored encoder tail); `keptBefore` holds their output where the kept rows need it.
   */
  readonly from?: number;
  readonly keptBefore?: StreamRows;
  /** No chunk crosses this row (a state is taken there: GenerateWork's encoder tail). */
  readonly breakAt?: number;
  /**
   * Chunks end on multiples of `grid` rows from `start` (or at `end` / `breakAt`), one chunk a grid cell
   * whatever rows a step offers: the one-graph encoder's chunks (Csa2Model.encodeGrid) are then the same
   * however the steps are budgeted, and so are its bits on a provider whose results depend on the chunk.
   */
  readonly grid?: number | null;
  /** The candidate source's known picks of some rows, and where its picks go (Span.knownSources / captureSources). */
  readonly knownSources?: SourceSelections | null;
  readonly captureSources?: ((s: SourceSelections) => void) | null;
}

export class SegmentRun {
  private nextRow: number;
  private readonly kept: { X: Float32Array; pre: Float32Array; start: number; rows: number } | null;

  constructor(
    private readonly seq: Sequence,
    readonly opts: SegmentRunOptions,
    dims: { readonly hcMult: number; readonly dim: number },
  ) {
    if (!(opts.start >= 0 && opts.end > opts.start && opts.end <= seq.length)) {
      throw new Csa2Error('runtime', `segment [${opts.start}, ${opts.end}) does not fit a sequence of ${seq.length} tokens`);
    }
    const from = opts.from ?? opts.start;
    if (!(from >= opts.start && from < opts.end)) throw new Csa2Error('runtime', `segment [${opts.start}, ${opts.end}) cannot start at row ${from}`);
    this.nextRow = from;
    const keep = opts.keepRows === undefined ? 0 : Math.min(Math.max(1, opts.keepRows), opts.end - opts.start);
    this.kept =
      keep === 0 ? null : { X: new Float32Array(keep * dims.hcMult * dims.dim), pre: new Float32Array(keep * dims.hcMult), start: opts.end - keep, rows: keep };
    const k = this.kept;
    if (k !== null && from > k.start) {
      const b = opts.keptBefore;
      const nd = dims.hcMult * dims.dim;
      if (b === undefined || b.start > k.start || b.start + b.rows < from) {
        throw new Csa2Error(
          'runtime',
          `segment run from row ${from}: the kept rows from ${k.start} need the output of rows [${k.start}, ${from}) (keptBefore)`,
        );
      }
      for (let t = k.start; t < from; t++) {
        k.X.set(b.X.subarray((t - b.start) * nd, (t - b.start + 1) * nd), (t - k.start) * nd);
        k.pre.set(b.pre.subarray((t - b.start) * dims.hcMult, (t - b.start + 1) * dims.hcMult), (t - k.start) * dims.hcMult);
      }
    }
  }

  get remaining(): number {
    return this.opts.end - this.nextRow;
  }

  get done(): boolean {
    return this.nextRow >= this.opts.end;
  }

  /** Rows done so far (of the segment). */
  get rowsDone(): number {
    return this.nextRow - this.opts.start;
  }

  /** The span of the next chunk, at most `rows` rows. */
  span(rows: number): Span {
    if (this.done) throw new Csa2Error('runtime', 'segment run is complete');
    const p0 = this.nextRow;
    const brk = this.opts.breakAt;
    const grid = this.opts.grid ?? null;
    const cellEnd = grid === null ? Infinity : this.opts.start + (Math.floor((p0 - this.opts.start) / grid) + 1) * grid;
    const p1 = Math.min(this.opts.end, grid === null ? p0 + Math.max(1, rows) : cellEnd, brk !== undefined && brk > p0 ? brk : Infinity);
    return {
      seq: this.seq,
      layout: { kind: 'segment', start: this.opts.start, end: this.opts.end },
      p0,
      p1,
      l0: this.opts.l0,
      l1: this.opts.l1,
      input: this.opts.input,
      compressAtEnd: this.opts.compressAtEnd === true,
      logits: p1 === this.opts.end && this.opts.logits === true,
      keepFrom: this.kept === null ? p1 : Math.min(p1, Math.max(p0, this.kept.start)),
      ...(this.opts.allLogits === true ? { allLogits: true } : {}),
      ...(this.opts.knownSources != null ? { knownSources: this.opts.knownSources } : {}),
      ...(this.opts.captureSources != null ? { captureSources: this.opts.captureSources } : {}),
    };
  }

  /** Takes the output of the span this run last gave; returns the logits when the run completed with them. */
  took(span: Span, out: SpanOutput): Float32Array | null {
    if (span.p0 !== this.nextRow) throw new Csa2Error('runtime', `segment run expected rows from ${this.nextRow}, got ${span.p0}`);
    const k = this.kept;
    if (k !== null) {
      const nd = k.X.length / k.rows;
      const n = k.pre.length / k.rows;
      const s0 = out.stream.start;
      if (s0 > Math.max(span.p0, k.start)) throw new Csa2Error('runtime', `segment run keeps rows from ${k.start}, the output starts at ${s0}`);
      for (let t = Math.max(span.p0, k.start); t < span.p1; t++) {
        const r = t - s0;
        k.X.set(out.stream.X.subarray(r * nd, (r + 1) * nd), (t - k.start) * nd);
        k.pre.set(out.stream.pre.subarray(r * n, (r + 1) * n), (t - k.start) * n);
      }
    }
    this.nextRow = span.p1;
    return this.done ? out.logits : null;
  }

  /** The next row to run. */
  get next(): number {
    return this.nextRow;
  }

  /** The kept output rows (complete once the run is done), or the last `last` of them (views). */
  keptStream(last?: number): StreamRows {
    const k = this.kept;
    if (k === null) throw new Csa2Error('runtime', 'this segment run keeps no rows');
    const n = last === undefined ? k.rows : Math.min(k.rows, Math.max(1, last));
    const nd = k.X.length / k.rows;
    const h = k.pre.length / k.rows;
    return { start: k.start + k.rows - n, rows: n, X: k.X.subarray((k.rows - n) * nd), pre: k.pre.subarray((k.rows - n) * h) };
  }

  /** A copy of the output of kept rows [from, to) (done already). */
  keptCopy(from: number, to: number): StreamRows {
    const k = this.kept;
    if (k === null || from < k.start || to > Math.min(this.nextRow, k.start + k.rows) || to <= from) {
      throw new Csa2Error('runtime', `segment run: rows [${from}, ${to}) are not kept and done`);
    }
    const nd = k.X.length / k.rows;
    const h = k.pre.length / k.rows;
    return {
      start: from,
      rows: to - from,
      X: k.X.slice((from - k.start) * nd, (to - k.start) * nd),
      pre: k.pre.slice((from - k.start) * h, (to - k.start) * h),
    };
  }
}
