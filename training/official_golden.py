"""Golden outputs of the official DeepSeek-V4.1-Flash inference code, run on a model directory.

The official code is a local copy in training/official/ (git-ignored, never committed): upstream
huggingface.co/deepseek-ai/DeepSeek-V4.1-Flash, revision dba1be0a40aa45a94ad051997016db3960a90277,
`inference/model.py`, `engram.py`, `vision.py`, `image_processor.py`, with the torch CPU port of
`inference/kernel.py` (`kernel_cpu.py`), transcribed byte-exact from the vendored copy in
tenstorrent/tt-metal `models/demos/deepseek_v3_d_p/reference/deepseek_v41/` (its README.md lists the
only deviation: the four imports are package-relative and the kernel import loads `kernel_cpu`).
This driver never edits those files; everything it changes, it changes from outside, listed here:

- Top-k ties. The official code leaves the choice among equal values to `torch.topk`, which is
  unspecified (CPU and CUDA differ). Like the tiny-a fixture (fixtures/deepseek-v41-tiny-a,
  README "Top-k ties"), `Tensor.topk` is replaced, while the model runs, by a stable descending sort
  followed by the first k: equal values go to the lower index. model.py has three top-k calls, all
  `Tensor.topk` methods, and all three go through the replacement:
    1. `Indexer.forward`: `index_score.topk(topk, dim=-1, sorted=False)` (bf16 scores: ties are common,
       e.g. exact zeros where ReLU zeroes every head); the result is re-sorted by position anyway, so
       returning it sorted by value is the same selection;
    2. `select_candidate_blocks`: `scores.topk(min(topk_blocks, num_blocks), dim=-1)` (block scores are
       maxima of bf16 scores: ties again);
    3. `Gate.forward`: `(scores + bias).topk(self.topk, dim=-1)` (fp32; the fixture passes it through
       the same rule, it just had no ties).
  Nothing else in the official code calls topk.
- Pillow. `image_processor.py` imports PIL at module level but uses it only to load images; where
  Pillow is not installed, a stub package stands in (every use raises) and vision must be off.

The model is built like upstream generate.py and like the fixture: ModelArgs from config.json (keys
ModelArgs lacks are reported and ignored), dtype "bf16", expert_dtype None, max_batch_size 1,
temperature 0 (sample() is then a plain argmax), under torch.set_default_dtype(bfloat16); for
`--device cuda`, torch.set_default_device("cuda") before the official code is imported, so its
module-level tables, buffers and kernel temporaries live on the GPU. Weights are loaded strictly
(every state_dict name, no extra names, same shapes), each converted to the dtype of its parameter
and checked to convert exactly (bf16 -> fp32 for head.weight and the ratio>1 compressor weights).

Sequence: one prefill `model(prompt_ids[None], start_pos=0)`, then N decode calls
`model([[generated_ids[t]]], start_pos=P+t)`, t = 0..N-1, each fed the previous greedy output.
Recorded: generated_ids [N+1] (entry 0 = argmax of the prefill logits), logits [N+1, vocab] fp32
(row 0 after the prefill, row t after decode step t), and per index-source layer L
`decode.layerL.topk` [N, index_topk] (compressed-entry positions ascending, -1 = unreachable; the raw
kernel index is this + the window ring length) and `decode.layerL.topk_tie` [N] (1 where the score of
the last selected position equals that of a position left out), the fixture's names and layout.

Usage:
  python training/official_golden.py --check-fixture fixtures/deepseek-v41-tiny-a [--device cpu]
  python training/official_golden.py --model models/v41-mini-128k --prompt-ids P.json \
      --decode-steps 72 --out golden.safetensors [--device cpu]
  python training/official_golden.py --model models/v41-mini-128k --make-heldout-prompt P.json \
      --prompt-tokens 2048 [--source austen]
A prompt-ids file is a JSON list of ints or an object with an "ids" list. --prompt-text FILE
tokenizes the file with the model's tokenizer.json and puts <|bos|> in front, as ingest does.
"""

