"""CPU tests of the Triton kernels' algorithms (kernels.emulate_*) against the model's PyTorch functions.

    cd training && python3 -m unittest discover -s tests_torch -v

Needs torch (CPU is enough; Debian's python3-torch 1.13 runs them), no GPU, no Triton. They are not part
of `tests/` (CPU tests without torch, run by scripts/test.mjs). About 10 s."""

import sys
import unittest
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from csa2_train import kernels as K  # noqa: E402
from csa2_train import model as M  # noqa: E402
from csa2_train import quant  # noqa: E402

BF16 = torch.bfloat16


def attn_case(B, S, H, D, N, T, seed, p_none=0.2):
    """Random q, kv, sink and local indices (-1 with probability p_none), and their global form."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B * S, H, D, generator=g).to(BF16)
    kv = torch.randn(B * N, D, generator=g).to(BF16)
    sink = torch.randn(H, generator=g)
    idx = torch.randint(0, N, (B * S, T), generator=g)
    idx[torch.rand(B * S, T, generator=g) < p_none] = -1
    off = (torch.arange(B * S) // S) * N
    gidx = torch.where(idx >= 0, idx + off.view(-1, 1), -1)
    return q, kv, sink, idx, gidx


def cosine(a, b):
    a, b = a.double().flatten(), b.double().flatten()
    return float(a @ b / (a.norm() * b.norm()).clamp_min(1e-300))


def within_one_ulp(a, b):
    """|a - b| <= 2^-7 x the largest magnitude of the (row, head)'s output vector: one bf16 ulp (8
    significant bits) at its scale. The probabilities' roundings perturb the whole weighted sum, so an
    element near zero can move by an ulp of the vector's scale, not of its own."""
    a, b = a.float(), b.float()
    scale = torch.maximum(a.abs(), b.abs()).amax(dim=-1, keepdim=True)
    return bool(((a - b).abs() <= scale * 2.0**-7).all())


class AttnForwardTest(unittest.TestCase):
    CASES = [  # (B, S, H, D, N, T): T below, at and above the 64-index block, the served heads and dims
        (2, 40, 4, 64, 60, 24),
        (2, 64, 4, 64, 600, 128),
        (1, 96, 4, 64, 500, 384),
        (2, 33, 3, 32, 70, 100),
        (1, 20, 16, 16, 30, 65),
    ]

    def test_running_max_equals_official_kernel_math(self):
        # without the row-max pass, the kernel's online softmax is the official kernel's (sparse_attn_exact)
        for i, (B, S, H, D, N, T) in enumerate(self.CASES):
            q, kv, sink, idx, _ = attn_case(B, S, H, D, N, T, i)
            o, _, _ = K.emulate_attn_forward(q, kv, sink, idx, D**-0.5, S, N, row_max=False)
            ref = M.sparse_attn_exact(q.view(B, S, H, D), kv.view(B, N, D), sink, idx.view(B, S, T).int(), D**-0.5)
            self.assertTrue(torch.equal(o, ref.reshape(B * S, H, D)), (B, S, H, D, N, T))

    def test_row_max_matches_attn_core(self):
        # with the row-max pass the probabilities are rounded as _attn_core rounds them: only the fp32
        # summation order differs, so nearly every output is identical and none is more than an ulp off
        for i, (B, S, H, D, N, T) in enumerate(self.CASES):
            q, kv, sink, idx, gidx = attn_case(B, S, H, D, N, T, 10 + i)
            o, _, _ = K.emulate_attn_forward(q, kv, sink, idx, D**-0.5, S, N)
            ref = M._attn_core(q, kv, sink, gidx, D**-0.5)
            self.assertTrue(within_one_ulp(o, ref), (B, S, H, D, N, T))
            self.assertGreater(float((o == ref).float().mean()), 0.995, (B, S, H, D, N, T))

    def test_running_max_matches_attn_core(self):
        # against the running max: at most one bf16 ulp apart, and identical when T <= 64 (one block)
        for i, (B, S, H, D, N, T) in enumerate(self.CASES):
            q, kv, sink, idx, gidx = attn_case(B, S, H, D, N, T, 10 + i)
            o, _, _ = K.emulate_attn_forward(q, kv, sink, idx, D**-0.5, S, N, row_max=False)
            ref = M._attn_core(q, kv, sink, gidx, D**-0.5)
            self.assertTrue(within_one_ulp(o, ref), (B, S, H, D, N, T))
            if T <= K.BLOCK_K:
                self.assertTrue(torch.equal(o, ref))

    def test_local_and_global_indices_agree(self):
        q, kv, sink, idx, gidx = attn_case(3, 20, 4, 64, 50, 70, 3)
        a = K.emulate_attn_forward(q, kv, sink, idx, 0.125, 20, 50, row_max=False)
        b = K.emulate_attn_forward(q, kv, sink, gidx, 0.125, row_max=False)
        for x, y in zip(a, b):
            self.assertTrue(torch.equal(x, y))

    def test_rows_without_keys(self):
        # a row with no valid index gives 0 (as _attn_core), never NaN
        q, kv, sink, idx, gidx = attn_case(1, 10, 4, 64, 20, 70, 4)
        idx[3] = -1
        gidx[3] = -1
        o, _, _ = K.emulate_attn_forward(q, kv, sink, idx, 0.125, 10, 20)
        ref = M._attn_core(q, kv, sink, gidx, 0.125)
        self.assertTrue(torch.isfinite(o.float()).all())
        self.assertTrue(torch.equal(o[3], torch.zeros_like(o[3])))
        self.assertTrue(within_one_ulp(o, ref))


