"""The DeepSeek-V4.1 (CSA2) network exactly as csa2-core serves it, for training and for checks.

Same function as the official `inference/model.py` (revision dba1be0a): hyper-connections with the
Sinkhorn split, MoE with the sqrt-softplus gate, shared expert and clamped SwiGLU, CSA2 attention
(sliding window + compressor + indexer top-k + the layer-20 candidate pool + attention sink), the
Full / Reindex / Reuse schedule with the causal encoder-decoder split, YaRN RoPE as configured, and the
served numerics: bf16 activations where the reference holds bf16, fp32 where it keeps fp32, and the
KV-side fake quantization (quant.py; straight-through gradients when training).

Parameters carry the official state_dict names (`layers.{i}.attn.compressor.wkv.weight`, ...), so
`official_state_dict()` is a checkpoint csa2-core loads unchanged. They are held in fp32 (the
optimizer's master copy) and rounded to the served dtype at use: bf16 for every weight the reference
holds in bf16, or whose checkpoint it loads from bf16 (head, ratio-2 compressor); fp32 for hc_*,
attn_sink and the gate bias. A bf16 checkpoint loaded here therefore runs with exactly its served values.

`Transformer.forward(ids)` is the reference's prefill (`start_pos == 0`) for a batch of sequences,
returning the logits of every position (training) or, through `decode.py`, the stateful decode.

Kernels (`set_kernels`): on a CUDA device with Triton, the sparse attention and the indexer's scoring
run as the Triton kernels of kernels.py (same function: with kernels.ATTN_ROW_MAX, the default, the
attention's probabilities are rounded against the row max as in the PyTorch paths; off, against the
running max block by block, as the official kernel), and a checkpointed block's recomputation reuses the
indexer's selection of the forward; `set_kernels("torch")` keeps the PyTorch paths below.

Numerics modes:
- default (training): bf16 GEMMs (fp32 accumulation), the attention's softmax over gathered keys with
  the row max instead of the kernel's block-wise running max (recomputed in backward, chunk by chunk).
  Same function and selections; only summation order differs from the reference.
- `exact_numerics()`: every GEMM accumulated in float64 and rounded once to the reference's dtype, the
  sparse attention as the official kernel (online softmax over blocks of 64 indices, probabilities
  rounded to bf16 against the running max), stable top-k ties (higher score, then lower index), complex
  RoPE. This is the mode `verify_tiny_a.py` checks against the official golden outputs.
"""

import math
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from . import kernels, quant
from .config import ModelArgs

BF16 = torch.bfloat16
F32 = torch.float32

_EXACT = False


@contextmanager
def exact_numerics(enabled: bool = True):
    """Reference-faithful numerics (see module doc) for checks; slow, CPU-friendly."""
    global _EXACT
    prev = _EXACT
    _EXACT = enabled
    try:
        yield
    finally:
        _EXACT = prev


def bf(w: torch.Tensor) -> torch.Tensor:
    return w.to(BF16)


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x @ w^T in x's dtype (w already in the served dtype). Exact mode: float64 accumulation, one rounding."""
    if _EXACT:
        return (x.double() @ w.double().T).to(F32).to(x.dtype)
    if x.device.type == "cpu" and x.dtype == BF16:  # CPU bf16 GEMMs do not accumulate in fp32; GPU ones do
        return F.linear(x.float(), w.float()).to(BF16)
    return F.linear(x, w.to(x.dtype))


def einsum(eq: str, a: torch.Tensor, b: torch.Tensor, out_dtype=None) -> torch.Tensor:
    out_dtype = out_dtype or a.dtype
    if _EXACT:
        return torch.einsum(eq, a.double(), b.double()).to(F32).to(out_dtype)
    if a.device.type == "cpu" and a.dtype == BF16:
        return torch.einsum(eq, a.float(), b.float()).to(out_dtype)
    return torch.einsum(eq, a, b).to(out_dtype)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    xf = x.float()
    xf = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    return (bf(w).float() * xf).to(dtype)


def stable_topk_indices(x: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k largest along the last dim; ties: the lower index first, as csa2-core and the
    fixture's tie rule (torch.topk's choice among equal values is unspecified). Used in training too:
    bf16 index scores tie often (exact zeros when ReLU zeroes every head), and the served selection is
    the one the model should learn."""
    if _FAST and x.dtype == BF16 and x.size(-1) <= 65536:
        return _keyed_topk_bf16(x, k)
    return torch.sort(x, dim=-1, descending=True, stable=True).indices[..., :k]


def _keyed_topk_bf16(x: torch.Tensor, k: int) -> torch.Tensor:
    """stable_topk_indices of a bf16 tensor (last dim <= 65,536) by one torch.topk over int32 keys
    instead of a stable sort of the whole row (the sort of every [B, S, N] index-score matrix was a
    hot spot).

    Each bf16 value v at index j becomes the int32 m(v) * 65536 + (65535 - j), where m maps the bf16
    bit pattern to an int16 in the order of the values (negative patterns have their magnitude bits
    flipped; -0 is first made +0, an equal value). The keys are distinct, ordered as v, and equal values
    order by the lower index first: exactly the stable descending sort's order, infinities included."""
    n = x.size(-1)
    v = x.masked_fill(x == 0, 0.0)  # -0 -> +0
    b = v.view(torch.int16)
    m = torch.where(b < 0, b ^ 0x7FFF, b).to(torch.int32)
    j = torch.arange(n, device=x.device, dtype=torch.int32)
    keys = m * 65536 + (65535 - j)
    return torch.topk(keys, k, dim=-1, largest=True, sorted=True).indices


# --- RoPE -----------------------------------------------------------------------------------------


