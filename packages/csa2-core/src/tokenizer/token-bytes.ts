/**
 * @module tokenizer/token-bytes
 * The raw bytes one token stands for (`Tokenizer.tokenBytes`): what OpenAI's chat logprobs report as
 * `bytes`, and what a token's string is decoded from. A token may hold part of a UTF-8 character, so
 * its bytes are not always valid UTF-8 on their own; concatenated in order, the tokens' bytes are the
 * UTF-8 of the decoded text.
 *
 * Byte-level BPE vocabularies (GPT-2 / DeepSeek-V3 / most Hugging Face BPE tokenizers) write each byte
 * as one printable character (GPT-2's `bytes_to_unicode`: the printable Latin-1 bytes stand for
 * themselves, the other 68 are mapped to U+0100 onwards, in byte order); `byteLevelTokenBytes`
 * inverts that map. Added and special tokens are their content's UTF-8. SentencePiece-style
 * vocabularies write a space as `▁` and unknown bytes as byte-fallback tokens `<0xAB>`.
 */

/** GPT-2's bytes_to_unicode as character code → byte (the inverse of the map the vocabulary uses). */
const BYTE_OF_CHAR: ReadonlyMap<number, number> = (() => {
  const printable: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) printable.push(b);
  for (let b = 0xa1; b <= 0xac; b++) printable.push(b);
  for (let b = 0xae; b <= 0xff; b++) printable.push(b);
  const map = new Map<number, number>();
  for (const b of printable) map.set(b, b);
  let next = 256;
  for (let b = 0; b < 256; b++) {
    if (!map.has(b)) map.set(next++, b);
  }
  return map;
})();

/** The bytes a byte-level BPE vocabulary entry stands for; null when a character is outside the byte alphabet. */
export function byteLevelTokenBytes(token: string): Uint8Array | null {
  const out = new Uint8Array(token.length);
  let n = 0;
  for (const ch of token) {
    const b = BYTE_OF_CHAR.get(ch.codePointAt(0) as number);
    if (b === undefined) return null;
    out[n++] = b;
  }
  return out.subarray(0, n);
}

/** `<0xAB>` (a SentencePiece byte-fallback token) → its byte; null for any other token. */
export function byteFallbackByte(token: string): number | null {
  const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(token);
  return m === null ? null : parseInt(m[1] as string, 16);
}

const encoder = new TextEncoder();

/** UTF-8 of a string. */
export function utf8Bytes(text: string): Uint8Array {
  return encoder.encode(text);
}
