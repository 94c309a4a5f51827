/**
 * @module suite
 * What a bench suite is: a name, a one-line summary, its command-line options (node:util parseArgs
 * style, each documented for --help) and a run function. Suites print their tables to `io.out`
 * (stdout) and progress to `io.log` (stderr). The registry that maps names to suite modules is in main.ts.
 */

export interface SuiteOption {
  readonly type: 'string' | 'boolean';
  /** One line for --help, e.g. "context lengths in tokens". */
  readonly description: string;
  /** What applies when the option is absent, as shown by --help. */
  readonly defaultText?: string;
  /** Placeholder shown by --help for string options, e.g. "N,N,...". @defaultValue 'VALUE' */
  readonly valueName?: string;
}

export type OptionValues = Readonly<Record<string, string | boolean | undefined>>;

export interface BenchIo {
  /** Result text (tables), to stdout. */
  readonly out: (text: string) => void;
  /** One progress or status line, to stderr. */
  readonly log: (line: string) => void;
}

export interface BenchSuite {
  readonly name: string;
  readonly summary: string;
  readonly options: Readonly<Record<string, SuiteOption>>;
  run(values: OptionValues, io: BenchIo): Promise<void>;
}

/** A bad command line (unknown option, malformed value): main prints it with the usage and exits 2. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

export const STD_IO: BenchIo = {
  out: (text) => void process.stdout.write(text.endsWith('\n') ? text : `${text}\n`),
  log: (line) => void process.stderr.write(`${line}\n`),
};

/** A token count such as 4096, 8K or 1M (K = 1024, M = 1024²), at least `min`; UsageError naming the option otherwise. */
export function tokenCount(text: string, name: string, min = 1): number {
  const m = /^(\d+)([kKmM]?)$/.exec(text.trim());
  const n = m === null ? NaN : Number(m[1]) * (m[2] === '' ? 1 : /k/i.test(m[2] as string) ? 1024 : 1024 * 1024);
  if (!Number.isSafeInteger(n) || n < min) throw new UsageError(`--${name}: not a token count: "${text}" (token counts such as 8K, 1M, 5000)`);
  return n;
}

/** A comma-separated list option of token counts (tokenCount), or `fallback` when absent. */
export function tokenCountsOption(values: OptionValues, name: string, fallback: readonly number[]): number[] {
  const v = values[name];
  return typeof v === 'string' ? v.split(',').map((t) => tokenCount(t, name)) : [...fallback];
}

/** A positive-integer option's value, or `fallback` when absent; UsageError naming the option otherwise. */
export function positiveIntOption(values: OptionValues, name: string, fallback: number): number {
  const v = values[name];
  if (v === undefined) return fallback;
  const n = Number(v);
  if (typeof v !== 'string' || !Number.isSafeInteger(n) || n < 1) throw new UsageError(`--${name} must be a positive integer, got ${String(v)}`);
  return n;
}
