"""Time and profile training steps of the mini model with torch.profiler, in several variants.

    python3 training/profile_step.py [--batch 2] [--seq-len 512] [--variants old,fast,graph] [--out DIR]
    python3 training/profile_step.py --seq-lens 32768,4096 --tokens-per-step 65536 --variants torch,triton \
        --profile-variants triton --steps 2        # the kernels' speed comparison (expected ~2 minutes on an H100, not yet timed)

Variants: `old` = the reference code paths (model.set_fast(False), eager), `fast` = the fast
paths (keyed top-k), eager, `graph` = the fast paths with the whole step replayed as a CUDA graph
(train.GraphStep; GPU only); these three use the PyTorch attention and indexer (set_kernels("torch")).
`torch` = `fast`; `triton` = the fast paths with the Triton kernels (set_kernels("triton")), eager;
`triton-graph` = that as a CUDA graph. For each: one warm-up step, timed steps (--steps), then, for the
variants in --profile-variants (default: all), one profiled step: the number of GPU kernels (CPU:
operator calls) per step, the GPU's busy time, and the top operators by self time. --seq-lens runs
several lengths in one call, each at batch --tokens-per-step // length; a variant that fails (an
out-of-memory error, say) is reported and the others still run. Random token ids (the cost does not
depend on the text). Prints the GPU, a table of the variants side by side per length, and writes the
tables under --out.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from csa2_train import model as M  # noqa: E402
from csa2_train.config import ModelArgs  # noqa: E402

HERE = Path(__file__).resolve().parent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", type=Path, default=HERE / "configs" / "v41-mini-128k.json")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--steps", type=int, default=1, help="timed steps after one warm-up step")
    ap.add_argument("--variants", default="old,fast,graph")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--rows", type=int, default=25)
    ap.add_argument("--seq-lens", default="", help="lengths to run, comma-separated (overrides --seq-len; batch = --tokens-per-step // length)")
    ap.add_argument("--tokens-per-step", type=int, default=0, help="with --seq-lens: tokens a step (default: --batch x the first length)")
    ap.add_argument("--profile-variants", default="", help="variants to profile (default: all of --variants)")
    a = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cuda = dev.type == "cuda"
    args = ModelArgs.load(a.config)
    print(f"device: {torch.cuda.get_device_name() if cuda else 'cpu'}  torch {torch.__version__}"
          f"  triton {getattr(M.kernels.triton, '__version__', None)}  kernels: {M.kernels.why() or 'available'}", flush=True)
    lens = [int(x) for x in a.seq_lens.split(",") if x] or [a.seq_len]
    tokens = a.tokens_per_step or a.batch * lens[0]
    ctx_kw = dict(train=True, kl_rows=128, ckpt_blocks=True, attn_chunk_tokens=16384)
    summary = []
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
    prof_set = set((a.profile_variants or a.variants).split(","))
    for L in lens:
        batch = max(1, tokens // L) if a.seq_lens else a.batch
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(3, args.vocab_size, (batch, L), generator=g).to(dev)
        am = torch.zeros_like(ids, dtype=torch.bool)
        am[:, -8:-2] = True
        for variant in a.variants.split(","):
            if variant.endswith("graph") and not cuda:
                continue
            try:
                summary.append(run_variant(a, args, dev, variant, ids, am, ctx_kw, variant in prof_set))
            except Exception as e:  # noqa: BLE001 - report, go on with the other variants
                summary.append({"variant": variant, "seq_len": L, "batch": batch, "error": repr(e)[:300]})
                print(json.dumps(summary[-1]), flush=True)
                if cuda:
                    torch.cuda.empty_cache()
    print(f"\ndevice: {torch.cuda.get_device_name() if cuda else 'cpu'}")
    print("seq_len batch variant       step_s    tok/s  kernels  gpu_busy_s  mem_gb  loss")
    for r in summary:
        if "error" in r:
            print(f"{r['seq_len']:7d} {r['batch']:5d} {r['variant']:12s} error: {r['error'][:120]}")
            continue
        print(f"{r['seq_len']:7d} {r['batch']:5d} {r['variant']:12s} {min(r['step_s']):7.3f} {r['tok_per_s']:8d} "
              f"{r.get('gpu_kernels', r.get('cpu_ops'))} {r.get('gpu_busy_s')} {r['mem_gb']} {r['loss']}")
    by_len = {}
    for r in summary:
        if "error" not in r:
            by_len.setdefault(r["seq_len"], {})[r["variant"]] = r["tok_per_s"]
    for L, v in by_len.items():
        if "torch" in v and "triton" in v:
            print(f"{L}: torch {v['torch']} tok/s, triton {v['triton']} tok/s, x{v['triton'] / v['torch']:.2f}")
    if a.out:
        (a.out / "profile_summary.json").write_text(json.dumps(summary, indent=1))


def run_variant(a, args, dev, variant, ids, am, ctx_kw, profile):
    cuda = dev.type == "cuda"
    from train import GraphStep, set_lr, train_step  # noqa: E402

    def sync():
        if cuda:
            torch.cuda.synchronize()

    torch.manual_seed(0)
    model = M.Transformer(args).to(dev)
    model.init_weights(1)
    model.train()
    M.set_fast(variant != "old")
    M.set_kernels("triton" if variant.startswith("triton") else "torch")
    graphed = variant.endswith("graph")
    lr = torch.tensor(1e-4, device=dev) if graphed else 1e-4
    opt = torch.optim.AdamW(model.parameters(), lr=lr, fused=cuda, capturable=graphed)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    if graphed:
        gs = GraphStep(model, opt, ctx_kw, 1.0, ids, am, 1e-4)

        def step():
            set_lr(opt, 1e-4)
            return gs(ids, am)
    else:

        def step():
            return train_step(model, opt, ids, am, ctx_kw, 1.0, 1e-4)

        step()
    sync()
    t_warm = time.time() - t0
    times = []
    for _ in range(a.steps):
        t0 = time.time()
        out = step()
        sync()
        times.append(time.time() - t0)
    B, L = ids.shape
    res = {"variant": variant, "device": torch.cuda.get_device_name() if cuda else "cpu", "batch": B, "seq_len": L, "warmup_s": round(t_warm, 2),
           "step_s": [round(t, 4) for t in times], "tok_per_s": round(B * L / min(times)),
           "loss": round(float(out["lm_loss"]), 5), "kl": round(float(out["kl"]), 5),
           "mem_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None}
    if profile and not a.no_profile:
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
        with torch.profiler.profile(activities=acts) as prof:
            t0 = time.time()
            step()
            sync()
            res["profiled_step_s"] = round(time.time() - t0, 3)
        ka = prof.key_averages()
        if cuda:
            kern = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            res["gpu_kernels"] = len(kern)
            res["gpu_busy_s"] = round(sum(e.device_time for e in kern) / 1e6, 3)
            sort_key = "self_cuda_time_total"
        else:
            res["cpu_ops"] = sum(e.count for e in ka)
            sort_key = "self_cpu_time_total"
        table = ka.table(sort_by=sort_key, row_limit=a.rows, max_name_column_width=70)
        counts = ka.table(sort_by="count", row_limit=12, max_name_column_width=70)
        if a.out:
            (a.out / f"prof_{variant}_{L}.txt").write_text(json.dumps(res) + "\n" + table + "\n" + counts)
        print(f"top operators by self time, {variant}, {B} x {L}:")
        print(table)
    print(json.dumps(res), flush=True)
    del model, opt
    if graphed:
        gs.release(opt=torch.optim.SGD([torch.zeros(1)], lr=0))
        del gs
    if cuda:
        torch.cuda.empty_cache()
    return res


if __name__ == "__main__":
    main()
