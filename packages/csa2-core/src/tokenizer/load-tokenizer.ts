/**
 * @module tokenizer/load-tokenizer
 * Picks the tokenizer for a checkpoint:
 * 1. `modelDir` contains `tokenizer.json` → the Hugging Face tokenizer from it; its largest id must fit
 *    the model's `vocabSize`.
 * 2. else `vocabSize === 256` → the byte-level tokenizer.
 * 3. else `vocabSize >= 128815` (the DeepSeek-V3 vocabulary fits) → the bundled DeepSeek-V3 tokenizer.
 * 4. else `CheckpointError`: no tokenizer for that vocabulary size; put a tokenizer.json in the model dir.
 */
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Tokenizer } from './tokenizer.js';
import { ByteTokenizer, BYTE_VOCAB_SIZE } from './byte-tokenizer.js';
import { DEEPSEEK_V3_TOKENIZER_VOCAB_SIZE, loadDeepSeekV3Tokenizer } from './deepseek-tokenizer.js';
import { loadHuggingFaceTokenizer } from './hf-tokenizer.js';
import { CheckpointError } from '../errors.js';

export { validateTokenIds } from './tokenizer.js';

export interface LoadTokenizerOptions {
  /** The checkpoint directory; a tokenizer.json there takes precedence over the built-in tokenizers. */
  modelDir?: string;
  /** The model's vocabulary size (rows of the embedding / lm-head). */
  vocabSize: number;
}

async function isFile(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile();
  } catch (cause) {
    if ((cause as NodeJS.ErrnoException).code === 'ENOENT' || (cause as NodeJS.ErrnoException).code === 'ENOTDIR') return false;
    throw new CheckpointError(`${path}: cannot be read: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
}

export async function loadTokenizer(opts: LoadTokenizerOptions): Promise<Tokenizer> {
  const { modelDir, vocabSize } = opts;
  if (!Number.isInteger(vocabSize) || vocabSize <= 0) {
    throw new CheckpointError(`tokenizer: vocabSize must be a positive integer, got ${String(vocabSize)}`);
  }
  if (modelDir !== undefined) {
    const path = join(modelDir, 'tokenizer.json');
    if (await isFile(path)) {
      const tok = await loadHuggingFaceTokenizer(modelDir);
      if (tok.vocabSize > vocabSize) {
        throw new CheckpointError(
          `${path}: tokenizer vocabulary has ${tok.vocabSize} ids (0..${tok.vocabSize - 1}) but the model vocabulary size is ${vocabSize}`,
        );
      }
      return tok;
    }
  }
  if (vocabSize === BYTE_VOCAB_SIZE) return new ByteTokenizer();
  if (vocabSize >= DEEPSEEK_V3_TOKENIZER_VOCAB_SIZE) return loadDeepSeekV3Tokenizer();
  throw new CheckpointError(
    `no tokenizer is available for vocabulary size ${vocabSize}: the built-in tokenizers cover 256 (byte-level) and ` +
      `>= ${DEEPSEEK_V3_TOKENIZER_VOCAB_SIZE} (DeepSeek-V3); put the checkpoint's Hugging Face tokenizer.json ` +
      `(and optionally tokenizer_config.json) in the model directory${modelDir === undefined ? ' and pass modelDir' : ` (${modelDir})`}`,
  );
}