import argparse
import dataclasses
import gzip
import hashlib
import importlib
import importlib.util
import json
import platform
import sys
import time
import types
from pathlib import Path

import torch

UPSTREAM_REPO = "huggingface.co/deepseek-ai/DeepSeek-V4.1-Flash"
UPSTREAM_REVISION = "dba1be0a40aa45a94ad051997016db3960a90277"
VENDORED_FROM = "tenstorrent/tt-metal models/demos/deepseek_v3_d_p/reference/deepseek_v41"
OFFICIAL_DIR = Path(__file__).resolve().parent / "official"
OFFICIAL_FILES = ("model.py", "kernel_cpu.py", "engram.py", "vision.py", "image_processor.py")
PACKAGE = "dsv41_official"  # the name the local copy is imported under
CORPUS_DIR = Path(__file__).resolve().parent / "data" / "corpus"
HELD_OUT_FRACTION = 0.05  # as training/csa2_train/data.py: the last 5% of each source is held out


# ----------------------------------------------------------------------------------------------
# importing the official code
# ----------------------------------------------------------------------------------------------

def _install_pil_stub_if_missing() -> bool:
    """Stand in for Pillow where it is not installed; returns True when the stub was installed."""
    try:
        import PIL  # noqa: F401
        return False
    except ImportError:
        pass

    class _Missing(types.ModuleType):
        def __getattr__(self, name):
            raise RuntimeError(f"Pillow is not installed: {self.__name__}.{name} is unavailable (vision needs it)")

    pil = types.ModuleType("PIL")
    pil.Image = _Missing("PIL.Image")
    pil.ImageOps = _Missing("PIL.ImageOps")
    sys.modules["PIL"] = pil
    sys.modules["PIL.Image"] = pil.Image
    sys.modules["PIL.ImageOps"] = pil.ImageOps
    return True


def import_official(device: str):
    """Import training/official as package PACKAGE and return its model module. For cuda the default
    device is set first: kernel_cpu builds its lookup tables at import time on the default device."""
    if device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("--device cuda: CUDA is not available")
        torch.set_default_device("cuda")
    missing = [f for f in OFFICIAL_FILES if not (OFFICIAL_DIR / f).is_file()]
    if missing:
        sys.exit(f"official code not found in {OFFICIAL_DIR}: missing {', '.join(missing)}")
    pil_stub = _install_pil_stub_if_missing()
    spec = importlib.util.spec_from_file_location(
        PACKAGE, OFFICIAL_DIR / "__init__.py", submodule_search_locations=[str(OFFICIAL_DIR)]
    )
    pkg = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = pkg
    spec.loader.exec_module(pkg)
    return importlib.import_module(f"{PACKAGE}.model"), pil_stub


# ----------------------------------------------------------------------------------------------
# deterministic top-k (ties to the lower index), with a log of boundary ties
# ----------------------------------------------------------------------------------------------

class TopkLog:
    """Which module is calling topk (set by hooks on Indexer and Gate), and the tie flags per call."""

    def __init__(self):
        self.owner = None  # ("indexer", layer_id) / ("gate", layer_id) / None
        self.calls = []  # (owner, tie flags [...]) in call order


_LOG = TopkLog()
_ORIGINAL_TOPK = torch.Tensor.topk


def stable_topk(self, k, dim=-1, largest=True, sorted=True, *, out=None):
    """torch.Tensor.topk with ties broken to the lower index: a stable sort, then the first k.
    The values come back in descending order whatever `sorted` says (the only unsorted caller,
    the indexer, re-sorts the indices by position)."""
    assert out is None and largest, "the official code only asks for the largest k"
    vals, idxs = torch.sort(self, dim=dim, descending=True, stable=True)
    n = self.size(dim)
    if _LOG.owner is not None:
        if 0 < k < n:
            # a tie among -inf (unreachable) entries is not counted, as the fixture counts
            last = vals.narrow(dim, k - 1, 1)
            tie = (last == vals.narrow(dim, k, 1)) & (last > -torch.inf)
        else:
            tie = torch.zeros_like(vals.narrow(dim, 0, 1), dtype=torch.bool)
        _LOG.calls.append((_LOG.owner, tie.squeeze(dim)))
    return torch.return_types.topk((vals.narrow(dim, 0, k), idxs.narrow(dim, 0, k)))