def precompute_freqs_cis(dim, seqlen, original_seq_len, base, factor, beta_fast, beta_slow) -> torch.Tensor:
    """As the reference (including high = min(ceil(.), dim - 1)); complex64 [seqlen, dim/2]."""
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=F32) / dim))
    if original_seq_len > 0:

        def corrected_dim(rotations):
            return dim * math.log(original_seq_len / (rotations * 2 * math.pi)) / (2 * math.log(base))

        low = max(math.floor(corrected_dim(beta_fast)), 0)
        high = min(math.ceil(corrected_dim(beta_slow)), dim - 1)
        ramp = ((torch.arange(dim // 2, dtype=F32) - low) / max(high - low, 1e-3)).clamp(0, 1)
        smooth = 1 - ramp
        freqs = freqs / factor * (1 - smooth) + freqs * smooth
    freqs = torch.outer(torch.arange(seqlen), freqs)
    return torch.polar(torch.ones_like(freqs), freqs)


def rope_tail(x: torch.Tensor, freqs: torch.Tensor, rd: int, inverse: bool = False) -> torch.Tensor:
    """Rotate the last rd dims of x (adjacent pairs as complex numbers) by freqs [S, rd/2] (complex64).

    x: [B, S, rd..] or [B, S, H, ..]. Returns a new tensor in x's dtype (the reference rotates in place)."""
    head, tail = x[..., :-rd], x[..., -rd:]
    f = freqs.conj() if inverse else freqs
    shape = (1, x.size(1), 1, rd // 2) if x.ndim == 4 else (1, x.size(1), rd // 2)
    f = f.view(shape)
    if _EXACT:
        t = torch.view_as_complex(tail.float().unflatten(-1, (-1, 2)).contiguous())
        t = torch.view_as_real(t * f).flatten(-2)
    else:
        t = tail.float().unflatten(-1, (-1, 2))
        a, b = t[..., 0], t[..., 1]
        c, s = f.real, f.imag
        t = torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)
    return torch.cat([head, t.to(x.dtype)], dim=-1)


# --- hyper-connections ------------------------------------------------------------------------------


def hc_split_sinkhorn(mixes, hc_scale, hc_base, hc: int, iters: int, eps: float):
    """pre / post / Sinkhorn comb from the hc mixes, all fp32 (reference kernel, same op order)."""
    m = mixes.float()
    pre = torch.sigmoid(m[..., :hc] * hc_scale[0] + hc_base[:hc]) + eps
    post = 2 * torch.sigmoid(m[..., hc : 2 * hc] * hc_scale[1] + hc_base[hc : 2 * hc])
    comb = (m[..., 2 * hc :] * hc_scale[2] + hc_base[2 * hc :]).unflatten(-1, (hc, hc))
    comb = torch.exp(comb - comb.amax(dim=-1, keepdim=True))
    comb = comb / comb.sum(dim=-1, keepdim=True) + eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    return pre, post, comb


_SINKHORN = hc_split_sinkhorn
_COMPILE_FAILED = []


def safe_compile(f):
    """torch.compile(f), falling back to f for good at the first error (logged in compile_failed())."""
    compiled = torch.compile(f, dynamic=True)
    state = {"ok": True}

    def g(*args, **kw):
        if state["ok"]:
            try:
                return compiled(*args, **kw)
            except Exception as e:  # noqa: BLE001
                state["ok"] = False
                _COMPILE_FAILED.append(f"{f.__name__}: {e!r}"[:300])
        return f(*args, **kw)

    return g


_FAST = False
_FAST_ATTN = False


def set_fast(enabled: bool, attn: bool | None = None) -> None:
    """The fast training paths (same values up to summation order; see the notes at each use): the
    keyed top-k (stable_topk_indices) and, unless attn is False, _AttnCoreFast for the sparse attention."""
    global _FAST, _FAST_ATTN
    _FAST = enabled
    _FAST_ATTN = enabled if attn is None else attn


_KERNELS = "auto"


def set_kernels(mode: str) -> None:
    """The sparse attention's and the indexer's implementation on CUDA tensors: "triton" (kernels.py;
    an error when Triton or CUDA is missing), "torch" (the PyTorch paths), or "auto" (the default:
    triton where it can run). CPU tensors and exact_numerics() always take the PyTorch paths."""
    global _KERNELS
    if mode not in ("auto", "triton", "torch"):
        raise ValueError(f"kernels: {mode!r} (auto, triton or torch)")
    if mode == "triton" and not kernels.available():
        raise RuntimeError(f"kernels triton: {kernels.why()}")
    _KERNELS = mode


def kernels_mode() -> str:
    """What CUDA tensors get now: "triton" or "torch"."""
    return "triton" if _KERNELS != "torch" and kernels.available() else "torch"


def _triton_for(t: torch.Tensor) -> bool:
    return t.is_cuda and not _EXACT and _KERNELS != "torch" and kernels.available()


def compile_failed() -> list:
    return list(_COMPILE_FAILED)


def set_compiled(enabled: bool) -> None:
    """torch.compile the launch-heavy elementwise pieces (Sinkhorn, quantizers). Same values."""
    global _SINKHORN
    _SINKHORN = safe_compile(hc_split_sinkhorn) if enabled else hc_split_sinkhorn
    quant.set_compiled(enabled)


def hc_pre(x: torch.Tensor, pre: torch.Tensor) -> torch.Tensor:
    return torch.sum(pre.unsqueeze(-1) * x.float(), dim=2).to(x.dtype)


def hc_post(x, residual, post, comb):
    y = post.unsqueeze(-1) * x.unsqueeze(-2) + torch.sum(comb.unsqueeze(-1) * residual.unsqueeze(-2), dim=2)
    return y.type_as(x)


# --- modules holding the official parameter names ---------------------------------------------------


class Lin(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=F32))


class Norm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, dtype=F32))


@dataclass
class Shared:
    """The reference's SharedAttentionRuntime slots, for one forward over a batch."""

    compress_kv: torch.Tensor | None = None
    index_k: torch.Tensor | None = None
    topk_idxs: torch.Tensor | None = None
    candidates: torch.Tensor | None = None


@dataclass
class Ctx:
    """Per-forward options and outputs."""

    train: bool = False
    kl_rows: int = 0  # query rows per sequence for the indexer KL (0 = no KL)
    kl_extra: int = 64  # random visible entries added to the selected ones in the KL support
    attn_chunk_tokens: int = 8192
    ckpt_blocks: bool = False  # activation checkpointing per block (recomputed in backward)
    capture: dict | None = None  # verification: per-layer tensors, named as in golden.safetensors
    state: dict | None = None  # decode.py: the caches a prefill leaves behind (per layer id, and "shared")
    kl_losses: list = field(default_factory=list)
    kl_rand: dict = field(default_factory=dict)
    # decoder-replay simulation: per sequence the first replayed position p (tensor [B], long; 0 = exact).
    # The decoder layers' windows of rows >= p start at p, as after csa2-serve's bounded replay of the
    # last R = P - p prompt tokens (the encoder layers and the global caches are exact there too).
    replay_start: torch.Tensor | None = None  # layer id -> the KL's random draws (reused by recomputation)
    indexer_stats: list = field(default_factory=list)
    # needle focus (train.needle_spans): per sequence (query row, needle lo, needle hi) as three long
    # tensors [B], row -1 where the sequence has no needle. In training, the indexer KL's row 0 is that
    # query row (the row that predicts the first answer token), its support holds the needle's compressed
    # entries (in place of the first random extras), and its KL is added again with kl_focus_weight;
    # `needle_stats` gets per layer the share of the needle's entries the top-k held at that row.
    # Outside training (probe), only `needle_stats` is filled.
    kl_focus: tuple | None = None
    # the stored-document path's encoder replay (see Attention.forward): per sequence D - R, or None
    encoder_replay_start: torch.Tensor | None = None
    kl_focus_weight: float = 0.0
    needle_stats: list = field(default_factory=list)
    # Triton kernels with ckpt_blocks: layer id -> the indexer's selection (int32 [B, S, K]) of the forward,
    # which the block's recomputation in backward reuses instead of scoring and selecting again (the same
    # inputs give the same selection)
    sel_cache: dict = field(default_factory=dict)


