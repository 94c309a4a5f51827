/**
 * @module openai/logprobs
 * Per-token log-probabilities in OpenAI's two response shapes (pure formatting; the numbers come from
 * the engine through the stream entries, choice-assembly.ts makes these records of them):
 *
 * - completions (`logprobs: N`): `{ tokens, token_logprobs, top_logprobs, text_offset }`, parallel
 *   arrays; `top_logprobs[i]` maps token text → logprob for the N most likely tokens plus the sampled
 *   one (as vLLM does: N or N + 1 entries); `text_offset[i]` is where token i's text starts in the
 *   choice's text (an echoed prompt's tokens first), in Unicode code points as OpenAI and vLLM
 *   count (a JavaScript string index differs past U+FFFF). A token without context (an echoed
 *   prompt's first, when nothing precedes it) has no logprob (`null` in token_logprobs and
 *   top_logprobs), as OpenAI answers;
 * - chat (`logprobs: true`, `top_logprobs: N`): `{ content: [{ token, logprob, bytes, top_logprobs:
 *   [{ token, logprob, bytes }] }], refusal: null }`.
 *
 * A token's string is its bytes decoded alone (U+FFFD where it ends inside a UTF-8 character; chat's
 * `bytes` keeps the exact bytes). Text offsets count the text the stream actually released for each
 * token (its `t`), which holds incomplete characters back, so offsets index the answer's text exactly.
 * Streamed chunks carry the same objects for their new tokens only (`completionLogprobs` with the
 * offset where the chunk's text starts).
 */

/** One candidate token: its id, its bytes, its log-probability (natural log, after temperature). */
export interface TokenCandidate {
  readonly id: number;
  readonly bytes: Uint8Array;
  readonly logprob: number;
}

/** A generated (or echoed) token with its alternatives. */
export interface TokenLogprobs extends TokenCandidate {
  /** The text the stream released with this token (`t` of its entry): '' while a character is incomplete. */
  readonly text: string;
  /** The most likely tokens at this step, most likely first (may include the sampled one). */
  readonly top: readonly TokenCandidate[];
  /** False for the first token of an echoed prompt: nothing precedes it, so it has no logprob. */
  readonly scored?: boolean;
}

export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: (number | null)[];
  top_logprobs: (Record<string, number> | null)[] | null;
  text_offset: number[];
}

export interface ChatTokenLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: { token: string; logprob: number; bytes: number[] }[];
}

export interface ChatLogprobs {
  content: ChatTokenLogprob[];
  refusal: null;
}

const decoder = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });

/** The string of a token on its own. */
export function tokenString(bytes: Uint8Array): string {
  return decoder.decode(bytes);
}

/** Code points of a string (text offsets count these). */
function codePoints(s: string): number {
  let n = 0;
  for (const _ of s) n++;
  return n;
}

/** OpenAI's -9999.0 stands for "impossible" (a -Infinity logprob is not JSON). */
function finite(logprob: number): number {
  return Number.isFinite(logprob) ? logprob : -9999;
}

/** The N most likely candidates, the sampled token added when it is not among them, most likely first. */
function topWithSampled(t: TokenLogprobs, topN: number): TokenCandidate[] {
  const top = [...t.top].sort((a, b) => b.logprob - a.logprob).slice(0, topN);
  if (!top.some((c) => c.id === t.id)) top.push({ id: t.id, bytes: t.bytes, logprob: t.logprob });
  return top;
}

/**
 * Completions shape for `tokens`, `topN` alternatives each (`logprobs: N`; 0 = the sampled token
 * only), text offsets starting at `textOffset` (the code points of the text before these tokens).
 */
export function completionLogprobs(tokens: readonly TokenLogprobs[], options: { readonly topN: number; readonly textOffset?: number }): CompletionLogprobs {
  let offset = options.textOffset ?? 0;
  const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for (const t of tokens) {
    out.tokens.push(tokenString(t.bytes));
    out.text_offset.push(offset);
    offset += codePoints(t.text);
    if (t.scored === false) {
      out.token_logprobs.push(null);
      out.top_logprobs?.push(null);
      continue;
    }
    out.token_logprobs.push(finite(t.logprob));
    const top: Record<string, number> = {};
    for (const c of topWithSampled(t, options.topN)) {
      const key = tokenString(c.bytes);
      top[key] = Math.max(top[key] ?? -Infinity, finite(c.logprob)); // two ids may decode alike
    }
    out.top_logprobs?.push(top);
  }
  return out;
}

/** Chat shape for `tokens`, `topN` alternatives each (`top_logprobs: N`, 0–20). */
export function chatLogprobs(tokens: readonly TokenLogprobs[], options: { readonly topN: number }): ChatLogprobs {
  return {
    content: tokens.map((t) => ({
      token: tokenString(t.bytes),
      logprob: finite(t.logprob),
      bytes: [...t.bytes],
      top_logprobs: [...t.top]
        .sort((a, b) => b.logprob - a.logprob)
        .slice(0, options.topN)
        .map((c) => ({ token: tokenString(c.bytes), logprob: finite(c.logprob), bytes: [...c.bytes] })),
    })),
    refusal: null,
  };
}
