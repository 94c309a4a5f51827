/**
 * @module tokenizer/hf-tokenizer
 * Tokenizers described by a Hugging Face `tokenizer.json` (BPE, WordPiece, Unigram, WordLevel models),
 * run by the pure-JS `@huggingface/tokenizers`. Read from a model directory:
 *
 * - `tokenizer.json` (required): vocabulary, merges, added/special tokens, normalizer, decoder.
 * - `tokenizer_config.json` (optional): `bos_token` / `eos_token` (a string or an `{content}` object)
 *   give `bosId` / `eosIds`; `chat_template` (a Jinja string, or a list of `{name, template}` of which
 *   `default` is used) is the chat template.
 * - `chat_template.jinja` (optional): a chat template that overrides the one in tokenizer_config.json.
 * - `generation_config.json` (optional): its `eos_token_id` (a number or a list) adds stop ids.
 *
 * The Jinja chat template is rendered (messages, `add_generation_prompt = true`, `bos_token`,
 * `eos_token`, ...) by the Jinja engine bundled in `@lenml/tokenizers`, then the text is encoded with
 * special-token splitting, as `transformers` does. Without a template the plain-text template of the byte
 * tokenizer is used, with `bosId` in front when there is one.
 *
 * Token bytes (`tokenBytes`) follow the decoder tokenizer.json names: a `ByteLevel` decoder (alone or
 * in a `Sequence`) → the vocabulary entry's byte-level bytes; `Metaspace` / `ByteFallback` (SentencePiece
 * style) → `<0xAB>` is that byte, `▁` a space, the rest UTF-8; any other decoder → the UTF-8 of the
 * token decoded alone. Added tokens are their content's UTF-8.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import { TokenizerLoader } from '@lenml/tokenizers';
import type { ChatMessage, TokenDecodeStream, Tokenizer } from './tokenizer.js';
import { createWindowedDecodeStream, validateTokenIds } from './tokenizer.js';
import { renderPlainChatTemplate } from './byte-tokenizer.js';
import { byteFallbackByte, byteLevelTokenBytes, utf8Bytes } from './token-bytes.js';
import { CheckpointError, InputError } from '../errors.js';

export interface HuggingFaceTokenizerFiles {
  /** Parsed tokenizer.json. */
  tokenizerJson: unknown;
  /** Parsed tokenizer_config.json, when present. */
  tokenizerConfig?: unknown;
  /** Parsed generation_config.json, when present. */
  generationConfig?: unknown;
  /** The Jinja chat template (overrides tokenizer_config.json's `chat_template`). */
  chatTemplate?: string;
  /** Where the files came from, for error messages. */
  source?: string;
}

const TOKEN_FIELDS = ['bos_token', 'eos_token', 'unk_token', 'pad_token', 'sep_token', 'cls_token', 'mask_token'] as const;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** tokenizer_config.json token fields may be `"<s>"` or `{"content": "<s>", ...}`; reduce them to strings. */
function normalizeConfig(raw: unknown, source: string): Record<string, unknown> {
  if (raw === undefined) return {};
  if (!isRecord(raw)) throw new CheckpointError(`${source}: tokenizer_config.json must be a JSON object`);
  const out: Record<string, unknown> = { ...raw };
  for (const field of TOKEN_FIELDS) {
    const v = raw[field];
    if (isRecord(v)) {
      if (typeof v['content'] !== 'string') throw new CheckpointError(`${source}: tokenizer_config.json ${field} has no string "content"`);
      out[field] = v['content'];
    } else if (v !== undefined && v !== null && typeof v !== 'string') {
      throw new CheckpointError(`${source}: tokenizer_config.json ${field} must be a string or an object with "content"`);
    }
  }
  return out;
}

/** How a vocabulary entry maps to bytes, from the tokenizer.json decoder (see the module header). */
type TokenBytesScheme = 'byte-level' | 'sentencepiece' | 'decoded';

function decoderTypes(decoder: unknown): string[] {
  if (!isRecord(decoder)) return [];
  const type = typeof decoder['type'] === 'string' ? [decoder['type']] : [];
  const inner = Array.isArray(decoder['decoders']) ? decoder['decoders'].flatMap(decoderTypes) : [];
  return [...type, ...inner];
}