def decoder_start(args: ModelArgs) -> int | None:
    """The first decoder layer of the causal encoder-decoder split, as csa2-core's layer plan finds it
    (`findDecoderStart`): the first ratio-1 layer, if it is a KV source and every later layer is ratio 1."""
    r = list(args.compress_ratios[: args.n_layers])
    if 1 not in r:
        return None
    first = r.index(1)
    if first not in args.kv_source_layers or any(x != 1 for x in r[first:]):
        return None
    return first


def select_candidate_blocks(logits, compress_lens, topk_blocks: int, block_size: int):
    """Level one of the hierarchical indexer (reference `select_candidate_blocks`)."""
    width = logits.size(-1)
    scores = F.pad(logits, (0, -width % block_size), value=-torch.inf)
    scores = scores.unflatten(-1, (-1, block_size)).amax(dim=-1)
    num_blocks = scores.size(-1)
    last = (compress_lens - 1) // block_size
    scores = scores.masked_fill(torch.arange(num_blocks, device=logits.device) == last, torch.inf)
    k = min(topk_blocks, num_blocks)
    idx = stable_topk_indices(scores, k)
    vals = scores.gather(-1, idx)
    keep = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, idx, vals > -torch.inf)
    return keep.unsqueeze(-1).expand(*keep.shape, block_size).flatten(-2)[..., :width]  # = repeat_interleave


def window_topk_idxs(window: int, seqlen: int, device) -> torch.Tensor:
    end = torch.arange(seqlen, device=device).unsqueeze(1)
    idxs = (end - window + 1).clamp(0) + torch.arange(min(seqlen, window), device=device)
    return torch.where(idxs > end, -1, idxs)


# --- sparse attention -------------------------------------------------------------------------------


def sparse_attn_exact(q, kv, attn_sink, topk_idxs, softmax_scale, block: int = 64):
    """The official kernel's math: online softmax over blocks of 64 indices, bf16 probabilities."""
    b, m, h, d = q.size()
    topk = topk_idxs.size(-1)
    scale = torch.tensor(softmax_scale, dtype=F32)
    kvf = kv.float()
    acc_o = torch.zeros(b, m, h, d, dtype=F32)
    sum_exp = torch.zeros(b, m, h, dtype=F32)
    scores_max = torch.full((b, m, h), -1e30, dtype=F32)
    batch = torch.arange(b).view(b, 1, 1)
    for t in range(0, topk, block):
        idxs = topk_idxs[:, :, t : t + block].long()
        valid = idxs != -1
        kv_blk = kvf[batch, idxs.clamp_min(0)] * valid.unsqueeze(-1)
        acc_s = einsum("bmhd,bmkd->bmhk", q.float(), kv_blk, F32)
        acc_s = torch.where(valid.unsqueeze(2), acc_s, -torch.inf) * scale
        prev = scores_max
        scores_max = torch.maximum(prev, acc_s.amax(dim=-1))
        scores_scale = torch.exp(prev - scores_max)
        p = torch.exp(acc_s - scores_max.unsqueeze(-1))
        sum_exp = sum_exp * scores_scale + p.sum(dim=-1)
        p_bf16 = p.to(BF16)
        acc_o = acc_o * scores_scale.unsqueeze(-1) + einsum("bmhk,bmkd->bmhd", p_bf16.float(), kv_blk, F32)
    sum_exp = sum_exp + torch.exp(attn_sink.float() - scores_max)
    return (acc_o / sum_exp.unsqueeze(-1)).to(BF16)


def _attn_core(q, kv_flat, sink, idx, scale):
    """q [n, H, D] bf16, kv_flat [N, D] bf16, idx [n, T] (-1 = none) -> [n, H, D] bf16.

    The kernel's function: p_j = exp(s_j - max), denominator sum_j p_j + exp(sink - max) in fp32, and
    the probabilities rounded to bf16 for the PV product (straight-through). The kernel takes the max
    block by block (64 indices); here it is the row max, so a rounding can differ where a later block
    holds the row's maximum."""
    valid = idx >= 0
    # index_select, not advanced indexing: its backward is an index_add (atomics), while advanced
    # indexing's backward (index_put with accumulate) serializes over repeated indices on a GPU
    kvg = torch.index_select(kv_flat, 0, idx.clamp_min(0).flatten()).view(*idx.shape, -1).float()  # [n, T, D]
    s = torch.einsum("nhd,ntd->nht", q.float(), kvg) * scale
    s = s.masked_fill(~valid.unsqueeze(1), -torch.inf)
    m = s.amax(dim=-1, keepdim=True).clamp_min(-1e30).detach()
    e = torch.exp(s - m)
    den = e.sum(dim=-1, keepdim=True) + torch.exp(sink.float().view(1, -1, 1) - m)
    e_pv = e + (e.to(BF16).float() - e).detach()
    return (torch.einsum("nht,ntd->nhd", e_pv, kvg) / den).to(BF16)


