/**
 * @module stream
 * The per-request Redis Stream the decoder worker writes and the gateway relays as SSE.
 *
 * A request with n choices (DecodeJob.n) has one stream per choice (queues.ts choiceStreamId), each
 * with these entries and rules; error entries go to choice 0's stream (an error ends the request).
 *
 * Entry fields (all strings, as Redis stores them):
 *   token:  i = token index (0, 1, …), id = token id, t = text completed by this token ('' allowed),
 *           and when the job asked for logprobs, lp = JSON [logprob, [[id, logprob], …]]: the token's
 *           natural-log probability and the most likely alternatives, most likely first (null for a
 *           logprob of -Infinity, which JSON cannot carry)
 *   prompt: plp = JSON [null | [id, logprob, [[id, logprob], …]], …]: per prompt token (DecodeJob
 *           promptIds) its logprob given the tokens before it and the alternatives, null for a first
 *           token without context. Only in choice 0's stream, only as its first entry (before token 0),
 *           written once (DecodeJob.promptLogprobs)
 *   final:  done = '1', finish_reason, usage = JSON Usage, n = number of token entries before it,
 *           and, added by the decoder worker:
 *           t = text released only at the end ('' mostly): text held back while it could still be the
 *               start of a stop sequence, or the tail of an incomplete UTF-8 character. A reader
 *               appends it after the last token's text; the full completion is the concatenation
 *               of every token entry's `t` and then the final entry's `t`.
 *           queue_ms = acceptedAtMs → start of the attempt that finished, prefill_ms = that attempt's
 *               time to the first token, decode_ms = first → last token, attempt = 1-based attempt
 *               number (all integers, for metrics; absent on a final entry written without
 *               generating, e.g. a request cancelled before it started)
 *   error:  error = JSON { code, message } (the request failed for good; the gateway maps the code)
 *
 * At most one final or error entry ends a stream, and nothing follows it. A retried decode job
 * regenerates the same tokens (seeded sampling, deterministic numerics) and appends only indexes not
 * yet in the stream, so a reader never sees a duplicate or a gap (stream-writer enforces this
 * atomically in Redis). The stream key expires STREAM_TTL_SECONDS after its last entry.
 */

export interface Usage {
  readonly prompt_tokens: number;
  readonly completion_tokens: number;
  readonly total_tokens: number;
  readonly prompt_tokens_details: { readonly cached_tokens: number };
}

/** A token and its log-probability (natural log; -Infinity: impossible). */
export interface TokenAlternative {
  readonly id: number;
  readonly logprob: number;
}

/** A prompt token's log-probability given the tokens before it, with the most likely alternatives. */
export interface PromptTokenEntry extends TokenAlternative {
  readonly top: readonly TokenAlternative[];
}

export type StreamEntry =
  | {
      readonly kind: 'token';
      readonly index: number;
      readonly id: number;
      readonly text: string;
      /** The token's log-probability (the job asked for logprobs). */
      readonly logprob?: number;
      /** The most likely tokens at this step, most likely first (with logprob). */
      readonly top?: readonly TokenAlternative[];
    }
  | { readonly kind: 'prompt'; readonly logprobs: readonly (PromptTokenEntry | null)[] }
  | {
      readonly kind: 'final';
      readonly finishReason: 'length' | 'stop' | 'cancelled';
      readonly usage: Usage;
      readonly tokens: number;
      /** Text released at the end, after the last token's text (see the module header). */
      readonly text?: string;
      readonly timing?: StreamTiming;
    }
  | { readonly kind: 'error'; readonly code: string; readonly message: string };

/** Timing of the attempt that produced the output (all milliseconds, integers). */
export interface StreamTiming {
  /** acceptedAtMs → this attempt started running. */
  readonly queueMs: number;
  /** Attempt start → first token (document load, prefill, replay). */
  readonly prefillMs: number;
  /** First token → last token. */
  readonly decodeMs: number;
  /** 1-based attempt number. */
  readonly attempt: number;
}

/** A logprob as JSON carries it: -Infinity (or NaN) as null. */
const toJsonLogprob = (lp: number): number | null => (Number.isFinite(lp) ? lp : null);
const fromJsonLogprob = (v: unknown): number => (typeof v === 'number' ? v : -Infinity);
const encodeAlternatives = (top: readonly TokenAlternative[]): [number, number | null][] => top.map((a) => [a.id, toJsonLogprob(a.logprob)]);

