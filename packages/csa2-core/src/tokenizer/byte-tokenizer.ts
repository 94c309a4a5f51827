/**
 * @module tokenizer/byte-tokenizer
 * Byte-level tokenizer for checkpoints with a 256-entry vocabulary: token id = byte value of the UTF-8
 * encoding of the text; decoding is UTF-8 decoding of the bytes (invalid sequences become U+FFFD).
 * There are no special tokens: `bosId` is null and `eosIds` is empty.
 *
 * Chat template (plain text, then encoded to bytes): one line per message, `System: `, `User: ` or
 * `Assistant: ` followed by the content and a newline, then the generation prompt `Assistant:`:
 *
 *     System: You are terse.\nUser: Hi\nAssistant: Hello.\nUser: Bye\nAssistant:
 */
import type { ChatMessage, TokenDecodeStream, Tokenizer } from './tokenizer.js';
import { Utf8DecodeStream, validateTokenIds } from './tokenizer.js';

export const BYTE_VOCAB_SIZE = 256;

const ROLE_LABEL: Record<ChatMessage['role'], string> = { system: 'System', user: 'User', assistant: 'Assistant' };

/** The documented plain-text chat template used by the byte tokenizer (and as a fallback elsewhere). */
export function renderPlainChatTemplate(messages: readonly ChatMessage[]): string {
  let out = '';
  for (const m of messages) out += `${ROLE_LABEL[m.role]}: ${m.content}\n`;
  return `${out}Assistant:`;
}

export class ByteTokenizer implements Tokenizer {
  readonly kind = 'byte' as const;
  readonly vocabSize = BYTE_VOCAB_SIZE;
  readonly bosId = null;
  readonly eosIds: readonly number[] = [];

  encode(text: string): number[] {
    return Array.from(new TextEncoder().encode(text));
  }

  decode(ids: readonly number[]): string {
    validateTokenIds(ids, BYTE_VOCAB_SIZE);
    return new TextDecoder('utf-8', { fatal: false, ignoreBOM: true }).decode(Uint8Array.from(ids));
  }

  tokenBytes(id: number): Uint8Array {
    validateTokenIds([id], BYTE_VOCAB_SIZE);
    return Uint8Array.of(id);
  }

  createDecodeStream(): TokenDecodeStream {
    const utf8 = new Utf8DecodeStream();
    const one = new Uint8Array(1);
    return {
      push(id: number): string {
        validateTokenIds([id], BYTE_VOCAB_SIZE);
        one[0] = id;
        return utf8.push(one);
      },
      flush: () => utf8.flush(),
    };
  }

  applyChatTemplate(messages: readonly ChatMessage[]): number[] {
    return this.encode(renderPlainChatTemplate(messages));
  }
}