class deterministic_topk:
    """Context manager: Tensor.topk -> stable_topk while the model runs."""

    def __enter__(self):
        torch.Tensor.topk = stable_topk

    def __exit__(self, *exc):
        torch.Tensor.topk = _ORIGINAL_TOPK


# ----------------------------------------------------------------------------------------------
# building and loading
# ----------------------------------------------------------------------------------------------

def make_args(M, config: dict):
    """ModelArgs from a config dict with the fixture's run settings; returns (args, notes)."""
    fields = {f.name for f in dataclasses.fields(M.ModelArgs)}
    unknown = sorted(set(config) - fields)
    kw = {k: v for k, v in config.items() if k in fields}
    notes = {"unknown_config_keys": unknown, "overridden": {}}
    forced = {"dtype": "bf16", "expert_dtype": None, "max_batch_size": 1, "temperature": 0.0}
    for k, v in forced.items():
        if k in kw and kw[k] != v:
            notes["overridden"][k] = {"config": kw[k], "used": v}
        kw[k] = v
    args = M.ModelArgs(**kw)
    if args.vision_n_layers != 0 or args.engram_layer_ids or args.dspark_block_size:
        sys.exit("this driver runs text-only models: vision, engram and DSpark must be off")
    return args, notes


def load_weights(model: torch.nn.Module, path: Path):
    """Strict load of model.safetensors: the same names and shapes as the model's state_dict; every
    tensor converted to its parameter's dtype, and the conversion checked to be exact."""
    from safetensors import safe_open

    expected = model.state_dict()
    converted = {}
    with safe_open(str(path), framework="pt", device="cpu") as f:
        names = set(f.keys())
        missing, extra = sorted(set(expected) - names), sorted(names - set(expected))
        if missing or extra:
            sys.exit(f"{path}: state_dict mismatch: missing {missing[:8]} ({len(missing)}), extra {extra[:8]} ({len(extra)})")
        for name in sorted(names):
            t = f.get_tensor(name)
            want = expected[name]
            if tuple(t.shape) != tuple(want.shape):
                sys.exit(f"{path}: {name}: shape {tuple(t.shape)}, the model has {tuple(want.shape)}")
            c = t.to(want.dtype)
            if not torch.equal(c.to(t.dtype), t):
                sys.exit(f"{path}: {name}: {t.dtype} -> {want.dtype} is not exact")
            converted[name] = c
    model.load_state_dict(converted, strict=True)
    return len(converted)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "cpu"


# ----------------------------------------------------------------------------------------------
# the run
# ----------------------------------------------------------------------------------------------