def _bmm32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b (batched) of bf16 operands with fp32 accumulation and an fp32 result (the tensor cores'
    bf16 -> fp32 path on a GPU; the operands upcast on a CPU, the same products summed in fp32)."""
    if a.is_cuda:
        return torch.bmm(a, b, out_dtype=F32)
    return torch.bmm(a.float(), b.float())


class _AttnCoreFast(torch.autograd.Function):
    """_attn_core's function with a hand-written backward and bf16 gathers (the fast path).

    Forward values: the same products as _attn_core (bf16 q, keys and rounded probabilities, fp32
    sums), only the summation order may differ. The gathered keys stay bf16 (half the bytes of the
    fp32 copy _attn_core makes, which its autograd then keeps and differentiates in fp32), and the
    gradient of the gather is one fp32 index_add. Backward, with STE through the bf16 probabilities
    (as _attn_core): o = N / den, N = sum_t p_t kv_t, den = sum_t e_t + exp(sink - m), e_t = exp(s_t - m):
    dN = dO / den, dden = -(dO . o) / den, de_t = dN . kv_t + dden, ds_t = e_t de_t; the matrix
    products of the backward take bf16 operands (fp32 accumulation)."""

    @staticmethod
    def forward(ctx, q, kv_flat, sink, idx, scale):
        n, T = idx.shape
        valid = idx >= 0
        kvg = torch.index_select(kv_flat, 0, idx.clamp_min(0).flatten()).view(n, T, -1)  # [n, T, D] bf16
        s = _bmm32(q, kvg.transpose(1, 2)) * scale  # [n, H, T]
        s = s.masked_fill(~valid.unsqueeze(1), -torch.inf)
        m = s.amax(dim=-1, keepdim=True).clamp_min(-1e30)
        e = torch.exp(s - m)
        del s
        es = torch.exp(sink.float().view(1, -1, 1) - m)
        den = e.sum(dim=-1, keepdim=True) + es
        p = e.to(BF16)
        o = _bmm32(p, kvg) / den  # [n, H, D] fp32
        ctx.save_for_backward(q, kvg, idx, e, p, den, es, o)
        ctx.scale = scale
        ctx.n_kv = kv_flat.size(0)
        return o.to(BF16)

    @staticmethod
    def backward(ctx, d_o):
        q, kvg, idx, e, p, den, es, o = ctx.saved_tensors
        scale = ctx.scale
        d_o = d_o.float()
        dN = d_o / den  # [n, H, D]
        dden = -(d_o * o).sum(dim=-1, keepdim=True) / den  # [n, H, 1]
        dNb = dN.to(BF16)
        de = _bmm32(dNb, kvg.transpose(1, 2)) + dden  # [n, H, T]
        ds = (de * e).to(BF16)  # zero where masked (e = 0)
        dq = _bmm32(ds, kvg) * scale
        dkvg = _bmm32(ds.transpose(1, 2), q) * scale + _bmm32(p.transpose(1, 2), dNb)  # [n, T, D]
        dkv = torch.zeros(ctx.n_kv, kvg.size(-1), dtype=F32, device=kvg.device)
        dkv.index_add_(0, idx.clamp_min(0).flatten(), dkvg.view(-1, kvg.size(-1)))
        dsink = (dden * es).sum(dim=(0, 2))
        return dq.to(q.dtype), dkv.to(kvg.dtype), dsink.to(F32), None, None


def sparse_attn_train(q, kv, attn_sink, topk_idxs, softmax_scale, chunk_tokens: int):
    """Same function as the kernel (fp32 softmax over the gathered keys, sink in the denominator),
    batched over flattened tokens and recomputed in the backward pass chunk by chunk."""
    B, S, H, D = q.shape
    N = kv.size(1)
    if _triton_for(q) and kernels.attn_supported(H, D):
        # one launch over all rows; the kernel adds each sequence's key offset to its local indices
        o = kernels.sparse_attn(q.reshape(B * S, H, D), kv.reshape(B * N, D), attn_sink, topk_idxs.reshape(B * S, -1),
                                softmax_scale, rows_per_seq=S, keys_per_seq=N)
        return o.view(B, S, H, D)
    off = (torch.arange(B, device=q.device) * N).view(B, 1, 1)
    idx = torch.where(topk_idxs >= 0, topk_idxs.long() + off, -1).reshape(B * S, -1)
    qf = q.reshape(B * S, H, D)
    kvf = kv.reshape(B * N, D)
    outs = []
    fast = _FAST_ATTN
    for i in range(0, B * S, chunk_tokens):
        args = (qf[i : i + chunk_tokens], kvf, attn_sink, idx[i : i + chunk_tokens], softmax_scale)
        if fast:
            outs.append(_AttnCoreFast.apply(*args))
        elif torch.is_grad_enabled() and (q.requires_grad or kv.requires_grad):
            outs.append(checkpoint(_attn_core, *args, use_reentrant=False, preserve_rng_state=False))
        else:
            outs.append(_attn_core(*args))
    return torch.cat(outs).view(B, S, H, D)


# --- attention ---------------------------------------------------------------------------------------


class Compressor(nn.Module):
    def __init__(self, args: ModelArgs, layer_id: int):
        super().__init__()
        self.ratio = args.compress_ratios[layer_id]
        self.norm_eps = args.norm_eps
        self.norm = Norm(args.head_dim)
        self.wkv = Lin(args.dim, args.head_dim)
        if self.ratio > 1:
            self.wgate = Lin(args.dim, args.head_dim)

    def forward(self, x: torch.Tensor, state: dict | None = None) -> torch.Tensor | None:
        """Prefill: the RoPE-free latents of the S // ratio complete groups, or None when there are none.
        With `state`, the trailing partial group's fp32 kv / score rows are left there for decode."""
        B, S, _ = x.shape
        r = self.ratio
        if r == 1:
            return rms_norm(linear(x, bf(self.wkv.weight)), self.norm.weight, self.norm_eps)
        if state is not None:
            xf = x.float()
            kv_all, score_all = linear(xf, bf(self.wkv.weight).float()), linear(xf, bf(self.wgate.weight).float())
            rem = S % r
            state["kv_state"] = torch.zeros(B, r, kv_all.size(-1), dtype=F32, device=x.device)
            state["score_state"] = torch.full((B, r, kv_all.size(-1)), -torch.inf, dtype=F32, device=x.device)
            if rem:
                state["kv_state"][:, :rem] = kv_all[:, S - rem :]
                state["score_state"][:, :rem] = score_all[:, S - rem :]
        if S < r:
            return None
        xf = x.float()[:, : S - S % r]
        kv = linear(xf, bf(self.wkv.weight).float())
        score = linear(xf, bf(self.wgate.weight).float())
        kv = kv.unflatten(1, (-1, r))
        score = score.unflatten(1, (-1, r))
        kv = (kv * score.softmax(dim=2)).sum(dim=2)
        return rms_norm(kv.to(x.dtype), self.norm.weight, self.norm_eps)


