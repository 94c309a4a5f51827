"""Check the decoder-replay simulation (model.Ctx.replay_start) against csa2-core's bounded replay.

    npx csa2 generate --model M --prompt-ids IDS --max-tokens 1 --replay R --dump replay.safetensors
    npx csa2 generate --model M --prompt-ids IDS --max-tokens 1 --exact --dump exact.safetensors
    python3 training/check_replay.py --model M --prompt-ids IDS --replay R --replay-dump replay.safetensors --exact-dump exact.safetensors

Runs the prompt as one prefill in reference numerics (exact_numerics) twice, exact and with the replay
simulation (the decoder layers' windows of the last R rows start R rows before the end), and prints the
max |difference| of the last row's logits against csa2's (row 0 of each dump), and between exact and
replay: the simulation is faithful when torch-replay vs csa2-replay is at the level of torch-exact vs
csa2-exact (the spread of two faithful executions) while exact vs replay is larger.
"""

import argparse
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from csa2_train.config import ModelArgs  # noqa: E402
from csa2_train.model import Ctx, Transformer, exact_numerics  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--prompt-ids", required=True)
    ap.add_argument("--replay", type=int, default=128)
    ap.add_argument("--replay-dump", type=Path, required=True)
    ap.add_argument("--exact-dump", type=Path, required=True)
    a = ap.parse_args()
    ids = torch.tensor([[int(x) for x in a.prompt_ids.split(",")]])
    P = ids.size(1)
    model = Transformer(ModelArgs.load(a.model / "config.json"))
    sd = load_file(str(a.model / "model.safetensors"))
    model.load_official(sd)
    model.eval()
    out = {}
    with exact_numerics(), torch.no_grad():
        out["exact"] = model(ids, Ctx())[0, -1]
        out["replay"] = model(ids, Ctx(replay_start=torch.tensor([max(0, P - a.replay)])))[0, -1]
    csa = {"exact": load_file(str(a.exact_dump))["logits"][0], "replay": load_file(str(a.replay_dump))["logits"][0]}
    print(f"prompt {P} tokens, replay R = {a.replay}")
    for k in ("exact", "replay"):
        d = (out[k] - csa[k]).abs().max().item()
        print(f"torch-{k} vs csa2-{k}: max |diff| {d:.3e}  argmax {out[k].argmax().item()} vs {csa[k].argmax().item()}")
    print(f"torch exact vs torch replay: max |diff| {(out['exact'] - out['replay']).abs().max().item():.3e}")
    print(f"csa2 exact vs csa2 replay:   max |diff| {(csa['exact'] - csa['replay']).abs().max().item():.3e}")
    print(f"torch-replay vs csa2-exact:  max |diff| {(out['replay'] - csa['exact']).abs().max().item():.3e}")


if __name__ == "__main__":
    main()
