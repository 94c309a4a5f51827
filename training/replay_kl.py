"""KL(exact || decoder replay R) of next-token distributions on held-out text, for model directories
(train.replay_kl: the CPU bench's passage and 7 more, the bench's rows), and the share of the needle's
entries in each index layer's top-k on held-out passkey / NIAH-single samples (train.evaluate's probe).

    python3 training/replay_kl.py models/v41-mini-128k training/runs/v41-mini-128k/segments/02 [--R 128] [--probe-lengths 32768 --probe-n 8]
        [--kl-passages 48 --kl-batches 16,8,4]   (the figure on 48 passages, once per batch composition)
        [--eval-lengths 4096,32768 --eval-n 16 --eval-passes doc]   (train.evaluate's passkey / NIAH-single figures
        under the given passes, with replay R: e.g. the stored-document path's, as a baseline; no LM loss)
"""

import argparse
import json
import sys
import time
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
    ap.add_argument("--kl-passages", type=int, default=8, help="held-out passages (train.kl_passages: 8, 16 or 48)")
    ap.add_argument("--kl-batches", default="0", help="batch compositions: the figure once per batch size (0 = all passages in one batch)")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 matmuls (train.py does, so its evaluations' replay_kl figures are with TF32; this script's default is without)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    if a.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    corpus = Corpus(HERE / "data" / "corpus", HERE.parent / "models" / "v41-mini-128k" / "tokenizer.json")
    M.set_fast(True)
    res = []
    for d in a.models:
        model = M.Transformer(ModelArgs.load(d / "config.json")).to(device)
        model.load_official({k: v.to(device) for k, v in T.load_weights(d).items()})
        model.eval()
        meta = json.loads((d / "train_meta.json").read_text()) if (d / "train_meta.json").exists() else {}
        rec = {"model": str(d), "step": meta.get("step"), "tf32": a.tf32}
        for i, b in enumerate(int(x) for x in a.kl_batches.split(",")):
            t0 = time.time()
            r = T.replay_kl(model, corpus, device, a.R, doc_tokens=a.doc_tokens, n_passages=a.kl_passages, batch=b)
            r["seconds"] = round(time.time() - t0, 1)
            if i == 0:
                rec["replay_kl"] = r
            rec.setdefault("replay_kl_by_batch", []).append(r)
            print(json.dumps({"model": str(d), "batch": b, "doc_mean": r["doc_mean"], "mean": r["mean"], "seconds": r["seconds"]}), flush=True)
        if a.probe_lengths:
            ev = T.evaluate(model, corpus, device, [int(x) for x in a.probe_lengths.split(",")], a.probe_n, seed=12345, lm_batches=0, replay=0, tasks=("passkey", "niah_single"))
            rec["probe"] = {k: {x: v[x] for x in ("exact", "token_acc", "needle_found", "needle_in_topk")} for k, v in ev["tasks"].items()}
        if a.eval_lengths:
            ev = T.evaluate(model, corpus, device, [int(x) for x in a.eval_lengths.split(",")], a.eval_n, seed=12345, lm_batches=0, replay=a.R,
                            tasks=("passkey", "niah_single"), passes=tuple(a.eval_passes.split(",")), kl=False)
            rec["eval"] = ev["tasks"]
        res.append(rec)
        if a.out:
            a.out.write_text("\n".join(json.dumps(r) for r in res) + "\n")
        del model
    if a.out:
        a.out.write_text("\n".join(json.dumps(r) for r in res) + "\n")


if __name__ == "__main__":
    main()
