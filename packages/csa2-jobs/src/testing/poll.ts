/**
 * @module testing/poll
 * The one "poll until" of the tests: runs `check` every `everyMs` until it returns something other than
 * undefined, and fails naming `what` after `timeoutMs`.
 */

export interface PollOptions {
  /** @defaultValue 10000 */
  readonly timeoutMs?: number;
  /** @defaultValue 20 */
  readonly everyMs?: number;
}

/** Polls `check` until it returns a value other than undefined; throws `timed out after … waiting for <what>`. */
export async function pollUntil<T>(what: string, check: () => T | undefined | Promise<T | undefined>, options: PollOptions = {}): Promise<T> {
  const timeoutMs = options.timeoutMs ?? 10_000;
  const everyMs = options.everyMs ?? 20;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
