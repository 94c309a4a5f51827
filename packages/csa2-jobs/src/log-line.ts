/**
 * @module log-line
 * The workers' logger: one JSON object per line on stderr ({ time, level, service, msg, …fields }),
 * what log collectors expect from a container. Tests pass `silentLogger`.
 */
export const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export type Logger = (level: LogLevel, msg: string, fields?: Readonly<Record<string, unknown>>) => void;

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export const silentLogger: Logger = () => undefined;

/** A JSON-lines logger writing entries at `minLevel` or above to `out`. */
export function jsonLogger(service: string, minLevel: LogLevel = 'info', out: { write(s: string): unknown } = process.stderr): Logger {
  return (level, msg, fields = {}) => {
    if (RANK[level] < RANK[minLevel]) return;
    out.write(`${JSON.stringify({ time: new Date().toISOString(), level, service, msg, ...fields })}\n`);
  };
}

/** An error as log fields. */
export function errorFields(err: unknown): Record<string, unknown> {
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    return { err: err.message, errName: err.name, ...(typeof code === 'string' ? { code } : {}) };
  }
  return { err: String(err) };
}
