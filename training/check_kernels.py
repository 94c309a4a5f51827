"""Check the Triton kernels (csa2_train/kernels.py) against the PyTorch paths on a CUDA GPU.

    python3 training/check_kernels.py [--quick] [--skip-step]

Prints one table row per case and a verdict; exits 1 when a case fails or raises (each case runs on
its own: an error is printed and the other cases still run). Expected to take 1-2 minutes on an H100
(an estimate, not yet timed).

Cases and criteria (fixed before any GPU result was seen):
- attention forward (`sparse_attn_train` with set_kernels triton against torch, i.e. _AttnCoreFast), at a
  small size and at the served model's shapes (4 heads, head dim 64, window 128 + top-k 256 = 384
  indices a row; ratio 1 and 2 layers at 4K tokens, ratio 1 at 32K tokens, batch 2) with the real window
  indices, random sorted top-k indices, -1 entries and one key every row selects (atomic contention):
  (a) per (row, head) output vector, max |o_triton - o_torch| <= 2^-6 x its largest magnitude: two bf16
      ulps at the vector's scale. With the row-max pass (kernels.ATTN_ROW_MAX, the default) the two
      paths round the same probabilities and differ only in fp32 summation order; without it (one case,
      "running max") the probabilities are rounded against the running max of 64-index blocks, as the
      official kernel. On the CPU the kernel's algorithm and _attn_core differ by at most one such ulp
      either way (tests_torch); the second ulp covers the GPU's summation order.
  (b) accuracy: the RMS error of the Triton output against a float64 evaluation of the function (no
      rounding of the probabilities) <= 1.25 x the torch path's RMS error: the kernel is as accurate as
      the path it replaces.
- attention backward: cosine >= 0.999 of dq, dkv and dsink against the torch path (an upstream gradient
  of random bf16 values).
- indexer keys (kernels.index_keys against Indexer.scores + causal mask [+ candidate mask] + the keyed
  top-k's keys, on FP4-quantized queries and keys as the model's): the products of FP4 values are exact
  and their fp32 sums exact unless the two 32-value halves' scales are 2^11 apart, so the keys are
  expected bitwise equal: >= 99.999% of the keys equal and >= 99.99% of the rows' top-k sets equal.
- a whole training step of the served model (models/v41-mini-128k, its config and weights; --random-init:
  seed-1 initial weights instead) at 4K random tokens (batch 1, the training's Ctx: indexer KL on 128
  rows, checkpointed blocks, train.train_step without the optimizer's update). A step can be chaotic at
  the scale of bf16 roundings: MoE routing and top-k selections flip when an activation moves by one ulp
  (on the CPU, from random init, one-ulp changes of 6 attention outputs a layer at 512 tokens moved the
  cosine of all gradients to 0.998 and single tensors' cosines down to 0.24), so a per-tensor cosine of
  two runs whose forwards differ by any rounding is not by itself a test of the kernels. The criteria:
  (a) per layer, on the step's own attention inputs (its window and top-k indices): the
      forward within (a) above and dq, dkv, dsink at cosine >= 0.999;
  (b) the loss within max(1e-3 x loss, 4 x |loss of the torch path with one-ulp changes at the same
      share of its attention outputs as the Triton path changes - torch loss|);
  (c) the gradient of all parameters together at cosine >= 0.999 against the torch path, or no
      further from it (in norm) than 3 x the one-ulp-perturbed torch path is. The tensors' cosines
      are listed (the lowest five, and how many reach 0.999 in each run).
"""

import argparse
import math
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from csa2_train import kernels as K  # noqa: E402
from csa2_train import model as M  # noqa: E402
from csa2_train import quant  # noqa: E402
from csa2_train.config import ModelArgs  # noqa: E402

HERE = Path(__file__).resolve().parent
BF16 = torch.bfloat16
ROWS = []
DEV = "cuda"


def report(case, ok, **figs):
    ROWS.append((case, ok, figs))
    shown = "  ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in figs.items())
    print(f"{'PASS' if ok else 'FAIL'}  {case:38s} {shown}", flush=True)


def run_case(name, fn):
    t0 = time.time()
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - one failing case must not hide the others
        traceback.print_exc()
        report(name, False, error=repr(e)[:200])
    finally:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    print(f"      ({time.time() - t0:.1f} s)", flush=True)


def cosine(a, b):
    a, b = a.double().flatten(), b.double().flatten()
    return float(a @ b / (a.norm() * b.norm()).clamp_min(1e-300))