function tokenBytesScheme(tokenizerJson: Record<string, unknown>): TokenBytesScheme {
  const types = decoderTypes(tokenizerJson['decoder']);
  if (types.includes('ByteLevel')) return 'byte-level';
  if (types.includes('Metaspace') || types.includes('ByteFallback')) return 'sentencepiece';
  return 'decoded';
}

/** Pre-tokenizer types of tokenizer.json (a Sequence's members, flattened). */
function preTokenizerSteps(pre: unknown): Record<string, unknown>[] {
  if (!isRecord(pre)) return [];
  if (pre['type'] === 'Sequence') return Array.isArray(pre['pretokenizers']) ? pre['pretokenizers'].flatMap(preTokenizerSteps) : [{ type: 'unknown' }];
  return [pre];
}

/**
 * What bounded encoding may rely on for this tokenizer.json (bounded-encode):
 *
 * - `bounded`: every input byte is covered by a token and no token covers more input bytes than its
 *   vocabulary entry's bytes: no normalizer (one could shrink the text), byte-level token bytes (each
 *   entry's bytes known exactly), and only pre-tokenizers that split without dropping anything
 *   (ByteLevel, Digits, Punctuation, and Split that does not remove its matches).
 * - `segmentable`: additionally a cut just past '\n' before an ASCII letter is a split point of every
 *   pre-tokenizer step: ByteLevel with its GPT-2 regex and no prefix space (a letter preceded by a
 *   newline starts a word, and the newline's whitespace run ends there) and Digits; no added token
 *   holds a newline (added tokens are matched before pre-tokenization).
 */
function boundedEncodingTraits(tokenizerJson: Record<string, unknown>, byteLevelBytes: boolean): { bounded: boolean; segmentable: boolean } {
  const normalizer = tokenizerJson['normalizer'];
  const steps = preTokenizerSteps(tokenizerJson['pre_tokenizer']);
  const keeps = (p: Record<string, unknown>) =>
    p['type'] === 'ByteLevel' || p['type'] === 'Digits' || p['type'] === 'Punctuation' || (p['type'] === 'Split' && p['behavior'] !== 'Removed');
  const bounded = (normalizer === null || normalizer === undefined) && byteLevelBytes && steps.length > 0 && steps.every(keeps);
  const addedTokens = Array.isArray(tokenizerJson['added_tokens']) ? tokenizerJson['added_tokens'] : [];
  const segmentable =
    bounded &&
    steps.every((p) => (p['type'] === 'ByteLevel' && p['use_regex'] !== false && p['add_prefix_space'] !== true) || p['type'] === 'Digits') &&
    addedTokens.every((t) => isRecord(t) && typeof t['content'] === 'string' && !t['content'].includes('\n'));
  return { bounded, segmentable };
}

interface ChatRenderer {
  apply_chat_template(messages: ChatMessage[], opts: { tokenize: false; add_generation_prompt: true }): unknown;
}

export class HuggingFaceTokenizer implements Tokenizer {
  readonly kind = 'huggingface' as const;
  readonly vocabSize: number;
  readonly bosId: number | null;
  readonly eosIds: readonly number[];
  /** The Jinja chat template in use, or null when the plain-text fallback is used. */
  readonly chatTemplate: string | null;
  readonly #tok: HfTokenizer;
  readonly #renderer: ChatRenderer | null;
  readonly #unkId: number | null;
  readonly #bytesScheme: TokenBytesScheme;
  /** Added tokens by id: their content. */
  readonly #added: ReadonlyMap<number, string>;
  /** See Tokenizer: the most input bytes a token covers (null: unbounded), and whether segments may be cut at '\n' + letter. */
  readonly maxInputBytesPerToken: number | null;
  readonly cutsAfterNewlineBeforeLetter: boolean;

