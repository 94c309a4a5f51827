"""Triton kernels of the training step's two hot spots, and CPU emulations of their blocked algorithms.

1. The sparse attention (`sparse_attn`, an autograd Function): the same function as model.py's
   `_attn_core` / `_AttnCoreFast`, reading the selected keys by index inside the kernel instead of
   materializing a gather. One program per query row holds all the row's heads (the KV is shared across
   heads, so each selected key is loaded once per row): q is a [HP, D] tile (the H heads padded with
   zero rows to HP >= 16, as tl.dot needs), and the row's T indices are walked in blocks of BLOCK_K.
   - forward: scores s = (q . kv) * scale in fp32, an online softmax over the blocks (the running max
     m, the running sum l, the accumulator rescaled when m grows), the probabilities rounded to bf16
     for the PV product, the sink's exp(sink - m) added to the denominator at the end. Writes o (bf16)
     and per (row, head) the final max m and denominator l (fp32) for the backward. With ROW_MAX (the
     default, `ATTN_ROW_MAX`) a first pass over the blocks takes the row's max, so the probabilities are
     rounded against the row max exactly as `_attn_core` / `_AttnCoreFast` (the rescaling factors are
     then exp(0) = 1); without it they are rounded against the running max, the official kernel's
     numerics (`sparse_attn_exact`), one pass over the keys instead of two.
   - backward (straight-through through the bf16 probabilities, as `_AttnCoreFast`): with
     dN = dO / l, dden = -(dO . o) / l, e_t = exp(s_t - m), p_t = bf16(e_t):
     ds_t = e_t (dN . kv_t + dden); dq = scale sum_t ds_t kv_t; dkv_t += scale ds_t^T q + p_t^T dN;
     dsink = sum over rows of dden exp(sink - m). dq is written per row, dsink per (row, head) and
     summed by the caller, and dkv is accumulated with fp32 atomic adds into an [N, D] buffer (a key is
     selected by many rows). Matrix products take bf16 operands with fp32 accumulation, as the torch path.
   Index -1 means no key; each row's indices are local to its sequence (the kernel adds the sequence's
   offset `(row // rows_per_seq) * keys_per_seq`; keys_per_seq 0 for global indices).

2. The indexer's scores fused with the keyed top-k's key (`index_keys`): for a [BM, BN] tile of (query
   row, compressed entry) the bf16 score sum_h bf16(relu(bf16(q_h . k_j)) * w_h) (as `Indexer.scores`:
   the einsum's bf16 output, relu, the bf16 product with the head weight, the fp32 sum over heads
   rounded to bf16), the causal mask (entry j visible from row i when j < (i + 1) // ratio), the
   candidate mask of the hierarchical indexer, and then either the bf16 score or directly the int32
   key of model._keyed_topk_bf16 (m(v) * 65536 + 65535 - j), so that one torch.topk over the keys is
   the stable top-k. Tiles entirely above the causal boundary skip the products.

Triton is optional: without it (or without CUDA) `available()` is False with the reason in `why()`, and
model.py keeps its PyTorch paths. The `emulate_*` functions are the kernels' blocked algorithms written in
PyTorch (the same loops, padding, masks and roundings, vectorized over the programs): they run on a CPU
and are what the CPU tests compare against the model's reference functions.
"""

import torch

BF16 = torch.bfloat16
F32 = torch.float32

BLOCK_K = 64  # indices per block of the attention kernels (the official kernel's block)
IDX_BM = 64  # query rows per tile of the indexer kernel
IDX_BN = 64  # compressed entries per tile of the indexer kernel
NEG_INIT = -1e30  # the running max's start (as sparse_attn_exact)
# the attention forward's probabilities rounded against the row max (two passes over the keys; the values
# of the torch path) or against the running max of the blocks (one pass; the official kernel's values)
ATTN_ROW_MAX = True

try:  # noqa: SIM105
    import triton
    import triton.language as tl

    _IMPORT_ERROR = None
except Exception as e:  # noqa: BLE001 - any failure means: no kernels
    triton = None
    tl = None
    _IMPORT_ERROR = repr(e)


