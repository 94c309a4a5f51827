"""Check the stored-document simulation (model.Ctx replay_start = P - R with encoder_replay_start = D - R)
against csa2's stored-document path, row by row, on short held-out passages.

    python3 training/check_doc_replay.py --model models/v41-mini-128k [--doc-tokens 512] [--passages 0,3,5]

For each passage (train.kl_passages, built with --doc-tokens: a D-token document, the next 32 tokens the
question, --steps teacher-forced tokens), it runs on this machine's CPU:
  csa2 ingest --ids-file DOC, then generate --document --prompt-ids Q --force-ids F --replay R --dump   (the bench's path)
  csa2 generate --prompt-ids DOC+Q --force-ids F --exact --dump                                        (exact)
  csa2 generate --prompt-ids DOC+Q --force-ids F --replay R --dump                                     (decoder replay only)
and one full-sequence forward per variant in torch (reference numerics, exact_numerics), and prints per
passage the max |Δlogit| of torch vs csa2 for each variant (the simulation is faithful when torch-doc vs
csa2-doc is at the level of torch-exact vs csa2-exact), and the KL(exact ‖ variant) of the rows in both.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train as T  # noqa: E402
from csa2_train import model as M  # noqa: E402
from csa2_train.config import ModelArgs  # noqa: E402
from csa2_train.data import Corpus  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def csa2(*args):
    r = subprocess.run(["node", str(ROOT / "packages/csa2-engine/bin/csa2.js"), *args], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"csa2 {' '.join(args[:2])} failed: {r.stderr[-2000:]}")
    return r


def kl_rows(lp_ref, lp):
    return (lp_ref.exp() * (lp_ref - lp)).sum(-1).clamp_min(0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--doc-tokens", type=int, default=512)
    ap.add_argument("--question-tokens", type=int, default=32)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--R", type=int, default=128)
    ap.add_argument("--passages", default="0,3,5")
    a = ap.parse_args()
    corpus = Corpus(HERE / "data" / "corpus", ROOT / "models" / "v41-mini-128k" / "tokenizer.json")
    seqs = T.kl_passages(corpus, a.doc_tokens, a.question_tokens, a.steps)
    model = M.Transformer(ModelArgs.load(a.model / "config.json"))
    model.load_official(T.load_weights(a.model))
    model.eval()
    D, Q, n, R = a.doc_tokens, a.question_tokens, a.steps, a.R
    P = D + Q
    work = Path(tempfile.mkdtemp(prefix="cdr-"))
    store = f"file://{work}/store"
    summary = []
    for pi in [int(x) for x in a.passages.split(",")]:
        ids = [int(x) for x in seqs[pi]]
        doc, q, forced = ids[:D], ids[D:P], ids[P : P + n]
        (work / f"doc{pi}.json").write_text(json.dumps(doc))
        csa2("ingest", "--model", str(a.model), "--store", store, "--ids-file", str(work / f"doc{pi}.json"), "--doc-id", f"p{pi}")
        common = ["--max-tokens", str(n), "--force-ids", ",".join(map(str, forced))]
        csa2("generate", "--model", str(a.model), "--store", store, "--document", f"p{pi}", "--prompt-ids", ",".join(map(str, q)), "--replay", str(R), "--dump", str(work / f"doc{pi}.st"), *common)
        csa2("generate", "--model", str(a.model), "--prompt-ids", ",".join(map(str, doc + q)), "--exact", "--dump", str(work / f"exact{pi}.st"), *common)
        csa2("generate", "--model", str(a.model), "--prompt-ids", ",".join(map(str, doc + q)), "--replay", str(R), "--dump", str(work / f"replay{pi}.st"), *common)
        c = {k: load_file(str(work / f"{k}{pi}.st"))["logits"][:n].double() for k in ("exact", "replay", "doc")}
        x = torch.tensor([ids[: P + n - 1]])
        rows = torch.arange(P - 1, P + n - 1)
        t = {}
        with M.exact_numerics(), torch.no_grad():
            for k, ctx in (("exact", M.Ctx()), ("replay", M.Ctx(replay_start=torch.tensor([P - R]))),
                           ("doc", M.Ctx(replay_start=torch.tensor([P - R]), encoder_replay_start=torch.tensor([D - R])))):
                t[k] = model(x, ctx)[0, rows].double()
        lc = {k: torch.log_softmax(v, -1) for k, v in c.items()}
        lt = {k: torch.log_softmax(v, -1) for k, v in t.items()}
        rec = {"passage": pi, "D": D, "P": P, "R": R, "rows": n}
        for k in ("exact", "replay", "doc"):
            rec[f"max|torch-csa2| {k}"] = round(float((t[k] - c[k]).abs().max()), 4)
        rec["max|exact-doc| torch"] = round(float((t["exact"] - t["doc"]).abs().max()), 4)
        rec["max|exact-doc| csa2"] = round(float((c["exact"] - c["doc"]).abs().max()), 4)
        rec["max|torch doc - csa2 exact|"] = round(float((t["doc"] - c["exact"]).abs().max()), 4)
        for k in ("replay", "doc"):
            rec[f"KL(exact||{k}) torch rows"] = [float(f"{v:.3g}") for v in kl_rows(lt["exact"], lt[k])]
            rec[f"KL(exact||{k}) csa2 rows"] = [float(f"{v:.3g}") for v in kl_rows(lc["exact"], lc[k])]
        rec["argmax same (torch doc, csa2 doc)"] = int((t["doc"].argmax(-1) == c["doc"].argmax(-1)).sum())
        print(json.dumps(rec), flush=True)
        summary.append(rec)


if __name__ == "__main__":
    main()
