/**
 * @module tokenizer/test-fixtures
 * Tiny tokenizer.json documents shared by the tokenizer tests (not part of the public API).
 */

/** GPT-2 byte → printable-character map used by byte-level BPE vocabularies. */
function bytesToUnicode(): string[] {
  const direct: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) direct.push(b);
  for (let b = 0xa1; b <= 0xac; b++) direct.push(b);
  for (let b = 0xae; b <= 0xff; b++) direct.push(b);
  const out: string[] = new Array<string>(256);
  let n = 0;
  for (let b = 0; b < 256; b++) out[b] = String.fromCodePoint(direct.includes(b) ? b : 256 + n++);
  return out;
}

/**
 * A tiny byte-level BPE: ids 0..255 are the bytes, 256 "he", 257 "ll", 258 "hell", 259 "Ġw" (" w"),
 * then the added tokens <s> = 260, </s> = 261, <|user|> = 262, <|assistant|> = 263.
 */
export function tinyBpeTokenizerJson(): unknown {
  const b2u = bytesToUnicode();
  const vocab: Record<string, number> = {};
  b2u.forEach((ch, b) => (vocab[ch] = b));
  vocab['he'] = 256;
  vocab['ll'] = 257;
  vocab['hell'] = 258;
  vocab[`${b2u[0x20]}w`] = 259;
  const special = (id: number, content: string): unknown => ({
    id,
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: true,
  });
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [special(260, '<s>'), special(261, '</s>'), special(262, '<|user|>'), special(263, '<|assistant|>')],
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: null,
    decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      vocab,
      merges: ['h e', 'l l', 'he ll', `${b2u[0x20]} w`],
    },
  };
}

export const TINY_CHAT_TEMPLATE =
  "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}<|user|>{{ m['content'] }}{% elif m['role'] == 'assistant' %}<|assistant|>{{ m['content'] }}{{ eos_token }}{% else %}{{ m['content'] }}\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}";

/** A SentencePiece-style Unigram vocabulary with the Metaspace decoder (which strips the first token's space). */
export function tinyMetaspaceTokenizerJson(): unknown {
  return {
    version: '1.0',
    added_tokens: [{ id: 9, content: '</s>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }],
    normalizer: null,
    pre_tokenizer: { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true },
    post_processor: null,
    decoder: { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true },
    model: {
      type: 'Unigram',
      unk_id: 0,
      vocab: [
        ['<unk>', 0],
        ['\u2581hello', -1],
        ['\u2581world', -1],
        ['\u2581!', -1],
        ['\u2581', -3],
        ['h', -5],
        ['e', -5],
        ['l', -5],
        ['o', -5],
        ['</s>', 0],
      ],
    },
  };
}

/** A WordLevel vocabulary split on whitespace, with an unknown-word token. */
export function tinyWordLevelTokenizerJson(withUnk: boolean): unknown {
  const vocab: Record<string, number> = { hello: 1, world: 2 };
  if (withUnk) vocab['[UNK]'] = 0;
  return {
    version: '1.0',
    added_tokens: [],
    normalizer: null,
    pre_tokenizer: { type: 'WhitespaceSplit' },
    post_processor: null,
    decoder: null,
    model: withUnk ? { type: 'WordLevel', vocab, unk_token: '[UNK]' } : { type: 'WordLevel', vocab },
  };
}
