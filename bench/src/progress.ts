/**
 * @module progress
 * Progress lines on stderr for long forward calls ("tokens done/total, elapsed, rate, ETA"). On a
 * terminal the line is rewritten in place; otherwise a line is written at most every `everyMs`.
 */

export type LogLine = (line: string) => void;

export interface ProgressReporter {
  /** A csa2-core ProgressCallback: tokens done of total. */
  readonly update: (done: number, total: number) => void;
  /** Ends the line (terminal) after the last update. */
  readonly finish: () => void;
}

/**
 * @param label  printed first, e.g. "[v41-bench-1024 16K] exact prefill"
 * @param log    receives whole lines (non-terminal mode)
 * @param opts.tty  rewrite one line in place with \r (writes to `write`) @defaultValue process.stderr.isTTY
 * @param opts.everyMs  minimum time between lines in non-terminal mode @defaultValue 10000
 */
export function progressReporter(
  label: string,
  log: LogLine,
  opts: { readonly tty?: boolean; readonly everyMs?: number; readonly write?: (text: string) => void } = {},
): ProgressReporter {
  const tty = opts.tty ?? process.stderr.isTTY === true;
  const everyMs = opts.everyMs ?? 10_000;
  const write = opts.write ?? ((text: string) => void process.stderr.write(text));
  const t0 = performance.now();
  let lastMs = t0;
  let wroteInPlace = false;
  const text = (done: number, total: number): string => {
    const s = (performance.now() - t0) / 1000;
    const rate = done / Math.max(s, 1e-9);
    const eta = done > 0 && done < total ? `, ETA ${((total - done) / rate).toFixed(0)} s` : '';
    return `${label}: ${done}/${total} tokens, ${s.toFixed(1)} s, ${rate.toFixed(1)} tok/s${eta}`;
  };
  return {
    update(done, total) {
      const now = performance.now();
      if (tty) {
        write(`\r${text(done, total)}\x1b[K`);
        wroteInPlace = true;
      } else if (now - lastMs >= everyMs || done === total) {
        log(text(done, total));
        lastMs = now;
      }
    },
    finish() {
      if (wroteInPlace) write('\n');
      wroteInPlace = false;
    },
  };
}