class AttnBackwardTest(unittest.TestCase):
    def test_gradients_match_torch_paths(self):
        for i, (B, S, H, D, N, T) in enumerate(AttnForwardTest.CASES):
            q, kv, sink, idx, gidx = attn_case(B, S, H, D, N, T, 20 + i)
            g = torch.Generator().manual_seed(100 + i)
            d_o = torch.randn(B * S, H, D, generator=g).to(BF16)
            o, m, l = K.emulate_attn_forward(q, kv, sink, idx, D**-0.5, S, N)
            dq, dkv, dsink = K.emulate_attn_backward(q, kv, sink, idx, D**-0.5, o, m, l, d_o, S, N)
            for fn in (M._AttnCoreFast.apply, M._attn_core):
                qr, kvr, sr = q.clone().requires_grad_(), kv.clone().requires_grad_(), sink.clone().requires_grad_()
                fn(qr, kvr, sr, gidx, D**-0.5).backward(d_o)
                self.assertGreater(cosine(dq, qr.grad), 0.9999, (fn, B, S, H, D, N, T))
                self.assertGreater(cosine(dkv, kvr.grad), 0.9999, (fn, B, S, H, D, N, T))
                # dsink: the kernel takes dden from the bf16 output, the torch paths from fp32 ones
                self.assertLess(float((dsink - sr.grad).abs().max() / sr.grad.abs().max()), 1e-2, (fn, B, S, H, D, N, T))

    def test_gradients_against_float64(self):
        # the blocked backward is a gradient of the function: against float64 autograd of the softmax
        # without the bf16 rounding of the probabilities (their straight-through estimator's target)
        B, S, H, D, N, T = 1, 48, 4, 64, 200, 160
        q, kv, sink, idx, gidx = attn_case(B, S, H, D, N, T, 7)
        d_o = torch.randn(B * S, H, D, generator=torch.Generator().manual_seed(8)).to(BF16)
        o, m, l = K.emulate_attn_forward(q, kv, sink, idx, D**-0.5, S, N)
        dq, dkv, dsink = K.emulate_attn_backward(q, kv, sink, idx, D**-0.5, o, m, l, d_o, S, N)
        qd, kvd, sd = (t.double().requires_grad_() for t in (q, kv, sink))
        valid = gidx >= 0
        kg = kvd[gidx.clamp_min(0)]
        s = torch.einsum("nhd,ntd->nht", qd, kg) * D**-0.5
        s = s.masked_fill(~valid.unsqueeze(1), -torch.inf)
        mx = s.amax(-1, keepdim=True).detach()
        e = torch.exp(s - mx)
        den = e.sum(-1, keepdim=True) + torch.exp(sd.view(1, -1, 1) - mx)
        (torch.einsum("nht,ntd->nhd", e, kg) / den).backward(d_o.double())
        self.assertGreater(cosine(dq, qd.grad), 0.999)
        self.assertGreater(cosine(dkv, kvd.grad), 0.999)
        self.assertGreater(cosine(dsink, sd.grad), 0.999)


