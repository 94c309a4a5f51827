/**
 * @module table
 * Aligned Markdown tables and the number formats the bench tables use. Cells are plain strings; every
 * column is padded to its widest cell so the table reads well in a terminal and renders on GitHub.
 */

export type Align = 'left' | 'right';

export interface Column {
  readonly header: string;
  /** @defaultValue 'right' (numbers) */
  readonly align?: Align;
}

/**
 * Renders a Markdown table (header row, alignment row, body rows). Throws when a row has a different
 * number of cells than there are columns.
 *
 * @example
 * markdownTable([{ header: 'N', align: 'left' }, { header: 'tok/s' }], [['1024', '41.2']]);
 * // | N    | tok/s |
 * // | :--- | ----: |
 * // | 1024 |  41.2 |
 */
export function markdownTable(columns: readonly Column[], rows: readonly (readonly string[])[]): string {
  rows.forEach((r, i) => {
    if (r.length !== columns.length) throw new RangeError(`table row ${i} has ${r.length} cells, expected ${columns.length}`);
  });
  const widths = columns.map((c, j) => Math.max(4, c.header.length, ...rows.map((r) => (r[j] as string).length)));
  const pad = (text: string, j: number): string => {
    const w = widths[j] as number;
    return (columns[j] as Column).align === 'left' ? text.padEnd(w) : text.padStart(w);
  };
  const line = (cells: readonly string[]): string => `| ${cells.map((c, j) => pad(c, j)).join(' | ')} |`;
  const rule = columns.map((c, j) => {
    const w = widths[j] as number;
    return c.align === 'left' ? `:${'-'.repeat(w - 1)}` : `${'-'.repeat(w - 1)}:`;
  });
  return [line(columns.map((c) => c.header)), `| ${rule.join(' | ')} |`, ...rows.map(line)].join('\n');
}

/** A number with `digits` significant digits, without exponent notation for the ranges the bench prints. */
export function fmtSig(x: number, digits = 3): string {
  if (!Number.isFinite(x)) return String(x);
  if (x === 0) return '0';
  const magnitude = Math.floor(Math.log10(Math.abs(x)));
  const decimals = Math.max(0, digits - 1 - magnitude);
  return x.toFixed(Math.min(decimals, 6));
}

/** A fraction as a percentage with `digits` significant digits: 0.0123 → "1.23%". */
export function fmtPercent(fraction: number, digits = 3): string {
  return `${fmtSig(fraction * 100, digits)}%`;
}

/** Bytes in GiB with two decimals. */
export function fmtGiB(bytes: number): string {
  return `${(bytes / 2 ** 30).toFixed(2)} GiB`;
}

/** A duration in milliseconds as "850 ms", "12.3 s" or "4 min 05 s". */
export function fmtDuration(ms: number): string {
  if (ms < 1000) return `${ms.toFixed(0)} ms`;
  if (ms < 120_000) return `${fmtSig(ms / 1000, 3)} s`;
  const s = Math.round(ms / 1000);
  return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, '0')} s`;
}

/** Context lengths as people say them: 1024 → "1K", 16384 → "16K", 240 → "240". */
export function fmtTokens(tokens: number): string {
  return tokens >= 1024 && tokens % 1024 === 0 ? `${tokens / 1024}K` : String(tokens);
}
