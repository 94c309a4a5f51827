/**
 * @module stream
 * The per-request Redis Stream the decoder worker writes and the gateway relays as SSE.
 *
 * Entry fields (all strings, as Redis stores them):
 *   token:  i = token index (0, 1, …), id = token id, t = text completed by this token ('' allowed)
 *   final:  done = '1', finish_reason, usage = JSON Usage, n = number of token entries before it
 *   error:  error = JSON { code, message } (the request failed for good; the gateway maps the code)
 *
 * A retried decode job regenerates the same tokens (seeded sampling, deterministic numerics) and
 * appends only indexes not yet in the stream, so a reader never sees a duplicate or a gap.
 */

export interface Usage {
  readonly prompt_tokens: number;
  readonly completion_tokens: number;
  readonly total_tokens: number;
  readonly prompt_tokens_details: { readonly cached_tokens: number };
}

export type StreamEntry =
  | { readonly kind: 'token'; readonly index: number; readonly id: number; readonly text: string }
  | { readonly kind: 'final'; readonly finishReason: 'length' | 'stop' | 'cancelled'; readonly usage: Usage; readonly tokens: number }
  | { readonly kind: 'error'; readonly code: string; readonly message: string };

/** Field/value pairs for XADD. */
export function encodeStreamEntry(e: StreamEntry): string[] {
  switch (e.kind) {
    case 'token':
      return ['i', String(e.index), 'id', String(e.id), 't', e.text];
    case 'final':
      return ['done', '1', 'finish_reason', e.finishReason, 'usage', JSON.stringify(e.usage), 'n', String(e.tokens)];
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
    return { kind: 'token', index, id, text: f.get('t') ?? '' };
  }
  if (f.get('done') === '1') {
    const fr = f.get('finish_reason');
    if (fr !== 'length' && fr !== 'stop' && fr !== 'cancelled') throw new Error(`stream entry: bad finish_reason ${String(fr)}`);
    return { kind: 'final', finishReason: fr, usage: JSON.parse(f.get('usage') ?? 'null') as Usage, tokens: Number(f.get('n')) };
  }
  if (f.has('error')) {
    const e = JSON.parse(f.get('error') as string) as { code: string; message: string };
    return { kind: 'error', code: String(e.code), message: String(e.message) };
  }
  throw new Error(`stream entry: unknown fields ${JSON.stringify(fields)}`);
}