  constructor(files: HuggingFaceTokenizerFiles) {
    const source = files.source ?? 'tokenizer';
    if (!isRecord(files.tokenizerJson) || !isRecord(files.tokenizerJson['model'])) {
      throw new CheckpointError(`${source}: tokenizer.json must be a JSON object with a "model" section`);
    }
    const config = normalizeConfig(files.tokenizerConfig, source);
    try {
      this.#tok = new HfTokenizer(files.tokenizerJson, config);
    } catch (cause) {
      throw new CheckpointError(`${source}: tokenizer.json could not be loaded: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    }

    let maxId = -1;
    for (const id of this.#tok.get_vocab(true).values()) if (id > maxId) maxId = id;
    if (maxId < 0) throw new CheckpointError(`${source}: tokenizer.json has an empty vocabulary`);
    this.vocabSize = maxId + 1;

    const idOf = (field: string): number | null => {
      const token = config[field];
      if (typeof token !== 'string') return null;
      const id = this.#tok.token_to_id(token);
      if (id === undefined) throw new CheckpointError(`${source}: tokenizer_config.json ${field} ${JSON.stringify(token)} is not in the vocabulary`);
      return id;
    };
    this.bosId = idOf('bos_token');
    const model = files.tokenizerJson['model'];
    const unkToken = typeof model['unk_token'] === 'string' ? model['unk_token'] : config['unk_token'];
    this.#unkId = typeof unkToken === 'string' ? (this.#tok.token_to_id(unkToken) ?? null) : null;
    const eos = new Set<number>();
    const eosId = idOf('eos_token');
    if (eosId !== null) eos.add(eosId);
    const genEos = isRecord(files.generationConfig) ? files.generationConfig['eos_token_id'] : undefined;
    for (const id of Array.isArray(genEos) ? genEos : genEos === undefined || genEos === null ? [] : [genEos]) {
      if (!Number.isInteger(id) || (id as number) < 0 || (id as number) >= this.vocabSize) {
        throw new CheckpointError(`${source}: generation_config.json eos_token_id ${JSON.stringify(id)} is not a token id of this tokenizer`);
      }
      eos.add(id as number);
    }
    this.eosIds = [...eos];
    this.#bytesScheme = tokenBytesScheme(files.tokenizerJson);
    const addedTokens = Array.isArray(files.tokenizerJson['added_tokens']) ? files.tokenizerJson['added_tokens'] : [];
    this.#added = new Map(
      addedTokens
        .filter((t): t is { id: number; content: string } => isRecord(t) && typeof t['id'] === 'number' && typeof t['content'] === 'string')
        .map((t) => [t.id, t.content]),
    );
    const traits = boundedEncodingTraits(files.tokenizerJson, this.#bytesScheme === 'byte-level');
    let most = 0;
    if (traits.bounded) {
      for (let id = 0; id < this.vocabSize; id++) most = Math.max(most, this.tokenBytes(id).length);
    }
    this.maxInputBytesPerToken = traits.bounded && most > 0 ? most : null;
    this.cutsAfterNewlineBeforeLetter = this.maxInputBytesPerToken !== null && traits.segmentable;

    let template: unknown = files.chatTemplate ?? config['chat_template'];
    if (Array.isArray(template)) {
      const named = template.find((t: unknown) => isRecord(t) && t['name'] === 'default');
      template = isRecord(named) ? named['template'] : undefined;
    }
    if (typeof template === 'string' && template.length > 0) {
      this.chatTemplate = template;
      try {
        // Only the Jinja engine and the special-token names of this object are used; its vocabulary is empty.
        this.#renderer = TokenizerLoader.fromPreTrained({
          tokenizerJSON: {
            version: '1.0',
            added_tokens: [],
            normalizer: null,
            pre_tokenizer: null,
            post_processor: null,
            decoder: null,
            model: { type: 'WordLevel', vocab: {}, unk_token: '[UNK]' },
          },
          tokenizerConfig: { ...config, tokenizer_class: 'PreTrainedTokenizer', chat_template: template },
        } as unknown as Parameters<typeof TokenizerLoader.fromPreTrained>[0]) as unknown as ChatRenderer;
      } catch (cause) {
        throw new CheckpointError(`${source}: chat template could not be set up: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
      }
    } else {
      this.chatTemplate = null;
      this.#renderer = null;
    }
  }

