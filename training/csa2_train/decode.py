"""Stateful decode, as the reference's `Transformer.forward(ids, start_pos > 0)`: one token per step.

`Decoder(model)` runs a prefill through `Transformer.hidden` (which leaves its caches in `Ctx.state`),
then `step(token)` per new token: the window ring, the ratio-2 compressor's open group, the
compressed-KV and index-key caches and the reference's shared slots, with the reference's behaviour in
every detail, including that a KV source whose group is still open publishes no index keys, so its
indexer scores against the keys published last (csa2-reference.md; csa2-core reproduces this too).

Used by verify_tiny_a.py (the golden decode rows) and by comparisons with csa2-core's `generate`.
"""

import torch

from . import quant
from .model import (
    BF16,
    F32,
    Ctx,
    Indexer,
    Transformer,
    bf,
    hc_post,
    hc_pre,
    linear,
    rms_norm,
    rope_tail,
    select_candidate_blocks,
    sparse_attn_exact,
    sparse_attn_train,
    stable_topk_indices,
)
from . import model as _model


class Decoder:
    def __init__(self, model: Transformer):
        self.m = model
        self.a = model.args
        self.state: dict | None = None
        self.pos = 0
        self.trace: dict = {}  # per step: decode.layer{i}.topk rows (raw compressed positions)

    @torch.no_grad()
    def prefill(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, S]; returns the fp32 logits of the last position [B, vocab]."""
        ctx = Ctx(state={})
        h = self.m.hidden(ids, ctx)
        self.state = ctx.state
        self.pos = ids.size(1)
        B = ids.size(0)
        for i, layer in enumerate(self.m.layers):
            st = self.state[i]
            attn = layer.attn
            if attn.is_kv_source:
                cap = self.a.max_seq_len // attn.ratio
                ckv = torch.zeros(B, cap, self.a.head_dim, dtype=BF16, device=ids.device)
                ckv[:, : st["compress_kv"].size(1)] = st["compress_kv"]
                st["compress_kv"] = ckv
                if attn.indexer is not None and attn.indexer.owns_k:
                    kc = torch.zeros(B, cap, self.a.index_head_dim, dtype=BF16, device=ids.device)
                    if "index_k" in st:
                        kc[:, : st["index_k"].size(1)] = st["index_k"]
                    st["index_k"] = kc
        # the shared slots now point at full-size caches, as the reference's do
        sh = self.state["shared"]
        last_kv = [i for i, l in enumerate(self.m.layers) if l.attn.is_kv_source]
        if last_kv:
            sh.compress_kv = self.state[last_kv[-1]]["compress_kv"]
        owners = [i for i, l in enumerate(self.m.layers) if l.attn.indexer is not None and l.attn.indexer.owns_k and "index_k" in self.state[i]]
        if owners:
            # the last owner that published during the prefill (every owner with >= 1 group did)
            sh.index_k = self.state[owners[-1]]["index_k"]
        return self.m.logits(h[:, -1])

    @torch.no_grad()
    def step(self, token: torch.Tensor) -> torch.Tensor:
        """token [B]; runs position self.pos; returns the fp32 logits [B, vocab]."""
        m, a = self.m, self.a
        p = self.pos
        h = torch.nn.functional.embedding(token.view(-1, 1), bf(m.embed.weight))
        h = h.unsqueeze(2).repeat(1, 1, m.hc, 1)
        pre = torch.zeros(*h.shape[:3], dtype=F32, device=h.device)
        pre[..., 0] = 1.0
        for layer in m.layers:
            h, pre = self._block(layer, h, pre, p)
        h = rms_norm(hc_pre(h, pre), m.norm.weight, a.norm_eps)
        self.pos += 1
        return m.logits(h[:, -1])

    def _block(self, blk, x, pre_mix, p):
        residual = x
        a_pre, a_post, a_comb = blk.hc_mixes(x, blk.hc_attn_fn, blk.hc_attn_scale, blk.hc_attn_base)
        h = rms_norm(hc_pre(x, pre_mix), blk.attn_norm.weight, blk.norm_eps)
        h = self._attn(blk.attn, h, p)
        x = hc_post(h, residual, a_post, a_comb)
        residual = x
        f_pre, f_post, f_comb = blk.hc_mixes(x, blk.hc_ffn_fn, blk.hc_ffn_scale, blk.hc_ffn_base)
        h = rms_norm(hc_pre(x, a_pre), blk.ffn_norm.weight, blk.norm_eps)
        x = hc_post(blk.ffn(h), residual, f_post, f_comb)
        return x, f_pre

    def _attn(self, at, x, p):
        a = self.a
        st = self.state[at.layer_id]
        sh = self.state["shared"]
        B = x.size(0)
        dev = x.device
        rd, H, D, W = at.rd, at.n_heads, at.head_dim, at.window
        freqs_all = at.freqs(dev)
        fp = freqs_all[p : p + 1]
        qr = rms_norm(linear(x, bf(at.wq_a.weight)), at.q_norm.weight, at.eps)
        q = rope_tail(linear(qr, bf(at.wq_b.weight)).unflatten(-1, (H, D)), fp, rd)
        kv = rms_norm(linear(x, bf(at.wkv.weight)), at.kv_norm.weight, at.eps)
        kv = quant.fp8_window(rope_tail(kv, fp, rd))
        st["ring"][:, p % W] = kv[:, 0]
        oldest = p % W + 1
        win = torch.cat([torch.arange(oldest, W), torch.arange(oldest)]).to(dev)
        win = torch.where(win > p, -1, win).view(1, 1, W).expand(B, 1, W)
        kv_all, idx_all = st["ring"], win
        if at.ratio:
            r = at.ratio
            end = p + 1
            compress_len = end // r
            latent = None
            if at.is_kv_source:
                latent = self._compress(at.compressor, st, x, p)
                sh.compress_kv = st["compress_kv"]
            if at.is_index_source:
                if compress_len == 0:
                    idxs = torch.empty(B, 1, 0, dtype=torch.int32, device=dev)
                else:
                    idxs = self._index(at, st, sh, x, qr, latent, p, W, freqs_all)
                sh.topk_idxs = idxs
            else:
                idxs = sh.topk_idxs
            if latent is not None:
                lat = quant.fp4_main(rope_tail(latent, freqs_all[p + 1 - r : p + 2 - r], rd))
                st["compress_kv"][:, p // r] = lat[:, 0]
            ckv = sh.compress_kv[:, :compress_len]
            kv_all = torch.cat([kv_all, ckv], dim=1)
            idx_all = torch.cat([idx_all, idxs], dim=-1)
        if _model._EXACT:
            o = sparse_attn_exact(q, kv_all, at.attn_sink, idx_all.int(), at.softmax_scale)
        else:
            o = sparse_attn_train(q, kv_all, at.attn_sink, idx_all, at.softmax_scale, 8192)
        o = rope_tail(o, fp, rd, inverse=True)
        return at.project_out(o)

    def _compress(self, c, st, x, p):
        r = c.ratio
        if r == 1:
            return rms_norm(linear(x, bf(c.wkv.weight)), c.norm.weight, c.norm_eps)
        xf = x.float()
        slot = p % r
        st["kv_state"][:, slot] = linear(xf, bf(c.wkv.weight).float())[:, 0]
        st["score_state"][:, slot] = linear(xf, bf(c.wgate.weight).float())[:, 0]
        if (p + 1) % r != 0:
            return None
        kv = (st["kv_state"] * st["score_state"].softmax(dim=1)).sum(dim=1, keepdim=True)
        return rms_norm(kv.to(x.dtype), c.norm.weight, c.norm_eps)

    def _index(self, at, st, sh, x, qr, latent, p, offset, freqs_all):
        ix = at.indexer
        r = ix.ratio
        end = p + 1
        if ix.owns_k and latent is not None:
            k = ix.index_keys(latent, freqs_all[p + 1 - r : p + 2 - r])
            st["index_k"][:, p // r] = k[:, 0]
            sh.index_k = st["index_k"]
        qi, w = ix.queries(x, qr, freqs_all[p : p + 1])
        index_k = sh.index_k[:, : end // r]
        score = Indexer.scores(qi, index_k, w)
        compress_lens = end // r
        if ix.is_candidate_source:
            sh.candidates = select_candidate_blocks(score, compress_lens, ix.topk_blocks, ix.block_size)
        elif ix.uses_candidates:
            score = score.masked_fill(~sh.candidates, -torch.inf)
        k = min(ix.topk, end // r)
        raw = stable_topk_indices(score, k).sort(dim=-1).values
        raw = torch.where(raw < compress_lens, raw, -1)
        self.trace.setdefault(f"decode.layer{at.layer_id}.topk", []).append(raw[0, 0].int())
        return torch.where(raw >= 0, raw + offset, -1).int()
