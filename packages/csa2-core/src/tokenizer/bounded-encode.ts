/**
 * @module tokenizer/bounded-encode
 * Tokenization under a token limit, for input that may be refused for its length: the cost of
 * refusing must not be the cost of tokenizing it all (16 MiB of text is ~12 s of DeepSeek BPE here,
 * and its ids a 16M-element array with the byte tokenizer).
 *
 * 1. Before: every tokenizer whose tokens cover a bounded number of UTF-8 bytes gives a lower
 *    bound, ⌈bytes / maxBytesPerToken⌉ tokens; past the limit the text is refused untokenized. The
 *    byte and DeepSeek-V3 tokenizers have one; a model's tokenizer.json has one when it says so
 *    (`maxInputBytesPerToken`: byte-level BPE without a normalizer, as the served model's, whose
 *    longest entry is 14 bytes: a 16 MiB text is then refused at once, where it was tokenized whole
 *    for minutes and GBs).
 * 2. While: the byte tokenizer's count is the byte count (exact); the DeepSeek-V3 tokenizer, and a
 *    tokenizer.json that allows it (`cutsAfterNewlineBeforeLetter`), encode the text in segments cut
 *    where their pre-tokenizer always cuts (after a '\n' that a letter [A-Za-z] follows: no
 *    pre-tokenizer split, added token or vocabulary entry spans such a point), so the ids are those
 *    of the whole text, the memory a segment's, and they stop at the first segment past the limit.
 *    Other tokenizers are encoded whole, then counted.
 *
 * @example
 * const r = encodeWithin(tokenizer, text, 16_383);
 * if (!r.ok) refuse(`at least ${r.tokensAtLeast} tokens`);
 */
import type { Tokenizer } from './tokenizer.js';

/**
 * Most UTF-8 bytes one token of the DeepSeek-V3 vocabulary covers (its longest entry, 128 spaces;
 * added tokens are shorter). A test checks it against the bundled vocabulary.
 */
export const DEEPSEEK_V3_MAX_BYTES_PER_TOKEN = 128;

/** Characters per DeepSeek-V3 segment (a segment ends at the first safe cut after this many). */
export const DEFAULT_SEGMENT_CHARS = 64 * 1024;

export type BoundedEncoding = { readonly ok: true; readonly ids: number[] } | { readonly ok: false; readonly tokensAtLeast: number };

type BoundedTokenizer = Pick<Tokenizer, 'kind' | 'maxInputBytesPerToken' | 'cutsAfterNewlineBeforeLetter'>;

/** Most UTF-8 bytes one token covers, or null when the tokenizer gives no such bound. */
export function maxBytesPerToken(tokenizer: BoundedTokenizer): number | null {
  switch (tokenizer.kind) {
    case 'byte':
      return 1;
    case 'deepseek-v3':
      return DEEPSEEK_V3_MAX_BYTES_PER_TOKEN;
    case 'huggingface':
      // a normalizer or a pre-tokenizer that drops text leaves no lower bound on its tokens
      return tokenizer.maxInputBytesPerToken ?? null;
  }
}

/** Whether a text may be encoded a segment at a time (cut after '\n' before an ASCII letter). */
export function encodesInSegments(tokenizer: BoundedTokenizer): boolean {
  return tokenizer.kind === 'deepseek-v3' || (tokenizer.kind === 'huggingface' && tokenizer.cutsAfterNewlineBeforeLetter === true);
}

/** Fewest tokens `text` can have with this tokenizer (0 when unknown). */
export function minTokens(tokenizer: BoundedTokenizer, text: string): number {
  const per = maxBytesPerToken(tokenizer);
  return per === null ? 0 : Math.ceil(Buffer.byteLength(text, 'utf8') / per);
}

/** Start of the next segment at or after `from`: just past a '\n' followed by an ASCII letter; text.length if none. */
function nextCut(text: string, from: number): number {
  for (let i = Math.max(1, from); i < text.length; i++) {
    if (text.charCodeAt(i - 1) !== 10) continue;
    const c = text.charCodeAt(i);
    if ((c >= 65 && c <= 90) || (c >= 97 && c <= 122)) return i;
  }
  return text.length;
}

/**
 * `tokenizer.encode(text)` when it has at most `maxTokens` tokens; otherwise `{ ok: false }` with a
 * lower bound of its token count, found before tokenizing it all (see the module header).
 */
export function encodeWithin(tokenizer: Tokenizer, text: string, maxTokens: number, segmentChars = DEFAULT_SEGMENT_CHARS): BoundedEncoding {
  const atLeast = minTokens(tokenizer, text);
  if (atLeast > maxTokens) return { ok: false, tokensAtLeast: atLeast };
  if (!encodesInSegments(tokenizer) || text.length <= segmentChars) {
    const ids = tokenizer.encode(text);
    return ids.length > maxTokens ? { ok: false, tokensAtLeast: ids.length } : { ok: true, ids };
  }
  const ids: number[] = [];
  for (let start = 0; start < text.length; ) {
    const end = nextCut(text, start + segmentChars);
    const part = tokenizer.encode(text.slice(start, end));
    if (ids.length + part.length > maxTokens) return { ok: false, tokensAtLeast: ids.length + part.length };
    for (const id of part) ids.push(id);
    start = end;
  }
  return { ok: true, ids };
}