def why() -> str | None:
    """None when the kernels can run, else the reason they cannot."""
    if triton is None:
        return f"triton not importable: {_IMPORT_ERROR}"
    if not torch.cuda.is_available():
        return "no CUDA device"
    return None


def available() -> bool:
    return why() is None


def heads_padded(h: int) -> int:
    """The head count padded to a power of two >= 16 (tl.dot's smallest tile side)."""
    p = 16
    while p < h:
        p *= 2
    return p


def attn_supported(h: int, d: int) -> bool:
    """Shapes the attention kernels take: D a power of two in [16, 256], H <= 64."""
    return d in (16, 32, 64, 128, 256) and 1 <= h <= 64


def index_supported(h: int, d: int, n: int) -> bool:
    """Shapes the indexer kernel takes: D a power of two in [16, 256], at most 65,536 entries (the key's j field)."""
    return d in (16, 32, 64, 128, 256) and 1 <= h <= 64 and n <= 65536


# --- Triton kernels -----------------------------------------------------------------------------------

if triton is not None:

    @triton.jit
    def _key_block(KV, IDX, row, T, t0, base, D: tl.constexpr, BLOCK_K: tl.constexpr):
        # The row's indices t0 .. t0 + BLOCK_K: which are keys (-1 and those past T are not), their rows in
        # KV (the sequence's offset added), the [BLOCK_K, D] load mask, and the keys (bf16, 0 where none).
        tk = t0 + tl.arange(0, BLOCK_K)
        offs_d = tl.arange(0, D)
        kidx = tl.load(IDX + row * T + tk, mask=tk < T, other=-1)  # [BLOCK_K]
        valid = kidx >= 0
        krow = tl.where(valid, kidx, 0).to(tl.int64) + base  # [BLOCK_K] int64
        kd_mask = valid[:, None] & (offs_d[None, :] < D)  # [BLOCK_K, D]
        kv = tl.load(KV + krow[:, None] * D + offs_d[None, :], mask=kd_mask, other=0.0)  # [BLOCK_K, D] bf16
        return valid, krow, kd_mask, kv

    @triton.jit
    def _attn_fwd_kernel(Q, KV, IDX, SINK, O, M, L, scale, T, rows_per_seq, keys_per_seq,
                         H: tl.constexpr, HP: tl.constexpr, D: tl.constexpr, BLOCK_K: tl.constexpr, ROW_MAX: tl.constexpr):
        # Q, O: [n, H, D] bf16 contiguous; KV: [N, D] bf16 contiguous; IDX: [n, T] int contiguous;
        # SINK: [H] fp32; M, L: [n, H] fp32. One program = one query row, all heads.
        row = tl.program_id(0).to(tl.int64)
        base = (row // rows_per_seq) * keys_per_seq
        offs_h = tl.arange(0, HP)
        offs_d = tl.arange(0, D)
        hmask = offs_h < H
        hd_mask = hmask[:, None] & (offs_d[None, :] < D)  # [HP, D]
        hd_off = row * (H * D) + offs_h[:, None] * D + offs_d[None, :]  # [HP, D] int64
        q = tl.load(Q + hd_off, mask=hd_mask, other=0.0)  # [HP, D] bf16, zero rows past H
        m_i = tl.full([HP], -1e30, tl.float32)  # NEG_INIT (a literal: kernels read no globals)
        l_i = tl.zeros([HP], tl.float32)
        acc = tl.zeros([HP, D], tl.float32)
        if ROW_MAX:  # the row max first: the main loop's m_new then equals m_i and alpha is 1
            for t0 in range(0, T, BLOCK_K):
                valid, krow, kd_mask, kv = _key_block(KV, IDX, row, T, t0, base, D, BLOCK_K)
                s = tl.dot(q, tl.trans(kv)) * scale
                s = tl.where(valid[None, :], s, float("-inf"))
                m_i = tl.maximum(m_i, tl.max(s, axis=1))
        for t0 in range(0, T, BLOCK_K):
            valid, krow, kd_mask, kv = _key_block(KV, IDX, row, T, t0, base, D, BLOCK_K)
            s = tl.dot(q, tl.trans(kv)) * scale  # [HP, BLOCK_K] fp32
            s = tl.where(valid[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))  # [HP]; stays -1e30 while nothing is valid
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(s - m_new[:, None])  # 0 where invalid
            l_i = l_i * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.dot(p.to(tl.bfloat16), kv)  # [HP, D] fp32
            m_i = m_new
        sink = tl.load(SINK + offs_h, mask=hmask, other=0.0)
        l_i = l_i + tl.exp(sink - m_i)
        o = acc / l_i[:, None]
        tl.store(O + hd_off, o.to(tl.bfloat16), mask=hd_mask)
        tl.store(M + row * H + offs_h, m_i, mask=hmask)
        tl.store(L + row * H + offs_h, l_i, mask=hmask)

    @triton.jit
    def _attn_bwd_kernel(Q, KV, IDX, SINK, O, DO, M, L, DQ, DKV, DSINK, scale, T, rows_per_seq, keys_per_seq,
                         H: tl.constexpr, HP: tl.constexpr, D: tl.constexpr, BLOCK_K: tl.constexpr):
        # Q, O, DO, DQ: [n, H, D] bf16 contiguous; KV: [N, D] bf16; DKV: [N, D] fp32 (zeroed by the
        # caller, atomic adds); IDX: [n, T]; M, L, DSINK: [n, H] fp32; SINK: [H] fp32.
        row = tl.program_id(0).to(tl.int64)
        base = (row // rows_per_seq) * keys_per_seq
        offs_h = tl.arange(0, HP)
        offs_d = tl.arange(0, D)
        hmask = offs_h < H
        hd_mask = hmask[:, None] & (offs_d[None, :] < D)
        hd_off = row * (H * D) + offs_h[:, None] * D + offs_d[None, :]
        q = tl.load(Q + hd_off, mask=hd_mask, other=0.0)  # [HP, D] bf16
        do = tl.load(DO + hd_off, mask=hd_mask, other=0.0).to(tl.float32)
        o = tl.load(O + hd_off, mask=hd_mask, other=0.0).to(tl.float32)
        m = tl.load(M + row * H + offs_h, mask=hmask, other=0.0)  # [HP]
        l = tl.load(L + row * H + offs_h, mask=hmask, other=1.0)  # noqa: E741
        sink = tl.load(SINK + offs_h, mask=hmask, other=0.0)
        dn = do / l[:, None]  # [HP, D] fp32: dO / den
        dden = -tl.sum(do * o, axis=1) / l  # [HP]
        dnb = dn.to(tl.bfloat16)
        dq = tl.zeros([HP, D], tl.float32)
        for t0 in range(0, T, BLOCK_K):
            valid, krow, kd_mask, kv = _key_block(KV, IDX, row, T, t0, base, D, BLOCK_K)
            s = tl.dot(q, tl.trans(kv)) * scale  # [HP, BLOCK_K], the forward's scores
            keep = hmask[:, None] & valid[None, :]
            e = tl.where(keep, tl.exp(s - m[:, None]), 0.0)  # [HP, BLOCK_K] fp32, 0 where no key / padded head
            pb = e.to(tl.bfloat16)
            de = tl.dot(dnb, tl.trans(kv)) + dden[:, None]  # [HP, BLOCK_K]
            ds = (de * e).to(tl.bfloat16)
            dq += tl.dot(ds, kv)  # [HP, D]
            dkv = tl.dot(tl.trans(ds), q) * scale + tl.dot(tl.trans(pb), dnb)  # [BLOCK_K, D] fp32
            tl.atomic_add(DKV + krow[:, None] * D + offs_d[None, :], dkv, mask=kd_mask, sem="relaxed")
        tl.store(DQ + hd_off, (dq * scale).to(tl.bfloat16), mask=hd_mask)
        tl.store(DSINK + row * H + offs_h, dden * tl.exp(sink - m), mask=hmask)

    @triton.jit
    def _index_keys_kernel(Q, K, W, CAND, OUT, S, NK, ratio,
                           sq_b, sq_s, sq_h, sk_b, sk_n, sw_b, sw_s, sw_h, sc_b, sc_s, so_b, so_s,
                           HI: tl.constexpr, DI: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                           HAS_CAND: tl.constexpr, KEYS: tl.constexpr):
        # Q: [B, S, HI, DI] bf16 (last dim contiguous); K: [B, NK, DI] bf16 (last dim contiguous);
        # W: [B, S, HI] bf16; CAND: [B, S, NK] uint8 (last dim contiguous) when HAS_CAND;
        # OUT: [B, S, NK] (last dim contiguous), int32 keys when KEYS else bf16 scores.
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        b = tl.program_id(2).to(tl.int64)
        rows = pid_m * BM + tl.arange(0, BM)  # [BM] int32
        cols = pid_n * BN + tl.arange(0, BN)  # [BN] int32
        offs_d = tl.arange(0, DI)
        rmask = rows < S
        cmask = cols < NK
        rows64 = rows.to(tl.int64)
        cols64 = cols.to(tl.int64)
        acc = tl.zeros([BM, BN], tl.float32)
        # the tile's last row sees entries j < (pid_m * BM + BM) // ratio; a tile past that is all masked
        if pid_n * BN < (pid_m * BM + BM) // ratio:
            k = tl.load(K + b * sk_b + cols64[:, None] * sk_n + offs_d[None, :],
                        mask=cmask[:, None] & (offs_d[None, :] < DI), other=0.0)  # [BN, DI] bf16
            for h in tl.static_range(HI):
                qh = tl.load(Q + b * sq_b + rows64[:, None] * sq_s + h * sq_h + offs_d[None, :],
                             mask=rmask[:, None] & (offs_d[None, :] < DI), other=0.0)  # [BM, DI] bf16
                wh = tl.load(W + b * sw_b + rows64 * sw_s + h * sw_h, mask=rmask, other=0.0).to(tl.float32)  # [BM]
                s = tl.dot(qh, tl.trans(k)).to(tl.bfloat16).to(tl.float32)  # the einsum's bf16 output
                r = (tl.maximum(s, 0.0) * wh[:, None]).to(tl.bfloat16).to(tl.float32)  # bf16(relu(s) * w)
                acc += r
        score = acc.to(tl.bfloat16).to(tl.float32)  # the sum over heads rounded to bf16 (exact in fp32)
        keep = cols[None, :] < ((rows + 1) // ratio)[:, None]  # [BM, BN] causal
        tmask = rmask[:, None] & cmask[None, :]
        if HAS_CAND:
            c = tl.load(CAND + b * sc_b + rows64[:, None] * sc_s + cols64[None, :], mask=tmask, other=0)
            keep = keep & (c != 0)
        score = tl.where(keep, score, float("-inf"))
        out_off = b * so_b + rows64[:, None] * so_s + cols64[None, :]
        if KEYS:
            v = tl.where(score == 0.0, 0.0, score).to(tl.bfloat16)  # -0 -> +0
            bits = v.to(tl.int16, bitcast=True).to(tl.int32)  # sign-extended bf16 bit pattern
            mono = tl.where(bits < 0, bits ^ 0x7FFF, bits)  # the pattern in the order of the values
            key = mono * 65536 + (65535 - cols[None, :])
            tl.store(OUT + out_off, key, mask=tmask)
        else:
            tl.store(OUT + out_off, score.to(tl.bfloat16), mask=tmask)


# --- host wrappers ------------------------------------------------------------------------------------


class _SparseAttn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, kv, sink, idx, scale, rows_per_seq, keys_per_seq, row_max):
        n, H, D = q.shape
        T = idx.size(1)
        q = q.contiguous()
        kv = kv.contiguous()
        idx = idx.contiguous()
        sink = sink.contiguous().float()
        o = torch.empty_like(q)
        m = torch.empty(n, H, dtype=F32, device=q.device)
        l = torch.empty(n, H, dtype=F32, device=q.device)  # noqa: E741
        if n > 0:
            _attn_fwd_kernel[(n,)](q, kv, idx, sink, o, m, l, float(scale), T, rows_per_seq, keys_per_seq,
                                   H=H, HP=heads_padded(H), D=D, BLOCK_K=BLOCK_K, ROW_MAX=bool(row_max), num_warps=4)
        ctx.save_for_backward(q, kv, idx, sink, o, m, l)
        ctx.scale = float(scale)
        ctx.rows_per_seq = rows_per_seq
        ctx.keys_per_seq = keys_per_seq
        return o

    @staticmethod
    def backward(ctx, d_o):
        q, kv, idx, sink, o, m, l = ctx.saved_tensors
        n, H, D = q.shape
        T = idx.size(1)
        d_o = d_o.to(q.dtype).contiguous()
        dq = torch.empty_like(q)
        dkv = torch.zeros(kv.shape, dtype=F32, device=kv.device)
        dsink = torch.empty(n, H, dtype=F32, device=q.device)
        if n > 0:
            _attn_bwd_kernel[(n,)](q, kv, idx, sink, o, d_o, m, l, dq, dkv, dsink, ctx.scale, T, ctx.rows_per_seq, ctx.keys_per_seq,
                                   H=H, HP=heads_padded(H), D=D, BLOCK_K=BLOCK_K, num_warps=4)
        return dq, dkv.to(kv.dtype), dsink.sum(0), None, None, None, None, None


def sparse_attn(q, kv, sink, idx, scale, rows_per_seq: int | None = None, keys_per_seq: int = 0, row_max: bool | None = None):
    """o [n, H, D] bf16 of q [n, H, D] bf16 over the keys kv [N, D] bf16 that idx [n, T] (int32 or
    int64, -1 = none) selects, with the sink [H] fp32 in the denominator; differentiable in q, kv, sink.
    Indices are global when keys_per_seq is 0, else local to the row's sequence: row i reads key
    (i // rows_per_seq) * keys_per_seq + idx[i, t]. row_max: see ATTN_ROW_MAX (its value when None)."""
    n = q.size(0)
    if rows_per_seq is None or keys_per_seq == 0:
        rows_per_seq, keys_per_seq = max(n, 1), 0
    rm = ATTN_ROW_MAX if row_max is None else row_max
    return _SparseAttn.apply(q, kv, sink, idx, scale, int(rows_per_seq), int(keys_per_seq), bool(rm))


def index_keys(q, k, w, ratio: int, candidates=None, keys: bool = True):
    """Indexer.scores(q, k, w) with the causal mask (entry j visible from row i iff j < (i + 1) // ratio)
    and, when given, the candidate mask [B, S, N] (bool), as one kernel. keys=True: the int32 keys of
    model._keyed_topk_bf16 (torch.topk(keys, k).indices is the stable top-k of the masked bf16 scores);
    keys=False: the masked bf16 scores. q [B, S, HI, DI] bf16, k [B, N, DI] bf16, w [B, S, HI] bf16."""
    B, S, HI, DI = q.shape
    NK = k.size(1)
    if q.stride(-1) != 1:
        q = q.contiguous()
    if k.stride(-1) != 1:
        k = k.contiguous()
    out = torch.empty(B, S, NK, dtype=torch.int32 if keys else BF16, device=q.device)
    if candidates is not None:
        cand = candidates if candidates.stride(-1) == 1 else candidates.contiguous()
        cand = cand.view(torch.uint8)
        sc_b, sc_s = cand.stride(0), cand.stride(1)
    else:
        cand, sc_b, sc_s = out, 0, 0  # unused (HAS_CAND false)
    if B * S * NK == 0:
        return out
    grid = (triton.cdiv(S, IDX_BM), triton.cdiv(NK, IDX_BN), B)
    _index_keys_kernel[grid](q, k, w, cand, out, S, NK, int(ratio),
                             q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1),
                             w.stride(0), w.stride(1), w.stride(2), sc_b, sc_s, out.stride(0), out.stride(1),
                             HI=HI, DI=DI, BM=IDX_BM, BN=IDX_BN, HAS_CAND=candidates is not None, KEYS=keys, num_warps=4)
    return out


# --- CPU emulations of the blocked algorithms ---------------------------------------------------------


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """tl.dot of bf16 operands: exact products, fp32 sums (batched over the leading dim)."""
    return torch.bmm(a.float(), b.float())


def _load_rows(x: torch.Tensor, H: int, HP: int) -> torch.Tensor:
    """A masked [HP, D] load of the H rows of each program (other = 0)."""
    out = torch.zeros(x.size(0), HP, x.size(2), dtype=x.dtype)
    out[:, :H] = x
    return out


def _load_keys(kv, idx, base, t0, block_k):
    """One block of a program's indices and keys, as the kernels load them: (kidx, valid, krow, kv)."""
    n, T = idx.shape
    tk = t0 + torch.arange(block_k)
    kidx = torch.full((n, block_k), -1, dtype=idx.dtype)
    inside = tk < T
    kidx[:, inside] = idx[:, tk[inside]]
    valid = kidx >= 0
    krow = torch.where(valid, kidx, torch.zeros_like(kidx)).long() + base.view(n, 1)
    kvb = torch.where(valid.unsqueeze(-1), kv[krow.clamp(0, kv.size(0) - 1)], torch.zeros((), dtype=kv.dtype))
    return valid, krow, kvb


def _base(n, rows_per_seq, keys_per_seq):
    if rows_per_seq is None or keys_per_seq == 0:
        rows_per_seq, keys_per_seq = max(n, 1), 0
    return (torch.arange(n) // rows_per_seq) * keys_per_seq


def emulate_attn_forward(q, kv, sink, idx, scale, rows_per_seq=None, keys_per_seq=0, block_k=BLOCK_K, row_max=True):
    """_attn_fwd_kernel's algorithm over all programs at once: (o bf16 [n, H, D], m [n, H], l [n, H])."""
    n, H, D = q.shape
    T = idx.size(1)
    HP = heads_padded(H)
    base = _base(n, rows_per_seq, keys_per_seq)
    qp = _load_rows(q, H, HP)
    m_i = torch.full((n, HP), NEG_INIT, dtype=F32)
    l_i = torch.zeros(n, HP, dtype=F32)
    acc = torch.zeros(n, HP, D, dtype=F32)
    if row_max:
        for t0 in range(0, T, block_k):
            valid, _, kvb = _load_keys(kv, idx, base, t0, block_k)
            s = _dot(qp, kvb.transpose(1, 2)) * scale
            s = torch.where(valid.unsqueeze(1), s, torch.tensor(-torch.inf))
            m_i = torch.maximum(m_i, s.amax(dim=-1))
    for t0 in range(0, T, block_k):
        valid, _, kvb = _load_keys(kv, idx, base, t0, block_k)
        s = _dot(qp, kvb.transpose(1, 2)) * scale
        s = torch.where(valid.unsqueeze(1), s, torch.tensor(-torch.inf))
        m_new = torch.maximum(m_i, s.amax(dim=-1))
        alpha = torch.exp(m_i - m_new)
        p = torch.exp(s - m_new.unsqueeze(-1))
        l_i = l_i * alpha + p.sum(dim=-1)
        acc = acc * alpha.unsqueeze(-1) + _dot(p.to(BF16), kvb)
        m_i = m_new
    sp = torch.zeros(HP, dtype=F32)
    sp[:H] = sink.float()
    l_i = l_i + torch.exp(sp.view(1, HP) - m_i)
    o = acc / l_i.unsqueeze(-1)
    return o[:, :H].to(BF16), m_i[:, :H].clone(), l_i[:, :H].clone()


def emulate_attn_backward(q, kv, sink, idx, scale, o, m, l, d_o, rows_per_seq=None, keys_per_seq=0, block_k=BLOCK_K):  # noqa: E741
    """_attn_bwd_kernel's algorithm over all programs at once: (dq bf16, dkv bf16, dsink fp32), with the
    atomic adds as one index_add per block (the same sums in another order)."""
    n, H, D = q.shape
    T = idx.size(1)
    HP = heads_padded(H)
    base = _base(n, rows_per_seq, keys_per_seq)
    hmask = torch.arange(HP) < H
    qp = _load_rows(q, H, HP)
    do = _load_rows(d_o.to(q.dtype), H, HP).float()
    op = _load_rows(o, H, HP).float()
    mp = torch.zeros(n, HP, dtype=F32)
    mp[:, :H] = m
    lp = torch.ones(n, HP, dtype=F32)
    lp[:, :H] = l
    sp = torch.zeros(HP, dtype=F32)
    sp[:H] = sink.float()
    dn = do / lp.unsqueeze(-1)
    dden = -(do * op).sum(dim=-1) / lp
    dnb = dn.to(BF16)
    dq = torch.zeros(n, HP, D, dtype=F32)
    dkv = torch.zeros(kv.shape, dtype=F32)
    for t0 in range(0, T, block_k):
        valid, krow, kvb = _load_keys(kv, idx, base, t0, block_k)
        s = _dot(qp, kvb.transpose(1, 2)) * scale
        keep = hmask.view(1, HP, 1) & valid.unsqueeze(1)
        e = torch.where(keep, torch.exp(s - mp.unsqueeze(-1)), torch.zeros(()))
        pb = e.to(BF16)
        de = _dot(dnb, kvb.transpose(1, 2)) + dden.unsqueeze(-1)
        ds = (de * e).to(BF16)
        dq = dq + _dot(ds, kvb)
        dkvb = _dot(ds.transpose(1, 2), qp) * scale + _dot(pb.transpose(1, 2), dnb)  # [n, BLOCK_K, D]
        dkv.index_add_(0, krow[valid], dkvb[valid])
    dsink = (dden * torch.exp(sp.view(1, HP) - mp))[:, :H]
    return (dq * scale)[:, :H].to(BF16), dkv.to(kv.dtype), dsink.sum(0)


def emulate_index_keys(q, k, w, ratio: int, candidates=None, keys: bool = True, bm=IDX_BM, bn=IDX_BN):
    """_index_keys_kernel's algorithm, tile by tile (batched over B): int32 keys or bf16 scores [B, S, N]."""
    B, S, HI, DI = q.shape
    NK = k.size(1)
    out = torch.empty(B, S, NK, dtype=torch.int32 if keys else BF16)
    for pm in range((S + bm - 1) // bm):
        for pn in range((NK + bn - 1) // bn):
            rows = pm * bm + torch.arange(bm)
            cols = pn * bn + torch.arange(bn)
            rmask, cmask = rows < S, cols < NK
            rr, cc = rows.clamp(max=S - 1), cols.clamp(max=NK - 1)
            acc = torch.zeros(B, bm, bn, dtype=F32)
            if pn * bn < (pm * bm + bm) // ratio:
                kt = torch.where(cmask.view(1, bn, 1), k[:, cc], torch.zeros((), dtype=k.dtype))  # [B, BN, DI]
                for h in range(HI):
                    qh = torch.where(rmask.view(1, bm, 1), q[:, rr, h], torch.zeros((), dtype=q.dtype))  # [B, BM, DI]
                    wh = torch.where(rmask.view(1, bm), w[:, rr, h], torch.zeros((), dtype=w.dtype)).float()
                    s = _dot(qh, kt.transpose(1, 2)).to(BF16).float()
                    r = (s.clamp_min(0.0) * wh.unsqueeze(-1)).to(BF16).float()
                    acc = acc + r
            score = acc.to(BF16).float()
            keep = cols.view(1, bn) < ((rows + 1) // ratio).view(bm, 1)
            tmask = rmask.view(bm, 1) & cmask.view(1, bn)
            keep = keep.unsqueeze(0).expand(B, bm, bn)
            if candidates is not None:
                c = torch.where(tmask, candidates[:, rr][:, :, cc], torch.zeros((), dtype=torch.bool))
                keep = keep & c
            score = torch.where(keep, score, torch.tensor(-torch.inf))
            if keys:
                v = torch.where(score == 0, torch.zeros(()), score).to(BF16)
                bits = v.view(torch.int16).to(torch.int32)
                mono = torch.where(bits < 0, bits ^ 0x7FFF, bits)
                val = mono * 65536 + (65535 - cols.view(1, 1, bn).to(torch.int32))
            else:
                val = score.to(BF16)
            ri, ci = rows[rmask], cols[cmask]
            out[:, ri[:, None], ci[None, :]] = val[:, rmask][:, :, cmask]
    return out
