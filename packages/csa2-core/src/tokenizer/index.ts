/**
 * @module tokenizer
 * Tokenizers for csa2 checkpoints: byte-level (256 ids), Hugging Face tokenizer.json, and the bundled
 * DeepSeek-V3 tokenizer; `loadTokenizer` picks one for a checkpoint.
 */
export type { ChatMessage, ChatRole, TokenDecodeStream, Tokenizer } from './tokenizer.js';
export { createWindowedDecodeStream, Utf8DecodeStream, validateTokenIds } from './tokenizer.js';
export { BYTE_VOCAB_SIZE, ByteTokenizer, renderPlainChatTemplate } from './byte-tokenizer.js';
export {
  DEEPSEEK_V3_MODEL_VOCAB_SIZE,
  DEEPSEEK_V3_SPECIAL_TOKENS,
  DEEPSEEK_V3_TOKENIZER_VOCAB_SIZE,
  DeepSeekV3Tokenizer,
  loadDeepSeekV3Tokenizer,
  renderDeepSeekV3ChatTemplate,
} from './deepseek-tokenizer.js';
export type { HuggingFaceTokenizerFiles } from './hf-tokenizer.js';
export { HuggingFaceTokenizer, loadHuggingFaceTokenizer } from './hf-tokenizer.js';
export type { BoundedEncoding } from './bounded-encode.js';
export { DEEPSEEK_V3_MAX_BYTES_PER_TOKEN, encodeWithin, encodesInSegments, maxBytesPerToken, minTokens } from './bounded-encode.js';
export type { LoadTokenizerOptions } from './load-tokenizer.js';
export { loadTokenizer } from './load-tokenizer.js';
export { byteFallbackByte, byteLevelTokenBytes } from './token-bytes.js';
