"""KL(exact || decoder replay R) of next-token distributions on held-out text, for model directories
(train.replay_kl: the CPU bench's passage and 7 more, the bench's rows), and the share of the needle's
entries in each index layer's top-k on held-out passkey / NIAH-single samples (train.evaluate's probe).

    python3 training/replay_kl.py models/v41-mini-128k training/state/s3-step537 [--R 128] [--probe-lengths 32768 --probe-n 8]
        [--eval-lengths 4096,32768 --eval-n 16 --eval-passes doc]   (train.evaluate's passkey / NIAH-single figures
        under the given passes, with replay R: e.g. the stored-document path's, as a baseline; no LM loss)
"""

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train as T  # noqa: E402
from csa2_train import model as M  # noqa: E402
from csa2_train.config import ModelArgs  # noqa: E402
from csa2_train.data import Corpus  # noqa: E402

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--R", type=int, default=128)
    ap.add_argument("--doc-tokens", type=int, default=4096)
    ap.add_argument("--probe-lengths", default="")
    ap.add_argument("--probe-n", type=int, default=8)
    ap.add_argument("--eval-lengths", default="")
    ap.add_argument("--eval-n", type=int, default=16)
    ap.add_argument("--eval-passes", default="exact,replay,doc")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    corpus = Corpus(HERE / "data" / "corpus", HERE.parent / "models" / "v41-mini-128k" / "tokenizer.json")
    M.set_fast(True)
    res = []
    for d in a.models:
        model = M.Transformer(ModelArgs.load(d / "config.json")).to(device)
        model.load_official({k: v.to(device) for k, v in T.load_weights(d).items()})
        model.eval()
        meta = json.loads((d / "train_meta.json").read_text()) if (d / "train_meta.json").exists() else {}
        rec = {"model": str(d), "step": meta.get("step"), "replay_kl": T.replay_kl(model, corpus, device, a.R, doc_tokens=a.doc_tokens)}
        if a.probe_lengths:
            ev = T.evaluate(model, corpus, device, [int(x) for x in a.probe_lengths.split(",")], a.probe_n, seed=12345, lm_batches=0, replay=0, tasks=("passkey", "niah_single"))
            rec["probe"] = {k: {x: v[x] for x in ("exact", "token_acc", "needle_found", "needle_in_topk")} for k, v in ev["tasks"].items()}
        if a.eval_lengths:
            ev = T.evaluate(model, corpus, device, [int(x) for x in a.eval_lengths.split(",")], a.eval_n, seed=12345, lm_batches=0, replay=a.R,
                            tasks=("passkey", "niah_single"), passes=tuple(a.eval_passes.split(",")), kl=False)
            rec["eval"] = ev["tasks"]
        print(json.dumps(rec), flush=True)
        res.append(rec)
        del model
    if a.out:
        a.out.write_text("\n".join(json.dumps(r) for r in res) + "\n")


if __name__ == "__main__":
    main()
