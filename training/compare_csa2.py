"""Compare csa2-core's logits on a checkpoint with this PyTorch model's (reference numerics).

    npx csa2 generate --model models/v41-mini-128k --prompt-ids IDS --max-tokens N --exact --dump dump.safetensors
    python3 training/compare_csa2.py --model models/v41-mini-128k --prompt-ids IDS --dump dump.safetensors

Runs the same prompt (a prefill) and then feeds the tokens csa2 generated one decode step at a time
(csa2_train.decode.Decoder, exact_numerics), and prints per row the max |difference| of the logits,
whether the argmax agrees, and the largest difference overall. `--text` tokenizes a text instead (with
<|bos|> in front, as csa2-serve does) and prints the ids to pass to csa2.
"""

import argparse
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from csa2_train.config import ModelArgs  # noqa: E402
from csa2_train.decode import Decoder  # noqa: E402
from csa2_train.model import Transformer, exact_numerics  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--prompt-ids", default=None)
    ap.add_argument("--text", default=None)
    ap.add_argument("--dump", type=Path, default=None)
    a = ap.parse_args()
    if a.text is not None:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(a.model / "tokenizer.json"))
        ids = [tok.token_to_id("<|bos|>")] + tok.encode(a.text).ids
        print(",".join(map(str, ids)))
        return
    ids = torch.tensor([int(x) for x in a.prompt_ids.split(",")])
    dump = load_file(str(a.dump))
    theirs, gen = dump["logits"].float(), dump["tokens"].long()
    model = Transformer(ModelArgs.load(a.model / "config.json"))
    model.load_official(load_file(str(a.model / "model.safetensors")))
    rows = []
    with exact_numerics(), torch.no_grad():
        dec = Decoder(model)
        rows.append(dec.prefill(ids[None])[0])
        for t in range(theirs.size(0) - 1):
            rows.append(dec.step(gen[t : t + 1])[0])
    mine = torch.stack(rows)
    d = (mine - theirs).abs().amax(-1)
    scale = theirs.abs().amax().item()
    for r in range(mine.size(0)):
        print(f"row {r:2d}: max |csa2 - torch| {d[r].item():.3e}   argmax {int(mine[r].argmax())} vs csa2 {int(theirs[r].argmax())} (csa2 token {int(gen[r])})")
    agree = int((mine.argmax(-1) == theirs.argmax(-1)).sum())
    print(f"max |difference| over {mine.size(0)} rows: {d.max().item():.3e} (logits up to {scale:.2f}); argmax agrees on {agree}/{mine.size(0)} rows")


if __name__ == "__main__":
    main()