function decodeAlternatives(v: unknown, what: string): TokenAlternative[] {
  if (!Array.isArray(v)) throw new Error(`stream entry: ${what} alternatives are not a list`);
  return v.map((a: unknown) => {
    if (!Array.isArray(a) || !Number.isInteger(a[0])) throw new Error(`stream entry: bad ${what} alternative ${JSON.stringify(a)}`);
    return { id: a[0] as number, logprob: fromJsonLogprob(a[1]) };
  });
}

function decodePromptLogprobs(raw: string): (PromptTokenEntry | null)[] {
  const v: unknown = JSON.parse(raw);
  if (!Array.isArray(v)) throw new Error('stream entry: plp is not a list');
  return v.map((p: unknown) => {
    if (p === null) return null;
    if (!Array.isArray(p) || !Number.isInteger(p[0])) throw new Error(`stream entry: bad prompt logprob ${JSON.stringify(p)?.slice(0, 80)}`);
    return { id: p[0] as number, logprob: fromJsonLogprob(p[1]), top: decodeAlternatives(p[2], 'prompt') };
  });
}

/** Field/value pairs for XADD. */
export function encodeStreamEntry(e: StreamEntry): string[] {
  switch (e.kind) {
    case 'token':
      return [
        'i',
        String(e.index),
        'id',
        String(e.id),
        't',
        e.text,
        ...(e.logprob !== undefined ? ['lp', JSON.stringify([toJsonLogprob(e.logprob), encodeAlternatives(e.top ?? [])])] : []),
      ];
    case 'prompt':
      return ['plp', JSON.stringify(e.logprobs.map((p) => (p === null ? null : [p.id, toJsonLogprob(p.logprob), encodeAlternatives(p.top)])))];
    case 'final':
      return [
        'done',
        '1',
        'finish_reason',
        e.finishReason,
        'usage',
        JSON.stringify(e.usage),
        'n',
        String(e.tokens),
        ...(e.text !== undefined && e.text !== '' ? ['t', e.text] : []),
        ...(e.timing !== undefined
          ? [
              'queue_ms',
              String(e.timing.queueMs),
              'prefill_ms',
              String(e.timing.prefillMs),
              'decode_ms',
              String(e.timing.decodeMs),
              'attempt',
              String(e.timing.attempt),
            ]
          : []),
      ];
    case 'error':
      return ['error', JSON.stringify({ code: e.code, message: e.message })];
  }
}

/** Parses XREAD/XRANGE field arrays; throws on an entry that matches no kind. */
export function decodeStreamEntry(fields: readonly string[]): StreamEntry {
  const f = new Map<string, string>();
  for (let i = 0; i + 1 < fields.length; i += 2) f.set(fields[i] as string, fields[i + 1] as string);
  if (f.has('i')) {
    const index = Number(f.get('i'));
    const id = Number(f.get('id'));
    if (!Number.isInteger(index) || !Number.isInteger(id)) throw new Error(`stream entry: bad token fields ${JSON.stringify(fields)}`);
    const lp = f.get('lp');
    if (lp === undefined) return { kind: 'token', index, id, text: f.get('t') ?? '' };
    const v: unknown = JSON.parse(lp);
    if (!Array.isArray(v)) throw new Error(`stream entry: bad lp ${lp.slice(0, 80)}`);
    return { kind: 'token', index, id, text: f.get('t') ?? '', logprob: fromJsonLogprob(v[0]), top: decodeAlternatives(v[1], 'token') };
  }
  if (f.has('plp')) return { kind: 'prompt', logprobs: decodePromptLogprobs(f.get('plp') as string) };
  if (f.get('done') === '1') {
    const fr = f.get('finish_reason');
    if (fr !== 'length' && fr !== 'stop' && fr !== 'cancelled') throw new Error(`stream entry: bad finish_reason ${String(fr)}`);
    const text = f.get('t');
    const timing: StreamTiming | undefined = f.has('queue_ms')
      ? { queueMs: Number(f.get('queue_ms')), prefillMs: Number(f.get('prefill_ms')), decodeMs: Number(f.get('decode_ms')), attempt: Number(f.get('attempt')) }
      : undefined;
    return {
      kind: 'final',
      finishReason: fr,
      usage: JSON.parse(f.get('usage') ?? 'null') as Usage,
      tokens: Number(f.get('n')),
      ...(text !== undefined ? { text } : {}),
      ...(timing !== undefined ? { timing } : {}),
    };
  }
  if (f.has('error')) {
    const e = JSON.parse(f.get('error') as string) as { code: string; message: string };
    return { kind: 'error', code: String(e.code), message: String(e.message) };
  }
  throw new Error(`stream entry: unknown fields ${JSON.stringify(fields)}`);
}