def run(model_dir: Path, prompt_ids: list[int], decode_steps: int, device: str, force_ids: list[int] | None = None) -> dict:
    """Prefill + decode_steps greedy decode steps of the official model; returns tensors and info.
    With force_ids, decode step t is fed force_ids[t] instead of the previous greedy output (teacher
    forcing: the logits rows of two executions then stay comparable after their greedy paths part)."""
    M, pil_stub = import_official(device)
    config = json.loads((model_dir / "config.json").read_text())
    torch.set_default_dtype(torch.bfloat16)  # as upstream generate.py
    args, notes = make_args(M, config)
    if len(prompt_ids) + decode_steps > args.max_seq_len:
        sys.exit(f"prompt ({len(prompt_ids)}) + decode steps ({decode_steps}) exceed max_seq_len {args.max_seq_len}")
    if not all(0 <= i < args.vocab_size for i in prompt_ids):
        sys.exit(f"prompt ids must lie in [0, {args.vocab_size})")
    t0 = time.time()
    model = M.Transformer(args)
    n_tensors = load_weights(model, model_dir / "model.safetensors")
    model.eval()
    t_load = time.time() - t0

    # hooks: who calls topk, and what each indexer returned
    index_layers = [i for i, layer in enumerate(model.layers) if layer.attn.indexer is not None]
    picked = {i: [] for i in index_layers}  # per step: (raw idxs [1, s, k], offset, start_pos)

    def owner_hooks(module, kind, layer_id, record):
        def pre(_m, _a):
            _LOG.owner = (kind, layer_id)

        def post(_m, a, out):
            _LOG.owner = None
            if record:
                picked[layer_id].append((out, a[4], a[3]))

        module.register_forward_pre_hook(pre)
        module.register_forward_hook(post)

    for i, layer in enumerate(model.layers):
        owner_hooks(layer.ffn.gate, "gate", i, False)
        if layer.attn.indexer is not None:
            owner_hooks(layer.attn.indexer, "indexer", i, True)

    P, dev = len(prompt_ids), torch.device(device)
    step_times = []
    with deterministic_topk():
        t1 = time.time()
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=dev)
        out_ids, logits, _ = model(ids, start_pos=0)
        t_prefill = time.time() - t1
        gen, rows = [int(out_ids[0])], [logits[0].float().cpu()]
        prefill_calls = list(_LOG.calls)
        _LOG.calls.clear()
        prefill_picked = {i: list(v) for i, v in picked.items()}
        for v in picked.values():
            v.clear()
        decode_calls = []
        for t in range(decode_steps):
            ts = time.time()
            ids = torch.tensor([[gen[-1] if force_ids is None else force_ids[t]]], dtype=torch.long, device=dev)
            out_ids, logits, _ = model(ids, start_pos=P + t)
            gen.append(int(out_ids[0]))
            rows.append(logits[0].float().cpu())
            decode_calls.append(list(_LOG.calls))
            _LOG.calls.clear()
            for i in index_layers:  # a layer whose indexer did not run (nothing compressed yet)
                if len(picked[i]) < t + 1:
                    picked[i].append(None)
            step_times.append(time.time() - ts)
    t_total = time.time() - t0

    # everything recorded lives on the CPU (under --device cuda the default device is the GPU)
    cpu = torch.device("cpu")
    tensors = {
        "prompt_ids": torch.tensor(prompt_ids, dtype=torch.int32, device=cpu),
        "generated_ids": torch.tensor(gen, dtype=torch.int32, device=cpu),
        "logits": torch.stack(rows).float(),
    }
    K = args.index_topk
    for i in index_layers:
        topk = torch.full((decode_steps, K), -1, dtype=torch.int32, device=cpu)
        for t, rec in enumerate(picked[i]):
            if rec is None:
                continue
            raw, offset, _ = rec
            raw = raw[0, 0].cpu()
            topk[t, : raw.numel()] = torch.where(raw >= 0, raw - offset, -1)
        tensors[f"decode.layer{i}.topk"] = topk
        ties = torch.zeros(decode_steps, dtype=torch.uint8, device=cpu)
        for t, calls in enumerate(decode_calls):
            mine = [tie for owner, tie in calls if owner == ("indexer", i)]
            if mine:  # the indexer's own selection is its last topk call
                ties[t] = int(mine[-1].reshape(-1)[0])
        tensors[f"decode.layer{i}.topk_tie"] = ties

    def tie_counts(calls_per_run):
        c = {"indexer": [0, 0], "candidates": [0, 0], "gate": [0, 0]}
        for calls in calls_per_run:
            per_owner = {}
            for owner, tie in calls:
                per_owner.setdefault(owner, []).append(tie)
            for (kind, layer_id), ties in per_owner.items():
                if kind == "gate":
                    for tie in ties:
                        c["gate"][0] += int(tie.sum())
                        c["gate"][1] += tie.numel()
                    continue
                c["indexer"][0] += int(ties[-1].sum())
                c["indexer"][1] += ties[-1].numel()
                for tie in ties[:-1]:
                    c["candidates"][0] += int(tie.sum())
                    c["candidates"][1] += tie.numel()
        return {k: f"{v[0]} of {v[1]} rows" for k, v in c.items()}

    # the prefill's top-k lists and tie flags, for comparisons (not written by --out)
    prefill_topk = {}
    for i, recs in prefill_picked.items():
        if recs:
            raw, offset, _ = recs[0]
            raw = raw[0].cpu()
            prefill_topk[f"prefill.layer{i}.topk"] = torch.where(raw >= 0, raw - offset, -1)
            mine = [tie for owner, tie in prefill_calls if owner == ("indexer", i)]
            prefill_topk[f"prefill.layer{i}.topk_tie"] = mine[-1][0].to(torch.uint8).cpu()
            if len(mine) > 1:  # the candidate source: its first topk call picks the candidate blocks
                prefill_topk[f"prefill.layer{i}.candidates_tie"] = mine[0][0].to(torch.uint8).cpu()

    info = {
        "upstream": {"repo": UPSTREAM_REPO, "revision": UPSTREAM_REVISION, "vendored_from": VENDORED_FROM},
        "official_files_sha256": {f: sha256_file(OFFICIAL_DIR / f) for f in OFFICIAL_FILES},
        "torch": torch.__version__,
        "device": device,
        "device_name": device_name(device),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "pil_stub": pil_stub,
        "model_dir": str(model_dir),
        "model_safetensors_sha256": sha256_file(model_dir / "model.safetensors"),
        "weights_loaded": n_tensors,
        "config_notes": notes,
        "run": {
            "dtype": "bf16 (torch.set_default_dtype(torch.bfloat16))",
            "expert_dtype": None,
            "max_batch_size": 1,
            "max_seq_len": args.max_seq_len,
            "temperature": 0.0,
            "topk_ties": "stable descending sort, first k (ties to the lower index), Tensor.topk replaced",
            "prompt_tokens": P,
            "decode_steps": decode_steps,
            "sequence": "model(prompt_ids[None], 0); then model([[generated_ids[t]]], P + t), t = 0..N-1",
        },
        "index_source_layers": index_layers,
        "ties": {"prefill": tie_counts([prefill_calls]), "decode": tie_counts(decode_calls)},
        "wall_s": {
            "build_and_load": round(t_load, 3),
            "prefill": round(t_prefill, 3),
            "decode_total": round(sum(step_times), 3),
            "decode_per_step_mean": round(sum(step_times) / max(1, len(step_times)), 4),
            "total": round(t_total, 3),
        },
    }
    return {"tensors": tensors, "info": info, "prefill_topk": prefill_topk}