# --- attention --------------------------------------------------------------------------------------


def attn_inputs(B, S, H, D, ratio, topk, seed, dev):
    """q [B, S, H, D], kv [B, N, D] (the window keys then the compressed ones, as Attention.forward's
    kv_all), sink [H], idx [B, S, T] int64: the window indices of window_topk_idxs, then per row the
    sorted random top-k of its visible compressed entries (+S), slot 0 always entry 0 (every row
    selects it), -1 where a row sees fewer."""
    g = torch.Generator(device=dev).manual_seed(seed)
    nc = S // ratio if ratio else 0
    N = S + nc
    q = torch.randn(B, S, H, D, device=dev, generator=g).to(BF16)
    kv = torch.randn(B, N, D, device=dev, generator=g).to(BF16)
    sink = torch.randn(H, device=dev, generator=g)
    win = M.window_topk_idxs(128, S, dev).unsqueeze(0).expand(B, -1, -1)
    if not ratio:
        return q, kv, sink, win
    k = min(topk, nc)
    clen = (torch.arange(1, S + 1, device=dev) // ratio).view(1, S, 1)
    raw = (torch.rand(B, S, k, device=dev, generator=g) * clen).long()
    raw[..., 0] = 0
    raw = raw.sort(dim=-1).values
    raw = torch.where(torch.arange(k, device=dev).view(1, 1, k) < clen, raw, -1)
    sel = torch.where(raw >= 0, raw + S, -1)
    return q, kv, sink, torch.cat([win, sel], dim=-1)


def attn_f64(q, kv, sink, idx, scale, chunk=4096):
    """The function in float64 (probabilities not rounded), chunk by chunk: [B, S, H, D] float64."""
    B, S, H, D = q.shape
    out = torch.empty(B, S, H, D, dtype=torch.float64, device=q.device)
    for b in range(B):
        for i in range(0, S, chunk):
            ii = idx[b, i : i + chunk]
            valid = ii >= 0
            kg = kv[b].double()[ii.clamp_min(0)]
            s = torch.einsum("nhd,ntd->nht", q[b, i : i + chunk].double(), kg) * scale
            s = s.masked_fill(~valid.unsqueeze(1), -torch.inf)
            m = s.amax(-1, keepdim=True).clamp_min(-1e30)
            e = torch.exp(s - m)
            den = e.sum(-1, keepdim=True) + torch.exp(sink.double().view(1, -1, 1) - m)
            out[b, i : i + chunk] = torch.einsum("nht,ntd->nhd", e, kg) / den
    return out


def attn_run(mode, q, kv, sink, idx, scale, d_o):
    M.set_kernels(mode)
    qr, kvr, sr = q.clone().requires_grad_(), kv.clone().requires_grad_(), sink.clone().requires_grad_()
    torch.cuda.synchronize()
    t0 = time.time()
    o = M.sparse_attn_train(qr, kvr, sr, idx, scale, 16384)
    o.backward(d_o)
    torch.cuda.synchronize()
    return o.detach(), qr.grad, kvr.grad, sr.grad, time.time() - t0


def attn_case(name, B, S, ratio, seed, H=4, D=64, topk=256, row_max=True):
    def fn():
        K.ATTN_ROW_MAX = row_max
        dev = torch.device(DEV)
        q, kv, sink, idx = attn_inputs(B, S, H, D, ratio, topk, seed, dev)
        scale = D**-0.5
        d_o = torch.randn(q.shape, device=dev, generator=torch.Generator(device=dev).manual_seed(seed + 1)).to(BF16)
        attn_run("triton", q, kv, sink, idx, scale, d_o)  # compile / warm up
        o_t, dq_t, dkv_t, ds_t, sec_t = attn_run("triton", q, kv, sink, idx, scale, d_o)
        o_r, dq_r, dkv_r, ds_r, sec_r = attn_run("torch", q, kv, sink, idx, scale, d_o)
        ref = attn_f64(q, kv, sink, idx, scale)
        vec = torch.maximum(o_t.float().abs(), o_r.float().abs()).amax(-1, keepdim=True)
        rel = float(((o_t.float() - o_r.float()).abs() / vec.clamp_min(1e-30)).max())
        err_t = float((o_t.double() - ref).square().mean().sqrt())
        err_r = float((o_r.double() - ref).square().mean().sqrt())
        cq, ckv, cs = cosine(dq_t, dq_r), cosine(dkv_t, dkv_r), cosine(ds_t, ds_r)
        ok_f = rel <= 2.0**-6 and err_t <= 1.25 * err_r + 1e-12
        ok_b = min(cq, ckv, cs) >= 0.999
        finite = all(bool(torch.isfinite(t.float()).all()) for t in (o_t, dq_t, dkv_t, ds_t))
        report(name + " fwd", ok_f and finite, max_rel=rel, rms_tri=err_t, rms_torch=err_r, T=idx.size(-1))
        report(name + " bwd", ok_b and finite, cos_dq=cq, cos_dkv=ckv, cos_dsink=cs, s_triton=sec_t, s_torch=sec_r)

    run_case(name, fn)
    K.ATTN_ROW_MAX = True


# --- indexer keys ------------------------------------------------------------------------------------


def torch_keys(q, k, w, ratio, cand, chunk=2048):
    """The torch path's masked scores and keyed top-k keys, [B, S, n] (row chunks, to bound memory)."""
    B, S = q.shape[:2]
    n = k.size(1)
    outs, scores = [], []
    for i in range(0, S, chunk):
        clen = (torch.arange(i + 1, min(S, i + chunk) + 1, device=q.device) // ratio).unsqueeze(-1)
        s = M.Indexer.scores(q[:, i : i + chunk], k, w[:, i : i + chunk])
        s = s.masked_fill(torch.arange(n, device=q.device) >= clen, -torch.inf)
        if cand is not None:
            s = s.masked_fill(~cand[:, i : i + chunk], -torch.inf)
        v = s.masked_fill(s == 0, 0.0)
        b = v.view(torch.int16)
        m = torch.where(b < 0, b ^ 0x7FFF, b).to(torch.int32)
        outs.append(m * 65536 + (65535 - torch.arange(n, device=q.device, dtype=torch.int32)))
        scores.append(s)
    return torch.cat(scores, 1), torch.cat(outs, 1)


def index_case(name, B, S, ratio, seed, with_cand=False, HI=4, DI=64, topk=256):
    def fn():
        dev = torch.device(DEV)
        g = torch.Generator(device=dev).manual_seed(seed)
        n = S // ratio
        q = quant.fp4_index(torch.randn(B, S, HI, DI, device=dev, generator=g).to(BF16))
        kfull = quant.fp4_index(torch.randn(B, n + 7, DI, device=dev, generator=g).to(BF16))
        k = kfull[:, :n]  # a strided slice, as shared.index_k[:, :n]
        w = (torch.randn(B, S, HI, device=dev, generator=g) * HI**-0.5 * DI**-0.5).to(BF16)
        cand = None
        if with_cand:  # blocks of 8 entries, about half of them kept
            blocks = torch.rand(B, S, (n + 7) // 8, device=dev, generator=g) < 0.5
            cand = blocks.unsqueeze(-1).expand(B, S, blocks.size(-1), 8).flatten(-2)[..., :n].contiguous()
        K.index_keys(q, k, w, ratio, cand)  # compile / warm up
        torch.cuda.synchronize()
        t0 = time.time()
        keys_t = K.index_keys(q, k, w, ratio, cand)
        torch.cuda.synchronize()
        sec_t = time.time() - t0
        score_t = K.index_keys(q, k, w, ratio, cand, keys=False)
        torch.cuda.synchronize()
        t0 = time.time()
        score_r, keys_r = torch_keys(q, k, w, ratio, cand)
        torch.cuda.synchronize()
        sec_r = time.time() - t0
        eq_keys = int((keys_t == keys_r).sum()) / keys_t.numel()
        eq_score = int((score_t == score_r).sum()) / score_t.numel()  # -inf == -inf holds
        del score_t
        kk = min(topk, n)
        sel_t = torch.topk(keys_t, kk, dim=-1, sorted=False).indices.sort(-1).values
        del keys_t, keys_r
        sel_r = M._keyed_topk_bf16(score_r, kk).sort(-1).values
        eq_rows = int((sel_t == sel_r).all(-1).sum()) / (B * S)
        ok = eq_keys >= 0.99999 and eq_rows >= 0.9999 and eq_score >= 0.99999
        report(name, ok, keys_equal=eq_keys, scores_equal=eq_score, topk_rows_equal=eq_rows, s_triton=sec_t, s_torch=sec_r)

    run_case(name, fn)


# --- a whole training step ------------------------------------------------------------------------------


class _NoStep:
    """An optimizer that leaves the weights alone (train_step's zero_grad / step), so the gradients stay readable."""

    def __init__(self, model):
        self.model = model
        self.param_groups = []

    def zero_grad(self, set_to_none=True):
        self.model.zero_grad(set_to_none=set_to_none)

    def step(self):
        pass


def _fingerprint(t: torch.Tensor) -> int:
    """A seed from a tensor's values (the same in a forward and in its recomputation)."""
    return int(t.float().abs().sum().item() * 1024) % (2**31)


def step_case(name, seq_len, seed=0, random_init=False):
    def fn():
        from train import load_weights, train_step  # noqa: E402

        dev = torch.device(DEV)
        served = HERE.parent / "models" / "v41-mini-128k"
        args = ModelArgs.load(HERE / "configs" / "v41-mini-128k.json")
        model = M.Transformer(args).to(dev)
        if random_init:
            model.init_weights(1)
        else:
            model.load_official({k: v.to(dev) for k, v in load_weights(served).items()})
        model.train()
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(3, args.vocab_size, (1, seq_len), generator=g).to(dev)
        am = torch.zeros_like(ids, dtype=torch.bool)
        am[:, -8:-2] = True
        ctx_kw = dict(train=True, kl_rows=128, ckpt_blocks=True, attn_chunk_tokens=16384)
        opt = _NoStep(model)
        orig = M.sparse_attn_train
        calls, frac = [], {}

        def capture(q, kv, sink, idx, scale, chunk):  # the forward's calls (one a layer), for the per-call checks
            if len(calls) < args.n_layers:
                calls.append(tuple(t.detach().clone() for t in (q, kv, sink, idx)) + (scale,))
            return orig(q, kv, sink, idx, scale, chunk)

        def perturb(q, kv, sink, idx, scale, chunk):  # the torch path with one-ulp changes at a share f of the outputs
            o = orig(q, kv, sink, idx, scale, chunk)
            gg = torch.Generator(device=o.device).manual_seed(_fingerprint(q))
            sel = torch.rand(o.shape, device=o.device, generator=gg) < frac["f"]
            return torch.where(sel, (o.float() * (1 + 2.0**-7)).to(o.dtype), o)

        def run(kmode, wrapper):
            M.set_kernels(kmode)
            M.sparse_attn_train = wrapper or orig
            try:
                torch.manual_seed(seed)  # the indexer KL's random rows
                torch.cuda.synchronize()
                t0 = time.time()
                out = train_step(model, opt, ids, am, ctx_kw, 1.0, None)
                torch.cuda.synchronize()
                sec = time.time() - t0
            finally:
                M.sparse_attn_train = orig
            grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
            return float(out["lm_loss"]), float(out["kl"]), grads, sec

        lt, kt, gt, st = run("triton", capture)
        lr_, kr, gr, sr = run("torch", None)
        # per call, on the step's real inputs: the Triton attention against the torch one
        worst_rel, worst_share, worst_cos = 0.0, 0.0, 1.0
        for i, (q, kv, sink, idx, scale) in enumerate(calls):
            d_o = torch.randn(q.shape, device=dev, generator=torch.Generator(device=dev).manual_seed(i)).to(BF16)
            res = {}
            for kmode in ("triton", "torch"):
                M.set_kernels(kmode)
                qr, kvr, sr_ = q.clone().requires_grad_(), kv.clone().requires_grad_(), sink.clone().requires_grad_()
                o = orig(qr, kvr, sr_, idx, scale, 16384)
                o.backward(d_o)
                res[kmode] = (o.detach(), qr.grad, kvr.grad, sr_.grad)
            a, b = res["triton"], res["torch"]
            vec = torch.maximum(a[0].float().abs(), b[0].float().abs()).amax(-1, keepdim=True).clamp_min(1e-30)
            worst_rel = max(worst_rel, float(((a[0].float() - b[0].float()).abs() / vec).max()))
            worst_share = max(worst_share, float((a[0] != b[0]).float().mean()))
            worst_cos = min(worst_cos, *(cosine(x, y) for x, y in zip(a[1:], b[1:])))
        report(f"{name} per-layer attention", worst_rel <= 2.0**-6 and worst_cos >= 0.999, calls=len(calls),
               max_rel=worst_rel, share_differing=worst_share, min_grad_cos=worst_cos)
        frac["f"] = max(worst_share, 1e-6)
        lp, _, gp, _ = run("torch", perturb)
        M.set_kernels("auto")
        names = [n for n in gr if n in gt and n in gp]
        missing = [n for n in gr if n not in gt]

        def flat(gd):
            return torch.cat([gd[n].flatten().double() for n in names])

        cos_t, cos_p = cosine(flat(gt), flat(gr)), cosine(flat(gp), flat(gr))
        d_t, d_p = float((flat(gt) - flat(gr)).norm()), float((flat(gp) - flat(gr)).norm())
        tol = max(1e-3 * abs(lr_), 4 * abs(lp - lr_))
        ok_loss = abs(lt - lr_) <= tol and math.isfinite(lt)
        report(f"{name} loss", ok_loss, loss_triton=lt, loss_torch=lr_, loss_torch_perturbed=lp, tol=tol, kl_triton=kt, kl_torch=kr)
        report(f"{name} grads", not missing and (cos_t >= 0.999 or d_t <= 3 * d_p), all_params_cos=cos_t,
               perturbed_cos=cos_p, diff_norm=d_t, perturbed_diff_norm=d_p, s_triton=st, s_torch=sr)
        per = sorted((cosine(gt[n], gr[n]), cosine(gp[n], gr[n]), n) for n in names if gr[n].norm() > 0)
        print(f"      tensors at cosine >= 0.999: triton {sum(c >= 0.999 for c, _, _ in per)}/{len(per)}, "
              f"perturbed torch {sum(c >= 0.999 for _, c, _ in per)}/{len(per)}; the lowest (triton, perturbed torch):")
        for c, cp, n in per[:5]:
            print(f"      {c:.6f}  {cp:.6f}  {n}")
        for n in missing:
            print(f"      FAIL {n}: no gradient on the triton path")
        del model

    run_case(name, fn)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the small cases and the 4K ones only (no 32K)")
    ap.add_argument("--skip-step", action="store_true", help="no whole-step case")
    ap.add_argument("--random-init", action="store_true", help="the whole step from seed-1 initial weights instead of the served model's")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("verdict: FAIL (no CUDA device)")
        sys.exit(1)
    torch.backends.cuda.matmul.allow_tf32 = True
    import platform

    tv = getattr(K.triton, "__version__", None)
    print(f"GPU {torch.cuda.get_device_name()}  torch {torch.__version__}  triton {tv}  python {platform.python_version()}")
    if not K.available():
        print(f"verdict: FAIL (kernels unavailable: {K.why()})")
        sys.exit(1)
    t0 = time.time()
    M.set_fast(True)
    attn_case("attn small B2 S300 r2", 2, 300, 2, 1, topk=40)
    attn_case("attn small B3 S200 H3 D32 r1", 3, 200, 1, 2, H=3, D=32, topk=100)
    attn_case("attn 4K window only (r0, T128)", 1, 4096, 0, 3)
    attn_case("attn 4K r2 (T384)", 1, 4096, 2, 4)
    attn_case("attn 4K r1 (T384)", 1, 4096, 1, 5)
    if not a.quick:
        attn_case("attn 32K B2 r1 (T384)", 2, 32768, 1, 6)
    attn_case("attn 4K r1 (T384) running max", 1, 4096, 1, 13, row_max=False)
    index_case("index small B2 S300 r1", 2, 300, 1, 7, topk=64)
    index_case("index small B2 S300 r2 +cand", 2, 300, 2, 8, with_cand=True, topk=64)
    index_case("index 4K r2", 1, 4096, 2, 9)
    index_case("index 4K r1 +cand", 1, 4096, 1, 10, with_cand=True)
    if not a.quick:
        index_case("index 32K r1", 1, 32768, 1, 11)
        index_case("index 32K r1 +cand", 1, 32768, 1, 12, with_cand=True)
    if not a.skip_step:
        step_case("step served model 4K" if not a.random_init else "step served config 4K (random init)", 4096, random_init=a.random_init)
    M.set_kernels("auto")
    n_fail = sum(1 for _, ok, _ in ROWS if not ok)
    print(f"\n{len(ROWS)} checks, {n_fail} failed, {time.time() - t0:.0f} s")
    print(f"verdict: {'PASS' if n_fail == 0 and ROWS else 'FAIL'}")
    sys.exit(0 if n_fail == 0 and ROWS else 1)


if __name__ == "__main__":
    main()