class Indexer(nn.Module):
    def __init__(self, args: ModelArgs, layer_id: int):
        super().__init__()
        self.owns_k = layer_id in args.kv_source_layers
        self.ratio = args.compress_ratios[layer_id]
        self.is_candidate_source = layer_id == args.candidate_source_layer
        self.uses_candidates = 0 <= args.candidate_source_layer < layer_id
        self.topk_blocks = args.candidate_topk_blocks
        self.block_size = args.candidate_block_size
        self.n_heads = args.index_n_heads
        self.head_dim = args.index_head_dim
        self.rd = args.rope_head_dim
        self.topk = args.index_topk
        self.norm_eps = args.norm_eps
        self.wq_b = Lin(args.q_lora_rank, self.n_heads * self.head_dim)
        self.weights_proj = Lin(args.dim, self.n_heads)
        if self.owns_k:
            self.wk = Lin(args.head_dim, self.head_dim)
            self.k_norm = Norm(self.head_dim)

    def index_keys(self, latent: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        k = rms_norm(linear(latent, bf(self.wk.weight)), self.k_norm.weight, self.norm_eps)
        k = rope_tail(k, freqs, self.rd)
        return quant.fp4_index(k)

    def queries(self, x, qr, freqs):
        q = linear(qr, bf(self.wq_b.weight)).unflatten(-1, (self.n_heads, self.head_dim))
        q = quant.fp4_index(rope_tail(q, freqs, self.rd))
        w = linear(x, bf(self.weights_proj.weight)) * (self.head_dim**-0.5 * self.n_heads**-0.5)
        return q, w

    @staticmethod
    def scores(q, k, w, chunk: int = 1024):
        """sum_h w[h] * relu(q[h] . k[j]) as the reference's bf16 einsum (no grad), [B, S, N] bf16."""
        out = []
        for i in range(0, q.size(1), chunk):
            s = einsum("bshd,btd->bsht", q[:, i : i + chunk], k, BF16)
            s = s.relu() * w[:, i : i + chunk].unsqueeze(-1)
            out.append(s.float().sum(dim=2).to(BF16))
        return torch.cat(out, dim=1)


class Attention(nn.Module):
    def __init__(self, layer_id: int, args: ModelArgs):
        super().__init__()
        self.layer_id = layer_id
        self.n_heads = args.n_heads
        self.head_dim = args.head_dim
        self.rd = args.rope_head_dim
        self.n_groups = args.o_groups
        self.o_lora_rank = args.o_lora_rank
        self.window = args.window_size
        self.ratio = args.compress_ratios[layer_id]
        self.eps = args.norm_eps
        self.softmax_scale = self.head_dim**-0.5
        self.attn_sink = nn.Parameter(torch.zeros(self.n_heads, dtype=F32))
        self.wq_a = Lin(args.dim, args.q_lora_rank)
        self.q_norm = Norm(args.q_lora_rank)
        self.wq_b = Lin(args.q_lora_rank, self.n_heads * self.head_dim)
        self.wkv = Lin(args.dim, self.head_dim)
        self.kv_norm = Norm(self.head_dim)
        self.wo_a = Lin(self.n_heads * self.head_dim // self.n_groups, self.n_groups * args.o_lora_rank)
        self.wo_b = Lin(self.n_groups * args.o_lora_rank, args.dim)
        self.is_kv_source = layer_id in args.kv_source_layers
        self.is_index_source = layer_id in args.index_source_layers
        self.compressor = Compressor(args, layer_id) if self.is_kv_source else None
        self.indexer = Indexer(args, layer_id) if self.is_index_source else None
        if self.ratio:
            self.rope_key = (args.original_seq_len, args.compress_rope_theta)
        else:
            self.rope_key = (0, args.rope_theta)
        self._args = args
        ds = decoder_start(args)
        self.is_decoder = ds is not None and layer_id >= ds

    def freqs(self, device) -> torch.Tensor:
        a = self._args
        return _freqs_table(self.rd, a.max_seq_len, self.rope_key[0], self.rope_key[1], a.rope_factor, a.beta_fast, a.beta_slow, device)

    def project_out(self, o: torch.Tensor) -> torch.Tensor:
        B, S = o.shape[:2]
        o = o.reshape(B, S, self.n_groups, -1)
        wo_a = bf(self.wo_a.weight).view(self.n_groups, self.o_lora_rank, -1)
        o = einsum("bsgd,grd->bsgr", o, wo_a, BF16)
        return linear(o.flatten(2), bf(self.wo_b.weight))

    def forward(self, x: torch.Tensor, shared: Shared, ctx: Ctx) -> torch.Tensor:
        B, S, _ = x.shape
        dev = x.device
        freqs_all = self.freqs(dev)
        freqs = freqs_all[:S]
        rd, H, D = self.rd, self.n_heads, self.head_dim

        qr = rms_norm(linear(x, bf(self.wq_a.weight)), self.q_norm.weight, self.eps)
        q = rope_tail(linear(qr, bf(self.wq_b.weight)).unflatten(-1, (H, D)), freqs, rd)

        kv = rms_norm(linear(x, bf(self.wkv.weight)), self.kv_norm.weight, self.eps)
        kv = quant.fp8_window(rope_tail(kv, freqs, rd))
        win_idx = window_topk_idxs(self.window, S, dev).unsqueeze(0).expand(B, -1, -1)
        if ctx.replay_start is not None and self.is_decoder:
            # decoder replay as csa2-serve runs it: the decoder layers re-run only the last R prompt
            # tokens, their window rings starting empty, so rows from p on see no window key before p
            p = ctx.replay_start.view(B, 1, 1)
            rows = torch.arange(S, device=dev).view(1, S, 1)
            win_idx = torch.where((win_idx >= p) | (rows < p), win_idx, -1)
        elif ctx.encoder_replay_start is not None and not self.is_decoder:
            # a question appended to a stored document (csa2-core `encode` with a prior prefix of D tokens)
            # re-runs the encoder over rows from D - R, its windows starting there: the same mask at p = D - R
            p = ctx.encoder_replay_start.view(B, 1, 1)
            rows = torch.arange(S, device=dev).view(1, S, 1)
            win_idx = torch.where((win_idx >= p) | (rows < p), win_idx, -1)
        cap = ctx.capture
        st = None if ctx.state is None else ctx.state.setdefault(self.layer_id, {})
        if cap is not None or st is not None:
            ring = torch.zeros(B, self.window, D, dtype=kv.dtype, device=dev)
            if S <= self.window:
                ring[:, :S] = kv
            else:
                cut = S % self.window
                last = kv[:, -self.window :]
                ring[:, cut:] = last[:, : self.window - cut]
                ring[:, :cut] = last[:, self.window - cut :]
            if cap is not None:
                cap[f"prefill.layer{self.layer_id}.window_kv"] = ring[0].float()
            if st is not None:
                st["ring"] = ring

        kv_all, idx_all = kv, win_idx
        if self.ratio:
            r = self.ratio
            compress_len = S // r
            latent = self.compressor(x, st) if self.is_kv_source else None
            group_freqs = freqs_all[: S - S % r : r]
            kl_job = None
            if self.is_index_source:
                if compress_len == 0:
                    idxs = torch.empty(B, S, 0, dtype=torch.int32, device=dev)
                else:
                    idxs, kl_job = self._indexer(x, qr, latent, S, shared, ctx, freqs, group_freqs)
                shared.topk_idxs = idxs
            else:
                idxs = shared.topk_idxs
            if latent is not None:
                shared.compress_kv = quant.fp4_main(rope_tail(latent, group_freqs, rd))
                if cap is not None:
                    cap[f"cache.layer{self.layer_id}.compress_kv"] = shared.compress_kv[0].float()
            if st is not None and self.is_kv_source:
                st["compress_kv"] = shared.compress_kv if latent is not None else torch.zeros(B, 0, D, dtype=BF16, device=dev)
            ckv = shared.compress_kv[:, :compress_len]
            kv_all = torch.cat([kv, ckv], dim=1)
            idx_all = torch.cat([win_idx, idxs], dim=-1)
            if kl_job is not None:
                self._indexer_kl(q, ckv, ctx, *kl_job)

        if _EXACT:
            o = sparse_attn_exact(q, kv_all, self.attn_sink, idx_all.int(), self.softmax_scale)
        else:
            o = sparse_attn_train(q, kv_all, self.attn_sink, idx_all, self.softmax_scale, ctx.attn_chunk_tokens)
        o = rope_tail(o, freqs, rd, inverse=True)
        return self.project_out(o)

    def _indexer(self, x, qr, latent, offset, shared, ctx, freqs, group_freqs):
        ix = self.indexer
        B, S, _ = x.shape
        r = self.ratio
        if ctx.train:  # the indexer learns only from its KL loss: its inputs are cut from the graph
            x, qr = x.detach(), qr.detach()
            latent = latent.detach() if latent is not None else None
        if ix.owns_k and latent is not None:
            shared.index_k = ix.index_keys(latent, group_freqs)
            if ctx.capture is not None:
                ctx.capture[f"cache.layer{self.layer_id}.index_k"] = shared.index_k[0].float()
            if ctx.state is not None:
                ctx.state[self.layer_id]["index_k"] = shared.index_k
        qi, w = ix.queries(x, qr, freqs)
        n = S // r
        index_k = shared.index_k[:, :n]
        compress_lens = (torch.arange(1, S + 1, device=x.device) // r).unsqueeze(-1)
        k = min(ix.topk, n)
        tri = _triton_for(x) and kernels.index_supported(ix.n_heads, ix.head_dim, n)
        if tri and ix.uses_candidates and not ix.is_candidate_source and tuple(shared.candidates.shape) != (B, S, n):
            tri = False
        cache = tri and ctx.train and ctx.ckpt_blocks and torch.is_grad_enabled()
        with torch.no_grad():
            if cache and self.layer_id in ctx.sel_cache:
                raw = ctx.sel_cache[self.layer_id].long()  # a recomputation: the forward's selection
            elif tri:
                qd, kd, wd = qi.detach(), index_k.detach(), w.detach()
                if ix.is_candidate_source:
                    score = kernels.index_keys(qd, kd, wd, r, keys=False)  # causally masked bf16 scores
                    shared.candidates = select_candidate_blocks(score, compress_lens, ix.topk_blocks, ix.block_size)
                    if ctx.capture is not None:
                        ctx.capture[f"prefill.layer{self.layer_id}.candidates"] = shared.candidates[0].to(torch.uint8)
                    raw = _keyed_topk_bf16(score, k)
                else:
                    keys = kernels.index_keys(qd, kd, wd, r, candidates=shared.candidates if ix.uses_candidates else None)
                    raw = torch.topk(keys, k, dim=-1, largest=True, sorted=False).indices  # distinct keys: the stable top-k's set
                    del keys
                raw = raw.sort(dim=-1).values
                raw = torch.where(raw < compress_lens, raw, -1)
                if cache:
                    ctx.sel_cache[self.layer_id] = raw.int()
            else:
                score = Indexer.scores(qi.detach(), index_k.detach(), w.detach())
                score = score.masked_fill(torch.arange(n, device=x.device) >= compress_lens, -torch.inf)
                if ix.is_candidate_source:
                    shared.candidates = select_candidate_blocks(score, compress_lens, ix.topk_blocks, ix.block_size)
                    if ctx.capture is not None:
                        ctx.capture[f"prefill.layer{self.layer_id}.candidates"] = shared.candidates[0].to(torch.uint8)
                elif ix.uses_candidates:
                    score = score.masked_fill(~shared.candidates, -torch.inf)
                raw = stable_topk_indices(score, k).sort(dim=-1).values
                raw = torch.where(raw < compress_lens, raw, -1)
        if ctx.capture is not None:
            ctx.capture[f"prefill.layer{self.layer_id}.topk"] = raw[0].int()
        if ctx.kl_focus is not None:
            with torch.no_grad():
                ctx.needle_stats.append((self.layer_id, needle_selected(raw, ctx.kl_focus, r)))
        idxs = torch.where(raw >= 0, raw + offset, -1).int()
        kl_job = (qi, w, index_k, raw, compress_lens.squeeze(-1)) if (ctx.train and ctx.kl_rows > 0) else None
        return idxs, kl_job

    def _indexer_kl(self, q, ckv, ctx, qi, w, index_k, raw, clen):
        """KL(main attention over compressed entries || indexer distribution), on sampled query rows.

        Support per row: the selected entries plus `kl_extra` random visible ones, so the indexer also
        learns about entries it left out. Target: the layer's own attention probabilities restricted to
        that support, averaged over heads, detached (DSA / V4 style)."""
        B, S = raw.shape[:2]
        dev = q.device
        r0 = self.ratio - 1  # first row that sees a compressed entry
        R = min(ctx.kl_rows, S - r0)
        if R <= 0:
            return
        if self.layer_id not in ctx.kl_rand:  # drawn once; a recomputation in backward reuses them
            ctx.kl_rand[self.layer_id] = (torch.randint(r0, S, (R,), device=dev), torch.rand(B, R, ctx.kl_extra, device=dev))
        rows, u = ctx.kl_rand[self.layer_id]
        b1 = torch.arange(B, device=dev).view(B, 1)
        rows_b = rows.view(1, R).expand(B, R)
        foc = None
        if ctx.kl_focus is not None:
            frow, nlo, nhi = ctx.kl_focus
            foc = frow >= r0  # [B]: sequences with a needle whose query row sees compressed entries
            rows_b = rows_b.clone()
            rows_b[:, 0] = torch.where(foc, frow, rows_b[:, 0])
        cl = clen[rows_b]  # [B, R] >= 1
        sel = raw[b1, rows_b]  # [B, R, K]
        rnd = (u * cl.unsqueeze(-1)).long()
        if foc is not None:
            # the focus row's support: the needle's compressed entries (those it can see) in place of the first random extras
            m = min(32, rnd.size(-1))
            j = (nlo // self.ratio).view(B, 1) + torch.arange(m, device=dev).view(1, m)  # [B, m]
            ok = foc.view(B, 1) & (j * self.ratio < nhi.view(B, 1)) & (j < cl[:, 0:1])
            rnd = rnd.clone()
            rnd[:, 0, :m] = torch.where(foc.view(B, 1), torch.where(ok, j, -1), rnd[:, 0, :m])
        J = torch.cat([sel, rnd], dim=-1)
        valid = J >= 0
        Jc = J.clamp_min(0)
        bidx = torch.arange(B, device=dev).view(B, 1, 1)
        n_k = index_k.size(1)
        flat = (Jc + bidx * n_k).flatten()
        kg = torch.index_select(index_k.reshape(B * n_k, -1), 0, flat).view(B, R, -1, index_k.size(-1))  # grad to the key owner's wk / k_norm
        qr_ = qi[b1, rows_b]
        wr_ = w[b1, rows_b]
        s = torch.einsum("brhd,brjd->brhj", qr_.float(), kg.float()).relu()
        logit_i = (s * wr_.float().unsqueeze(-1)).sum(2).masked_fill(~valid, -torch.inf)
        with torch.no_grad():
            cg = ckv.detach()[bidx, Jc].float()
            a = torch.einsum("brhd,brjd->brhj", q.detach()[b1, rows_b].float(), cg) * self.softmax_scale
            a = a.masked_fill(~valid.unsqueeze(2), -torch.inf)
            p = torch.softmax(a, dim=-1).mean(dim=2)  # [B, R, J]
            # how much of the attention mass the selected entries already hold (a recall proxy)
            ctx.indexer_stats.append((self.layer_id, (p[..., : sel.size(-1)].sum(-1)).mean()))
        logq = torch.log_softmax(logit_i, dim=-1)
        kl_rows = (p * (torch.log(p.clamp_min(1e-30)) - logq)).masked_fill(~valid, 0).sum(-1)  # [B, R]
        kl = kl_rows.mean()
        if foc is not None and ctx.kl_focus_weight > 0:
            kl = kl + ctx.kl_focus_weight * (kl_rows[:, 0] * foc).sum() / foc.sum().clamp_min(1)
        ctx.kl_losses.append(kl)


def needle_selected(raw: torch.Tensor, focus: tuple, ratio: int) -> torch.Tensor:
    """[B] float: per sequence the share of the needle's compressed entries (those the query row can see)
    in the top-k at the focus row; NaN where the sequence has no needle. raw: [B, S, K] entry indices."""
    frow, nlo, nhi = focus
    B, S, K = raw.shape
    has = frow >= 0
    sel = raw[torch.arange(B, device=raw.device), frow.clamp(0, S - 1)]  # [B, K]
    first = nlo // ratio
    last = (nhi - 1) // ratio  # entries covering needle tokens [nlo, nhi)
    visible = (frow + 1) // ratio  # entries the row sees
    last = torch.minimum(last, visible - 1)
    n = (last - first + 1).clamp_min(0)
    hit = ((sel >= first.view(B, 1)) & (sel <= last.view(B, 1))).sum(-1)
    return torch.where(has & (n > 0), hit.float() / n.clamp_min(1).float(), torch.full_like(hit, float("nan"), dtype=torch.float32))


_FREQS: dict = {}


def _freqs_table(rd, max_seq_len, original_seq_len, base, factor, beta_fast, beta_slow, device):
    key = (rd, max_seq_len, original_seq_len, base, factor, beta_fast, beta_slow, str(device))
    if key not in _FREQS:
        _FREQS[key] = precompute_freqs_cis(rd, max_seq_len, original_seq_len, base, factor, beta_fast, beta_slow).to(device)
    return _FREQS[key]


# --- MoE --------------------------------------------------------------------------------------------


class Expert(nn.Module):
    def __init__(self, dim: int, inter: int, limit: float):
        super().__init__()
        self.w1 = Lin(dim, inter)
        self.w2 = Lin(inter, dim)
        self.w3 = Lin(dim, inter)
        self.limit = limit

    def forward(self, x: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        gate = linear(x, bf(self.w1.weight)).float()
        up = linear(x, bf(self.w3.weight)).float()
        if self.limit > 0:
            up = torch.clamp(up, min=-self.limit, max=self.limit)
            gate = torch.clamp(gate, max=self.limit)
        h = F.silu(gate) * up
        if weights is not None:
            h = weights * h
        return linear(h.to(x.dtype), bf(self.w2.weight))


class Gate(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.topk = args.n_activated_experts
        self.score_func = args.score_func
        self.gate_temp = args.gate_temp
        self.norm_topk_prob = args.norm_topk_prob
        self.route_scale = args.route_scale
        self.weight = nn.Parameter(torch.empty(args.n_routed_experts, args.dim, dtype=F32))
        # the e_score_correction_bias: steers selection only; trained by the load-balancing rule, not SGD
        self.register_buffer("bias", torch.zeros(args.n_routed_experts, dtype=F32))

    def forward(self, x: torch.Tensor):
        scores = linear(x.float(), bf(self.weight).float()) / self.gate_temp
        if self.score_func == "softmax":
            scores = scores.softmax(dim=-1)
        elif self.score_func == "sigmoid":
            scores = scores.sigmoid()
        else:
            scores = F.softplus(scores).sqrt()
        indices = stable_topk_indices(scores + self.bias, self.topk)
        weights = scores.gather(1, indices)
        if self.norm_topk_prob and self.topk > 1:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return weights * self.route_scale, indices


class MoE(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.dim = args.dim
        self.n_experts = args.n_routed_experts
        self.gate = Gate(args)
        self.experts = nn.ModuleList([Expert(args.dim, args.moe_inter_dim, args.swiglu_limit) for _ in range(self.n_experts)])
        self.shared_experts = Expert(args.dim, args.moe_inter_dim, args.swiglu_limit)
        self.last_counts: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, self.dim)
        weights, indices = self.gate(x)
        # expert loads for the bias update (scatter_add: no host sync, unlike bincount on a GPU)
        flat = indices.flatten()
        self.last_counts = torch.zeros(self.n_experts, device=x.device).scatter_add_(0, flat, torch.ones_like(flat, dtype=F32)).detach()
        # every expert over every token, with weight 0 where not routed: adds exact zeros, so this is
        # the reference's sum in ascending expert order, without its host-synchronizing gather
        dense = torch.zeros(x.size(0), self.n_experts, dtype=F32, device=x.device).scatter(1, indices, weights)
        y = torch.zeros(x.shape, dtype=F32, device=x.device)
        for e, expert in enumerate(self.experts):
            y = y + expert(x, dense[:, e : e + 1])
        y = y + self.shared_experts(x)
        return y.type_as(x).view(shape)


# --- blocks and the trunk -----------------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self, layer_id: int, args: ModelArgs):
        super().__init__()
        self.layer_id = layer_id
        self.norm_eps = args.norm_eps
        self.attn = Attention(layer_id, args)
        self.ffn = MoE(args)
        self.attn_norm = Norm(args.dim)
        self.ffn_norm = Norm(args.dim)
        self.hc = args.hc_mult
        self.iters = args.hc_sinkhorn_iters
        self.hc_eps = args.hc_eps
        mix = (2 + self.hc) * self.hc
        self.hc_attn_fn = nn.Parameter(torch.empty(mix, self.hc * args.dim, dtype=F32))
        self.hc_ffn_fn = nn.Parameter(torch.empty(mix, self.hc * args.dim, dtype=F32))
        self.hc_attn_base = nn.Parameter(torch.empty(mix, dtype=F32))
        self.hc_ffn_base = nn.Parameter(torch.empty(mix, dtype=F32))
        self.hc_attn_scale = nn.Parameter(torch.empty(3, dtype=F32))
        self.hc_ffn_scale = nn.Parameter(torch.empty(3, dtype=F32))

    def hc_mixes(self, x, fn, scale, base):
        xf = x.flatten(2).float()
        rs = torch.rsqrt(xf.square().mean(-1, keepdim=True) + self.norm_eps)
        mixes = linear(xf, fn) * rs
        return _SINKHORN(mixes, scale, base, self.hc, self.iters, self.hc_eps)

    def forward(self, x, pre_mix, shared: Shared, ctx: Ctx):
        residual = x
        a_pre, a_post, a_comb = self.hc_mixes(x, self.hc_attn_fn, self.hc_attn_scale, self.hc_attn_base)
        h = rms_norm(hc_pre(x, pre_mix), self.attn_norm.weight, self.norm_eps)
        h = self.attn(h, shared, ctx)
        x = hc_post(h, residual, a_post, a_comb)
        residual = x
        f_pre, f_post, f_comb = self.hc_mixes(x, self.hc_ffn_fn, self.hc_ffn_scale, self.hc_ffn_base)
        h = rms_norm(hc_pre(x, a_pre), self.ffn_norm.weight, self.norm_eps)
        h = self.ffn(h)
        x = hc_post(h, residual, f_post, f_comb)
        if ctx.capture is not None:
            ctx.capture[f"prefill.layer{self.layer_id}.hc_out"] = x[0].float()
            ctx.capture[f"prefill.layer{self.layer_id}.pre_out"] = f_pre[0].float()
        return x, f_pre


def _checkpointed_block(layer, h, pre, shared: Shared, ctx: Ctx):
    """Run a block under activation checkpointing. The shared slots it reads are passed in explicitly
    (a recomputation in backward must see the values of the forward, not the later layers' ones)."""
    empty = torch.empty(0, device=h.device)

    def run(h, pre, ckv, ik, ti, cand):
        sh = Shared(*(None if t.numel() == 0 and t.dim() == 1 else t for t in (ckv, ik, ti, cand)))
        h, pre = layer(h, pre, sh, ctx)
        return h, pre, *(empty if t is None else t for t in (sh.compress_kv, sh.index_k, sh.topk_idxs, sh.candidates))

    args = [empty if t is None else t for t in (shared.compress_kv, shared.index_k, shared.topk_idxs, shared.candidates)]
    # no RNG state stashing (it cannot run under CUDA-graph capture): the only random draws, the KL's,
    # are made once per forward and kept in ctx.kl_rand, so the recomputation reuses them
    h, pre, ckv, ik, ti, cand = checkpoint(run, h, pre, *args, use_reentrant=False, preserve_rng_state=False)
    new = Shared(*(None if t.numel() == 0 and t.dim() == 1 else t for t in (ckv, ik, ti, cand)))
    return h, pre, new


class Embed(nn.Module):
    def __init__(self, vocab: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab, dim, dtype=F32))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        args.check()
        self.args = args
        self.embed = Embed(args.vocab_size, args.dim)
        self.layers = nn.ModuleList([Block(i, args) for i in range(args.n_layers)])
        self.norm = Norm(args.dim)
        self.head = Embed(args.vocab_size, args.dim)  # .weight [vocab, dim], as ParallelHead
        self.hc = args.hc_mult

    def hidden(self, ids: torch.Tensor, ctx: Ctx | None = None) -> torch.Tensor:
        """The normed final hidden state [B, S, dim] (bf16) of a prefill over ids [B, S]."""
        ctx = ctx or Ctx()
        h = F.embedding(ids, bf(self.embed.weight))
        if ctx.capture is not None:
            ctx.capture["prefill.embed"] = h[0].float()
        h = h.unsqueeze(2).repeat(1, 1, self.hc, 1)
        pre = torch.zeros(*h.shape[:3], dtype=F32, device=h.device)
        pre[..., 0] = 1.0
        shared = Shared()
        if ctx.state is not None:
            ctx.state["shared"] = shared
        for layer in self.layers:
            if ctx.ckpt_blocks and torch.is_grad_enabled():
                h, pre, shared = _checkpointed_block(layer, h, pre, shared, ctx)
            else:
                h, pre = layer(h, pre, shared, ctx)
        h = hc_pre(h, pre)
        return rms_norm(h, self.norm.weight, self.args.norm_eps)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return linear(h.float(), bf(self.head.weight).float())

    def forward(self, ids: torch.Tensor, ctx: Ctx | None = None) -> torch.Tensor:
        """Logits (fp32) of every position of a prefill over ids [B, S]."""
        return self.logits(self.hidden(ids, ctx))

    # --- checkpoints ---

    F32_NAMES = ("hc_attn_fn", "hc_ffn_fn", "hc_attn_base", "hc_ffn_base", "hc_attn_scale", "hc_ffn_scale", "attn_sink", "gate.bias")

    def official_state_dict(self) -> dict[str, torch.Tensor]:
        """The checkpoint as served: official names, bf16 except hc_*, attn_sink and gate.bias (F32)."""
        out = {}
        for name, t in self.state_dict().items():
            keep32 = any(name.endswith(s) for s in self.F32_NAMES)
            out[name] = t.detach().to("cpu", F32 if keep32 else BF16).contiguous()
        return out

    def load_official(self, sd: dict[str, torch.Tensor], strict: bool = True) -> None:
        own = self.state_dict()
        missing = sorted(set(own) - set(sd))
        unexpected = sorted(set(sd) - set(own))
        if strict and (missing or unexpected):
            raise KeyError(f"checkpoint mismatch: missing {missing[:8]}, unexpected {unexpected[:8]}")
        with torch.no_grad():
            for name, t in sd.items():
                if name in own:
                    if own[name].shape != t.shape:
                        raise ValueError(f"{name}: shape {tuple(t.shape)} vs model {tuple(own[name].shape)}")
                    own[name].copy_(t.to(own[name].dtype))

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """Seeded init for training from scratch: fan-in normal projections, unit norms, output
        projections scaled by 1/sqrt(2 n_layers), near-identity hyper-connections."""
        g = torch.Generator().manual_seed(seed)
        a = self.args
        out_scale = (2 * a.n_layers) ** -0.5
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith("attn_sink"):
                p.zero_()
            elif name.endswith("_base"):
                base = torch.zeros_like(p)
                n = self.hc
                base[2 * n :] = (torch.eye(n) * 2.0).flatten()  # comb starts near the identity
                p.copy_(base)
            elif name.endswith("_scale"):
                p.fill_(0.1)
            elif name == "embed.weight":
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                std = p.shape[-1] ** -0.5
                if name.endswith("hc_attn_fn") or name.endswith("hc_ffn_fn"):
                    std *= 0.5
                if name.endswith("wo_b.weight") or name.endswith("w2.weight"):
                    std *= out_scale
                p.copy_(torch.randn(p.shape, generator=g) * std)
