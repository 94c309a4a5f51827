"""Check that csa2-core's JS tokenizer and the Python tokenizers library agree on sample text.

    python3 training/tokenizer/check_tokenizer.py MODEL_DIR [--node-root DIR_WITH_NODE_MODULES]

Samples: corpus passages (start, middle, end of each book), the synthetic task templates (digits,
keys, UUID-like strings), unicode, whitespace runs. Prints a verdict; exit status 1 on any mismatch.
"""

import argparse
import gzip
import json
import subprocess
import sys
from pathlib import Path

from tokenizers import Tokenizer

HERE = Path(__file__).resolve().parent


def samples(corpus: Path) -> list[str]:
    out = []
    for name in ("austen", "mobydick", "brown"):
        text = gzip.open(corpus / f"{name}.txt.gz", "rt", encoding="utf-8").read()
        for frac in (0.0, 0.25, 0.5, 0.75, 0.999):
            i = int(len(text) * frac)
            out.append(text[i : i + 3000])
    out += [
        "The pass key is 68231. Remember it. 68231 is the pass key.\nWhat is the pass key? The pass key is",
        "One of the special magic numbers for clever-tapir is: 4817263.",
        "VAR QXLPA = 52917\nVAR HZKTE = VAR QXLPA ",
        "uuid 3f2b9c1e-8a7d-4e21-b0c3-9d8e7f6a5b4c",
        "Ünïcödé — “quotes” ‘single’ naïve café 東京 😀",
        "  leading spaces, trailing   \n\n\nnewlines\t\ttabs  ",
        "<|bos|>special<|eos|> tokens in text",
        "",
    ]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("--corpus", type=Path, default=HERE.parent / "data" / "corpus")
    ap.add_argument("--node-root", type=Path, default=HERE.parent.parent, help="a folder whose node_modules has @huggingface/tokenizers")
    a = ap.parse_args()
    texts = samples(a.corpus)
    tok = Tokenizer.from_file(str(a.model_dir / "tokenizer.json"))
    py = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    r = subprocess.run(
        ["node", str(HERE / "check_tokenizer.mjs"), str(a.model_dir.resolve())],
        input=json.dumps(texts), capture_output=True, text=True, cwd=a.node_root, check=True,
    )
    js = [json.loads(line) for line in r.stdout.splitlines()]
    bad = 0
    for i, (t, p, j) in enumerate(zip(texts, py, js)):
        same = p == j["ids"]
        pyback = tok.decode(p, skip_special_tokens=False) == t
        if not (same and j["roundtrip"] and pyback):
            bad += 1
            print(f"sample {i}: ids equal {same}, JS round trip {j['roundtrip']}, Python round trip {pyback}: {t[:60]!r}")
    n_tokens = sum(len(p) for p in py)
    verdict = "PASS" if bad == 0 and len(js) == len(texts) else "FAIL"
    print(f"{verdict}: {len(texts) - bad}/{len(texts)} samples ({n_tokens:,} tokens) identical in JS and Python, decode round-trips")
    sys.exit(0 if verdict == "PASS" else 1)


if __name__ == "__main__":
    main()