# ----------------------------------------------------------------------------------------------
# prompts
# ----------------------------------------------------------------------------------------------

def read_prompt_ids(path: Path) -> list[int]:
    data = json.loads(path.read_text())
    ids = data["ids"] if isinstance(data, dict) else data
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) for i in ids):
        sys.exit(f"{path}: expected a non-empty JSON list of ints, or an object with an \"ids\" list")
    return ids


def tokenizer_of(model_dir: Path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    bos = tok.token_to_id("<|bos|>")
    if bos is None:
        sys.exit(f"{model_dir}/tokenizer.json has no <|bos|> token")
    return tok, bos


def prompt_from_text(model_dir: Path, path: Path) -> list[int]:
    tok, bos = tokenizer_of(model_dir)
    return [bos] + tok.encode(path.read_text(encoding="utf-8")).ids


def make_heldout_prompt(model_dir: Path, source: str, n_tokens: int, out: Path):
    """<|bos|> + the first n_tokens - 1 tokens of `source`'s held-out text: the last 5% of the source,
    cut at a newline exactly as training/csa2_train/data.py's Corpus does (never seen in training)."""
    tok, bos = tokenizer_of(model_dir)
    with gzip.open(CORPUS_DIR / f"{source}.txt.gz", "rt", encoding="utf-8") as f:
        t = f.read()
    cut = t.rfind("\n", 0, int(len(t) * (1 - HELD_OUT_FRACTION)))
    held = t[cut + 1 :]
    # encode a generous prefix (about 4 chars per token), then keep the first n_tokens - 1 tokens
    chars = n_tokens * 6
    enc = tok.encode(held[:chars])
    while len(enc.ids) < n_tokens and chars < len(held):
        chars *= 2
        enc = tok.encode(held[:chars])
    if len(enc.ids) < n_tokens - 1:
        sys.exit(f"{source}: the held-out text has only {len(enc.ids)} tokens")
    ids = [bos] + enc.ids[: n_tokens - 1]
    end_char = enc.offsets[n_tokens - 2][1]
    out.write_text(json.dumps({
        "ids": ids,
        "source": f"training/data/corpus/{source}.txt.gz, held-out part (last {HELD_OUT_FRACTION:.0%}, "
                  f"from char {cut + 1} of {len(t)}), chars 0..{end_char}",
        "tokenizer": str(model_dir / "tokenizer.json"),
        "text": held[:end_char],
    }, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {out}: {len(ids)} ids (<|bos|> + {len(ids) - 1} tokens of {source} held-out text)")


# ----------------------------------------------------------------------------------------------
# the modes
# ----------------------------------------------------------------------------------------------

def check_fixture(fixture: Path, device: str) -> bool:
    """Run the fixture's prompt with 16 decode steps and compare with its golden.safetensors."""
    from safetensors.torch import load_file

    g = load_file(str(fixture / "golden.safetensors"))
    steps = g["generated_ids"].numel() - 1
    res = run(fixture, g["prompt_ids"].tolist(), steps, device)
    r, info = res["tensors"], res["info"]
    ok = True

    same_ids = torch.equal(r["generated_ids"], g["generated_ids"])
    ok &= same_ids
    print(f"device {device} ({info['device_name']}), torch {info['torch']}, {info['torch_threads']} threads")
    print(f"generated_ids equal: {same_ids}")
    print(f"  ours:    {r['generated_ids'].tolist()}")
    if not same_ids:
        print(f"  fixture: {g['generated_ids'].tolist()}")

    gpu, cpu = g["logits"], g["xcheck.logits_bf16_cpu"]
    print("\nrow | max|diff| vs logits (GPU) | max|diff| vs xcheck.logits_bf16_cpu | argmax")
    for t in range(steps + 1):
        d_gpu = (r["logits"][t] - gpu[t]).abs().max().item()
        d_cpu = (r["logits"][t] - cpu[t]).abs().max().item()
        print(f"{t:3d} | {d_gpu:25.3e} | {d_cpu:36.3e} | {int(r['logits'][t].argmax())}")
    d_gpu_all = (r["logits"] - gpu).abs()
    d_cpu_all = (r["logits"] - cpu).abs()
    print(f"all | max {d_gpu_all.max().item():.3e} mean {d_gpu_all.mean().item():.3e}"
          f" | max {d_cpu_all.max().item():.3e} mean {d_cpu_all.mean().item():.3e}")
    ref_spread = (cpu - gpu).abs()
    print(f"(the fixture's own CPU-vs-GPU spread: max {ref_spread.max().item():.3e}, mean {ref_spread.mean().item():.3e})")

    print()
    for name in sorted(k for k in g if k.startswith("decode.")):
        equal = torch.equal(r[name].to(g[name].dtype), g[name])
        ok &= equal
        print(f"{name:30s} equal: {equal}" + ("" if equal else f"\n  ours {r[name].tolist()}\n  fixture {g[name].tolist()}"))
    for name, ours in sorted(res["prefill_topk"].items()):
        if name in g:
            equal = torch.equal(ours.to(g[name].dtype), g[name])
            ok &= equal
            print(f"{name:30s} equal: {equal} (extra check)")
    print(f"\nties resolved by the rule: {json.dumps(info['ties'])}")
    print(f"wall time: {json.dumps(info['wall_s'])}")
    # on the same kind of device the copy must reproduce the fixture's same-device run closely
    ref = cpu if device == "cpu" else gpu
    close = (r["logits"] - ref).abs().max().item() <= 0.05
    ok &= close
    print(f"\nverdict: {'PASS' if ok else 'FAIL'}")
    return ok


def write_golden(model_dir: Path, prompt_ids: list[int], steps: int, device: str, out: Path, prompt_src: str, force_ids: list[int] | None = None):
    from safetensors.torch import save_file

    res = run(model_dir, prompt_ids, steps, device, force_ids)
    t, info = res["tensors"], res["info"]
    info["prompt"] = prompt_src
    if force_ids is not None:
        info["run"]["sequence"] = "model(prompt_ids[None], 0); then model([[force_ids[t]]], P + t), t = 0..N-1 (teacher forcing)"
        t["force_ids"] = torch.tensor(force_ids, dtype=torch.int32)
    info["out"] = str(out)
    meta = {"format": "pt", "upstream_revision": UPSTREAM_REVISION, "device": info["device_name"], "torch": info["torch"]}
    save_file({k: v.contiguous() for k, v in t.items()}, str(out), metadata=meta)
    side = out.with_suffix(".json")
    side.write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info["wall_s"]))
    print(f"generated_ids: {t['generated_ids'].tolist()}")
    if (model_dir / "tokenizer.json").is_file():
        tok, _ = tokenizer_of(model_dir)
        print(f"generated text: {json.dumps(tok.decode(t['generated_ids'].tolist(), skip_special_tokens=False))}")
    print(f"wrote {out} and {side}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--check-fixture", type=Path, metavar="DIR", help="compare with a fixture's golden.safetensors")
    p.add_argument("--model", type=Path, metavar="DIR", help="model dir: config.json, model.safetensors, tokenizer.json")
    p.add_argument("--prompt-ids", type=Path, metavar="FILE")
    p.add_argument("--prompt-text", type=Path, metavar="FILE")
    p.add_argument("--decode-steps", type=int, default=16)
    p.add_argument("--out", type=Path, metavar="FILE")
    p.add_argument("--force-ids", type=Path, metavar="GOLDEN", help="feed the decode steps the generated_ids of this golden file (teacher forcing)")
    p.add_argument("--make-heldout-prompt", type=Path, metavar="FILE", help="write a held-out prompt-ids file and exit")
    p.add_argument("--prompt-tokens", type=int, default=2048)
    p.add_argument("--source", default="austen", choices=("austen", "mobydick", "brown"))
    a = p.parse_args()

    if a.check_fixture:
        sys.exit(0 if check_fixture(a.check_fixture, a.device) else 1)
    if not a.model:
        p.error("give --check-fixture DIR, or --model DIR")
    if a.make_heldout_prompt:
        make_heldout_prompt(a.model, a.source, a.prompt_tokens, a.make_heldout_prompt)
        return
    if (a.prompt_ids is None) == (a.prompt_text is None):
        p.error("give exactly one of --prompt-ids FILE, --prompt-text FILE")
    if a.out is None:
        p.error("--out FILE is required")
    if a.decode_steps < 0:
        p.error("--decode-steps must be >= 0")
    if a.prompt_ids:
        ids, src = read_prompt_ids(a.prompt_ids), f"ids from {a.prompt_ids}"
    else:
        ids, src = prompt_from_text(a.model, a.prompt_text), f"<|bos|> + tokenized {a.prompt_text}"
    force = None
    if a.force_ids:
        from safetensors.torch import load_file

        force = load_file(str(a.force_ids))["generated_ids"].tolist()
        if len(force) < a.decode_steps:
            p.error(f"--force-ids: {a.force_ids} has {len(force)} generated ids, {a.decode_steps} needed")
        force = force[: a.decode_steps]
    write_golden(a.model, ids, a.decode_steps, a.device, a.out, src, force)


if __name__ == "__main__":
    main()
