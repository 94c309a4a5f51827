/**
 * @module stats
 * Order statistics of timing samples, shared by the suites.
 */

/** The median; the mean of the two middle values for an even count. */
export function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

/** The nearest-rank p-th percentile (p in (0, 100]): the smallest sample with at least p% at or below it. */
export function percentile(values: readonly number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))] as number;
}

/** "12.3 (11.9–13.0)": the median and the range of the values, each through `fmt` (the value alone when there is one; '-' for none). */
export function fmtSpread(values: readonly number[], fmt: (x: number) => string): string {
  if (values.length === 0) return '-';
  const m = fmt(median(values));
  if (values.length === 1) return m;
  return `${m} (${fmt(Math.min(...values))}–${fmt(Math.max(...values))})`;
}