  encode(text: string): number[] {
    if (text === '') return [];
    const { ids, tokens } = this.#tok.encode(text, { add_special_tokens: false });
    // @huggingface/tokenizers leaves out-of-vocabulary pieces of WordLevel models as `undefined` ids.
    for (let i = 0; i < ids.length; i++) {
      if (ids[i] === undefined) {
        if (this.#unkId === null) {
          throw new InputError(`text piece ${JSON.stringify(tokens[i])} is not in the tokenizer vocabulary and the tokenizer has no unknown-token`);
        }
        ids[i] = this.#unkId;
      }
    }
    return ids;
  }

  decode(ids: readonly number[]): string {
    validateTokenIds(ids, this.vocabSize);
    if (ids.length === 0) return '';
    return this.#tok.decode([...ids], { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  }

  tokenBytes(id: number): Uint8Array {
    validateTokenIds([id], this.vocabSize);
    const added = this.#added.get(id);
    if (added !== undefined) return utf8Bytes(added);
    const entry = this.#tok.id_to_token(id);
    if (entry !== undefined && this.#bytesScheme === 'byte-level') {
      const bytes = byteLevelTokenBytes(entry);
      if (bytes !== null) return bytes;
    }
    if (entry !== undefined && this.#bytesScheme === 'sentencepiece') {
      const byte = byteFallbackByte(entry);
      return byte !== null ? Uint8Array.of(byte) : utf8Bytes(entry.replaceAll('\u2581', ' '));
    }
    return utf8Bytes(this.decode([id]));
  }

  createDecodeStream(): TokenDecodeStream {
    return createWindowedDecodeStream((ids) => this.decode(ids));
  }

  /** Renders the chat template to text (special tokens as text) without encoding it. */
  renderChatTemplate(messages: readonly ChatMessage[]): string {
    if (this.#renderer === null) return renderPlainChatTemplate(messages);
    let text: unknown;
    try {
      text = this.#renderer.apply_chat_template(
        messages.map((m) => ({ role: m.role, content: m.content })),
        { tokenize: false, add_generation_prompt: true },
      );
    } catch (cause) {
      throw new InputError(`chat template rejected the conversation: ${cause instanceof Error ? cause.message : String(cause)}`);
    }
    if (typeof text !== 'string') throw new InputError('chat template did not render to text');
    return text;
  }

  applyChatTemplate(messages: readonly ChatMessage[]): number[] {
    const ids = this.encode(this.renderChatTemplate(messages));
    return this.#renderer === null && this.bosId !== null ? [this.bosId, ...ids] : ids;
  }
}

async function readJson(path: string, required: boolean): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (cause) {
    if (!required && (cause as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new CheckpointError(`${path}: cannot be read: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
  try {
    return JSON.parse(text) as unknown;
  } catch (cause) {
    throw new CheckpointError(`${path}: invalid JSON: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
}

async function readOptionalText(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, 'utf8');
  } catch (cause) {
    if ((cause as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new CheckpointError(`${path}: cannot be read: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
}

/** Loads tokenizer.json (+ the optional companions listed in the module doc) from a model directory. */
export async function loadHuggingFaceTokenizer(modelDir: string): Promise<HuggingFaceTokenizer> {
  const [tokenizerJson, tokenizerConfig, generationConfig, chatTemplate] = await Promise.all([
    readJson(join(modelDir, 'tokenizer.json'), true),
    readJson(join(modelDir, 'tokenizer_config.json'), false),
    readJson(join(modelDir, 'generation_config.json'), false),
    readOptionalText(join(modelDir, 'chat_template.jinja')),
  ]);
  const files: HuggingFaceTokenizerFiles = { tokenizerJson, source: join(modelDir, 'tokenizer.json') };
  if (tokenizerConfig !== undefined) files.tokenizerConfig = tokenizerConfig;
  if (generationConfig !== undefined) files.generationConfig = generationConfig;
  if (chatTemplate !== undefined) files.chatTemplate = chatTemplate;
  return new HuggingFaceTokenizer(files);
}