def index_case(B, S, HI, DI, ratio, seed, quantized=True):
    g = torch.Generator().manual_seed(seed)
    n = S // ratio
    q = torch.randn(B, S, HI, DI, generator=g).to(BF16)
    k = torch.randn(B, n + 5, DI, generator=g).to(BF16)[:, :n]  # a strided slice, as shared.index_k[:, :n]
    w = (torch.randn(B, S, HI, generator=g) * 0.1).to(BF16)
    if quantized:  # the model's index queries and keys are FP4 values
        q, k = quant._fp4_index_exact(q), quant._fp4_index_exact(k)
    return q, k, w, n


def torch_index_scores(q, k, w, ratio, candidates=None):
    """The torch path of Attention._indexer: Indexer.scores, the causal mask, the candidate mask."""
    S, n = q.size(1), k.size(1)
    clen = (torch.arange(1, S + 1) // ratio).unsqueeze(-1)
    score = M.Indexer.scores(q, k, w).masked_fill(torch.arange(n) >= clen, -torch.inf)
    if candidates is not None:
        score = score.masked_fill(~candidates, -torch.inf)
    return score


def keyed(x):
    """model._keyed_topk_bf16's keys."""
    v = x.masked_fill(x == 0, 0.0)
    b = v.view(torch.int16)
    m = torch.where(b < 0, b ^ 0x7FFF, b).to(torch.int32)
    return m * 65536 + (65535 - torch.arange(x.size(-1), dtype=torch.int32))


class IndexKeysTest(unittest.TestCase):
    CASES = [(2, 130, 4, 64, 1), (1, 200, 4, 64, 2), (2, 64, 2, 32, 1), (1, 90, 4, 64, 4)]

    def test_scores_and_keys_equal_torch_path(self):
        for i, (B, S, HI, DI, r) in enumerate(self.CASES):
            q, k, w, n = index_case(B, S, HI, DI, r, i)
            ref = torch_index_scores(q, k, w, r)
            sc = K.emulate_index_keys(q, k, w, r, keys=False)
            self.assertTrue(torch.equal(sc.float(), ref.float()), (B, S, HI, DI, r))
            keys = K.emulate_index_keys(q, k, w, r)
            self.assertTrue(torch.equal(keys, keyed(ref)), (B, S, HI, DI, r))

    def test_candidate_mask(self):
        B, S, HI, DI, r = 2, 150, 4, 64, 1
        q, k, w, n = index_case(B, S, HI, DI, r, 5)
        cand = torch.rand(B, S, n, generator=torch.Generator().manual_seed(6)) < 0.5
        ref = torch_index_scores(q, k, w, r, cand)
        self.assertTrue(torch.equal(K.emulate_index_keys(q, k, w, r, candidates=cand), keyed(ref)))

    def test_topk_of_keys_is_stable_topk(self):
        B, S, HI, DI, r = 1, 180, 4, 64, 1
        q, k, w, n = index_case(B, S, HI, DI, r, 9)
        w = w.masked_fill(torch.rand(w.shape, generator=torch.Generator().manual_seed(1)) < 0.3, 0.0)  # ties (zeros)
        ref = torch_index_scores(q, k, w, r)
        keys = K.emulate_index_keys(q, k, w, r)
        kk = 40
        got = torch.topk(keys, kk, dim=-1, sorted=False).indices.sort(-1).values
        want = torch.sort(ref, dim=-1, descending=True, stable=True).indices[..., :kk].sort(-1).values
        self.assertTrue(torch.equal(got, want))

    def test_unquantized_inputs(self):
        # arbitrary bf16 inputs: fp32 sums in another order can round differently, rarely
        q, k, w, n = index_case(1, 128, 4, 64, 1, 11, quantized=False)
        ref = torch_index_scores(q, k, w, 1)
        sc = K.emulate_index_keys(q, k, w, 1, keys=False)
        same = (sc.float() == ref.float()) | (torch.isinf(ref.float()) & torch.isinf(sc.float()))
        self.assertGreater(float(same.float().mean()), 0.999)


if __name__ == "__main__":
    unittest.main()
