"""Time and profile training steps of the mini model with torch.profiler, in several variants.

    python3 training/profile_step.py [--batch 2] [--seq-len 512] [--variants old,fast,graph] [--out DIR]

Variants: `old` = the reference code paths (model.set_fast(False), eager), `fast` = the fast
paths (keyed top-k), eager, `graph` = the fast paths with the whole step replayed as a CUDA graph
(train.GraphStep; GPU only). For each: one warm-up step, timed steps (--steps), then one profiled step:
the number of GPU kernels (CPU: operator calls) per step, the GPU's busy time, and the top operators
by self time. Random token ids (the cost does not depend on the text). Writes the tables under --out.
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
    a = ap.parse_args()
    from train import GraphStep, set_lr, train_step  # noqa: E402

    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cuda = dev.type == "cuda"
    args = ModelArgs.load(a.config)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, args.vocab_size, (a.batch, a.seq_len), generator=g).to(dev)
    am = torch.zeros_like(ids, dtype=torch.bool)
    am[:, -8:-2] = True
    ctx_kw = dict(train=True, kl_rows=128, ckpt_blocks=True, attn_chunk_tokens=16384)
    summary = []
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    for variant in a.variants.split(","):
        if variant == "graph" and not cuda:
            continue
        torch.manual_seed(0)
        model = M.Transformer(args).to(dev)
        model.init_weights(1)
        model.train()
        M.set_fast(variant != "old")
        graphed = variant == "graph"
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
        res = {"variant": variant, "device": str(dev), "batch": a.batch, "seq_len": a.seq_len, "warmup_s": round(t_warm, 2),
               "step_s": [round(t, 4) for t in times], "tok_per_s": round(a.batch * a.seq_len / min(times)),
               "loss": round(float(out["lm_loss"]), 5), "kl": round(float(out["kl"]), 5),
               "mem_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None}
        if not a.no_profile:
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
                (a.out / f"prof_{variant}.txt").write_text(json.dumps(res) + "\n" + table + "\n" + counts)
            print(table[:1500])
        print(json.dumps(res), flush=True)
        summary.append(res)
        del model, opt
        if graphed:
            gs.release(opt=torch.optim.SGD([torch.zeros(1)], lr=0))
            del gs
        if cuda:
            torch.cuda.empty_cache()
    print("\nvariant  step_s  tok/s  kernels  gpu_busy_s  mem_gb  loss")
    for r in summary:
        print(f"{r['variant']:7s} {min(r['step_s']):7.3f} {r['tok_per_s']:7d} {r.get('gpu_kernels', r.get('cpu_ops'))} {r.get('gpu_busy_s')} {r['mem_gb']} {r['loss']}")
    if a.out:
        (a.out / "profile_summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
