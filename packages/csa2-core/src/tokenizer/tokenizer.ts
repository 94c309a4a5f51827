/**
 * @module tokenizer/tokenizer
 * The tokenizer contract shared by the byte-level, Hugging Face and DeepSeek-V3 tokenizers, plus the
 * two streaming detokenizers they build on.
 *
 * Conventions common to every implementation:
 * - `encode(text)` returns the ids of `text` alone: it never adds BOS/EOS. Callers that want a BOS in
 *   front of a raw (non-chat) prompt prepend `bosId` themselves; `applyChatTemplate` adds it.
 * - `decode(ids)` renders special tokens as their text (nothing is skipped) and throws `InputError`
 *   for an id outside `[0, vocabSize)`.
 * - `vocabSize` is the number of ids the tokenizer itself knows (max id + 1), which may be smaller than
 *   the model's embedding rows (DeepSeek-V3: 128815 tokenizer ids inside a 129280-row vocabulary).
 * - `tokenBytes(id)` is the raw bytes of one token (./token-bytes.ts): possibly part of a UTF-8
 *   character; a text's tokens' bytes concatenate to the text's UTF-8.
 */
import { InputError } from '../errors.js';

export type ChatRole = 'system' | 'user' | 'assistant';

export interface ChatMessage {
  role: ChatRole;
  content: string;
}

/**
 * Streaming detokenization. `push` returns the text that became complete with this token (possibly
 * ''); a multi-byte UTF-8 character split across tokens is returned once all its bytes have arrived.
 * `flush` returns whatever is still held back (incomplete or invalid bytes become U+FFFD) and resets
 * the stream so it can be reused.
 */
export interface TokenDecodeStream {
  push(id: number): string;
  flush(): string;
}

export interface Tokenizer {
  readonly kind: 'byte' | 'huggingface' | 'deepseek-v3';
  readonly vocabSize: number;
  encode(text: string): number[];
  decode(ids: readonly number[]): string;
  /** The bytes token `id` stands for (special tokens: their text's UTF-8); throws `InputError` outside `[0, vocabSize)`. */
  tokenBytes(id: number): Uint8Array;
  createDecodeStream(): TokenDecodeStream;
  readonly bosId: number | null;
  readonly eosIds: readonly number[];
  /** Renders the conversation and a trailing generation prompt for the assistant, as token ids. */
  applyChatTemplate(messages: readonly ChatMessage[]): number[];
  /**
   * Most UTF-8 bytes of the input one token covers, when the tokenizer bounds it (bounded-encode);
   * absent or null: no such bound (then a text's bytes say nothing about its token count).
   */
  readonly maxInputBytesPerToken?: number | null;
  /**
   * True when encoding a text in pieces cut just past a '\n' that an ASCII letter follows gives exactly
   * the ids of the whole text (no pre-tokenizer split, added token or vocabulary entry spans such a
   * point), so a long text can be encoded a segment at a time (bounded-encode).
   */
  readonly cutsAfterNewlineBeforeLetter?: boolean;
}

/** Throws `InputError` naming the first id (and its index) that is not an integer in `[0, vocabSize)`. */
export function validateTokenIds(ids: readonly number[], vocabSize: number): void {
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i] as number;
    if (!Number.isInteger(id) || id < 0 || id >= vocabSize) {
      throw new InputError(`token id ${String(id)} at index ${i} is out of range: ids must be integers in [0, ${vocabSize})`);
    }
  }
}

/** Bytes → text incrementally with the WHATWG decoder in streaming mode (holds back incomplete sequences). */
export class Utf8DecodeStream {
  #decoder = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });

  push(bytes: Uint8Array): string {
    return this.#decoder.decode(bytes, { stream: true });
  }

  flush(): string {
    return this.#decoder.decode();
  }
}

/**
 * Streaming detokenizer for tokenizers whose decoder is not a plain byte concatenation (Metaspace
 * leading-space stripping, WordPiece `##` joins, byte-fallback tokens): the technique of Hugging Face
 * text-generation-inference. It decodes a small window that starts at the tokens emitted last (so
 * context-dependent rules such as "strip the space of the first token" apply to that context, not to the
 * new token), and emits the new suffix only when it does not end in U+FFFD (an incomplete UTF-8
 * sequence, which the next token may complete).
 */
export function createWindowedDecodeStream(decode: (ids: readonly number[]) => string): TokenDecodeStream {
  let ids: number[] = [];
  let prefixOffset = 0;
  let readOffset = 0;
  const window = (from: number, to: number): string => (to > from ? decode(ids.slice(from, to)) : '');
  return {
    push(id: number): string {
      ids.push(id);
      const prefixText = window(prefixOffset, readOffset);
      const newText = window(prefixOffset, ids.length);
      if (newText.length > prefixText.length && !newText.endsWith('\uFFFD')) {
        const out = newText.slice(prefixText.length);
        prefixOffset = readOffset;
        readOffset = ids.length;
        // Drop tokens that can never be part of a window again so the buffer stays small.
        if (prefixOffset > 0) {
          ids = ids.slice(prefixOffset);
          readOffset -= prefixOffset;
          prefixOffset = 0;
        }
        return out;
      }
      return '';
    },
    flush(): string {
      const prefixText = window(prefixOffset, readOffset);
      const newText = window(prefixOffset, ids.length);
      ids = [];
      prefixOffset = 0;
      readOffset = 0;
      return newText.slice(prefixText.length);
    },
  };
}
