"""Per-sample view of one held-out task at one length, as train.evaluate scores it (same seeds, same
depths): for each of the N samples the target answer tokens and the argmax given the right prefix.

    /work/venv-torch/bin/python training/task_samples.py MODEL_DIR TASK LENGTH [i,j,...]

MODEL_DIR: a served model directory or a call's files (shards + index). TASK: a task spec as
train.py's --eval-tasks (passkey, passkey.heldout, niah_single.heldout.genre, ...). CPU: 12-95 s per 4K sample
on two cores. Prints one JSON line per sample."""
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from train import eval_depths, eval_sample, load_weights  # noqa: E402
from csa2_train import model as M  # noqa: E402
from csa2_train.config import ModelArgs  # noqa: E402
from csa2_train.data import EVAL_SOURCES, Corpus  # noqa: E402


def main() -> None:
    mdir, task, L = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    n_per, seed = 8, 12345  # train.py's --eval-n 8 and evaluate's seed
    idxs = [int(x) for x in sys.argv[4].split(",")] if len(sys.argv) > 4 else list(range(n_per))
    args = ModelArgs.load(HERE / "configs" / "v41-mini-128k.json")
    m = M.Transformer(args)
    m.load_official(load_weights(mdir))
    m.eval()
    M.set_fast(True)
    corpus = Corpus(HERE / "data" / "corpus", HERE.parent / "models" / "v41-mini-128k" / "tokenizer.json", eval_sources=EVAL_SOURCES)
    depths = eval_depths(n_per)
    for i in idxs:
        s = eval_sample(corpus, seed, task, L, i, depths[i])
        ids = s.ids[: s.length].astype(np.int64)
        am = s.answer_mask[: s.length].copy()
        am[np.nonzero(am)[0][-1]] = False  # the answer tokens, not the closing eos
        t = time.time()
        with torch.no_grad():
            pred = m(torch.from_numpy(ids)[None], M.Ctx())[0].argmax(-1).numpy()
        pos = np.nonzero(am)[0]
        tgt, pr = ids[pos + 1], pred[pos]
        print(json.dumps({"i": i, "depth": round(depths[i], 3), "len": int(s.length), "ok": bool((tgt == pr).all()),
                          "target": corpus.tok.decode(tgt.tolist()), "predicted": corpus.tok.decode(pr.tolist()),
                          "tgt": tgt.tolist(), "pred": pr.tolist(), "s": round(time.time() - t, 1)}), flush=True)


if __name__ == "__main__":
    main()
