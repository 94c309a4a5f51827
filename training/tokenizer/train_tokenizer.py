"""Train the byte-level BPE vocabulary of the csa2 mini models on the committed corpus.

    python3 training/tokenizer/train_tokenizer.py --corpus training/data/corpus --vocab 4096 --out DIR

Writes DIR/tokenizer.json and DIR/tokenizer_config.json (bos/eos names, read by csa2-core's
tokenizer/hf-tokenizer.ts). Byte-level, so every string encodes; digits are split one per token
(RULER-style numbers are copied digit by digit); ids 0..2 are <|bos|>, <|eos|>, <|pad|>.
Deterministic for a given corpus (the tokenizers BPE trainer is deterministic for fixed input).
"""

import argparse
import gzip
import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIALS = ["<|bos|>", "<|eos|>", "<|pad|>"]


def corpus_lines(corpus: Path):
    for name in ("austen", "mobydick", "brown"):
        with gzip.open(corpus / f"{name}.txt.gz", "rt", encoding="utf-8") as f:
            for line in f:
                yield line


def build(vocab_size: int, corpus: Path) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_lines(corpus), trainer=trainer)
    return tok


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    tok = build(a.vocab, a.corpus)
    tok.save(str(a.out / "tokenizer.json"))
    (a.out / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<|bos|>", "eos_token": "<|eos|>", "pad_token": "<|pad|>", "tokenizer_class": "PreTrainedTokenizerFast"}, indent=2) + "\n"
    )
    n = sum(len(e.ids) for e in tok.encode_batch(list(corpus_lines(a.corpus))))
    print(f"vocab {tok.get_vocab_size()}; corpus {n:,} tokens")


if __name__ == "__main__":
    main()
