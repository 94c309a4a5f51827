// Encodes sample texts with the JS tokenizer csa2-core uses (@huggingface/tokenizers, as in
// packages/csa2-core/src/tokenizer/hf-tokenizer.ts) and prints one JSON line per text, so that
// check_tokenizer.py can compare them with the Python (Rust) tokenizers library.
//   node training/tokenizer/check_tokenizer.mjs MODEL_DIR < texts.json
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRequire } from 'node:module';

const dir = process.argv[2];
const require = createRequire(join(process.cwd(), 'package.json'));
const mod = await import(require.resolve('@huggingface/tokenizers'));
const Tokenizer = mod.Tokenizer ?? mod.default.Tokenizer;
const tok = new Tokenizer(JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')), JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8')));
const texts = JSON.parse(readFileSync(0, 'utf8'));
for (const text of texts) {
  // as hf-tokenizer.ts: the empty text is [] without calling the library (its decode refuses [])
  const ids = text === '' ? [] : tok.encode(text, { add_special_tokens: false }).ids;
  const back = ids.length === 0 ? '' : tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  process.stdout.write(`${JSON.stringify({ ids, roundtrip: back === text })}\n`);
}
