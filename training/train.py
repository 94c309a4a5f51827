"""Train a csa2 mini model (V4.1 architecture, released 40-layer schedule) on a CUDA GPU, resumably.
training/run.py runs the served model's recipe (training/configs/v41-mini-128k.run.json) through this script.

    python3 training/train.py --config training/configs/v41-mini-128k.json \
        --tokenizer models/v41-mini-128k/tokenizer.json --out $OUT --time-budget-s 480 \
        --phases 512:0.3,1024:0.4,2048:0.3 [--init DIR] [--state-dir DIR] [--decay-frac 0.25]

Each invocation (a segment of a run) trains for --time-budget-s seconds of wall time, then evaluates
and saves; the phase shares and the LR decay are fractions of that budget. The next invocation continues
from what it left:
- the full state (fp32 master weights, AdamW moments, step, tokens) in --state-dir, used when it is at
  least as far as --init's step;
- otherwise a warm restart from --init (served bf16 weights, e.g. the previous segment's, in two
  shards) with fresh AdamW moments and --warmup-steps of LR warm-up.

Loss: next-token cross-entropy on every position, plus --answer-weight x the cross-entropy of the
synthetic tasks' answer tokens, plus the indexers' KL to the main attention (model.py `_indexer_kl`;
that gradient reaches only the indexer weights). MoE load balance: the gate bias is moved by
--bias-rate x sign(mean load - load) after each step (DeepSeek's auxiliary-loss-free rule).

Writes to --out: model-0000{1,2}-of-00002.safetensors + model.safetensors.index.json (official names,
bf16 + fp32 hc/sink/bias), config.json, log.jsonl (one record per logged step and per evaluation),
train_meta.json (step, tokens, per-phase figures).
"""

import argparse
import contextlib
import json
import random
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from csa2_train import model as M  # noqa: E402
from csa2_train.config import ModelArgs  # noqa: E402
from csa2_train.data import EVAL_SOURCES, SOURCES, TASKS, Corpus, make_batch  # noqa: E402
from csa2_train.phrasings import parse_task_spec  # noqa: E402

HERE = Path(__file__).resolve().parent


def parse_phases(s: str):
    """`seq_len:share,...` -> [(lengths, share)]: a phase of one length ("4096:0.3") or a mixed-length
    phase ("32768*2+4096:0.5": its steps cycle through the lengths in the order written, a length with
    `*k` taking k consecutive steps of the cycle; every step has --tokens-per-step tokens, so such a
    phase trains the lengths in the ratio of their step counts, here 2:1 in steps and tokens)."""
    out = []
    for part in s.split(","):
        spec, frac = part.split(":")
        cycle = []
        for item in spec.split("+"):
            L, _, k = item.partition("*")
            cycle += [int(L)] * (int(k) if k else 1)
        out.append((cycle, float(frac)))
    tot = sum(f for _, f in out)
    return [(c, f / tot) for c, f in out]


def phase_name(cycle) -> int | str:
    """A phase's seq_len in the logs: the length, or the spec of a mixed phase ("32768*2+4096")."""
    if len(set(cycle)) == 1:
        return cycle[0]
    parts, i = [], 0
    while i < len(cycle):
        j = i
        while j < len(cycle) and cycle[j] == cycle[i]:
            j += 1
        parts.append(f"{cycle[i]}*{j - i}" if j - i > 1 else str(cycle[i]))
        i = j
    return "+".join(parts)


def load_weights(path: Path) -> dict:
    idx = path / "model.safetensors.index.json"
    if idx.exists():
        files = sorted(set(json.loads(idx.read_text())["weight_map"].values()))
        sd = {}
        for f in files:
            sd.update(load_file(str(path / f)))
        return sd
    return load_file(str(path / "model.safetensors"))


def save_sharded(sd: dict, out: Path, n_shards: int = 2) -> None:
    names = list(sd)
    total = sum(t.numel() * t.element_size() for t in sd.values())
    per = total / n_shards
    shards, cur, acc = [], {}, 0
    for k in names:
        cur[k] = sd[k]
        acc += sd[k].numel() * sd[k].element_size()
        if acc >= per * (len(shards) + 1) and len(shards) < n_shards - 1:
            shards.append(cur)
            cur = {}
    shards.append(cur)
    wm = {}
    for i, sh in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(sh, str(out / fn), metadata={"format": "pt"})
        wm.update({k: fn for k in sh})
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": wm}, indent=1))


def replay_starts(am: torch.Tensor, R: int, frac: float, rng: random.Random, doc_end=None, doc_frac: float = 0.0, info: dict | None = None):
    """Per sequence the decoder-replay start p for model.Ctx.replay_start (None when R = 0): with
    probability frac, a task sequence gets p = (its prompt length) - R, the replay csa2-serve runs before
    generating the answer; a plain text sequence a random p; the others 0 (exact).

    With doc_frac > 0 (and doc_end, data.Sample.doc_end per sequence), a replayed sequence is with
    probability doc_frac also given the stored-document path's encoder replay (model.Ctx.encoder_replay_start):
    the question appended to a stored document of D tokens re-runs the encoder from D - R. D is the
    question's first token in a task sequence; in a plain text sequence the prompt ends at p + R and its
    last 16..64 tokens are the question (D = p + R - q, the encoder start p - q). Returns (decoder starts,
    encoder starts or None when doc_frac = 0). With `info` (a dict), info["doc_text"] lists the plain text
    sequences given the stored-document path (the distillation term's rows); the draws are the same with
    or without it."""
    if R <= 0 or frac <= 0:
        return None, None
    B, S = am.shape
    p = torch.zeros(B, dtype=torch.long)
    e = torch.zeros(B, dtype=torch.long) if doc_frac > 0 else None
    doc_text = []
    for b in range(B):
        if rng.random() < frac:
            nz = torch.nonzero(am[b]).flatten()
            p[b] = max(0, int(nz[0]) + 1 - R) if nz.numel() else rng.randrange(0, S)
            if e is not None and rng.random() < doc_frac:
                if nz.numel() and doc_end is not None and int(doc_end[b]) >= 0:
                    e[b] = max(0, int(doc_end[b]) - R)
                else:
                    e[b] = max(0, int(p[b]) - rng.randint(16, 64))
                    if not nz.numel():
                        doc_text.append(b)
    if info is not None:
        info["doc_text"] = doc_text
    return p, e


def distill_plan(doc_text: list, rs: torch.Tensor, S: int, n_rows: int):
    """The rows of the distillation term. For each text sequence b of `doc_text` (given the
    stored-document path, decoder replay from p = rs[b] >= 1): its rows p .. p + n_rows - 1, clipped to the
    S - 1 logit rows. Returns None when there is none, else (the sequences [k] as a list, the teacher's
    length, the flat (sequence position in the list, row) pairs as two long tensors on the CPU)."""
    seqs, jj, rr = [], [], []
    for b in doc_text:
        p = int(rs[b])
        hi = min(S - 1, p + n_rows)
        if p < 1 or hi <= p:
            continue
        jj.append(torch.full((hi - p,), len(seqs), dtype=torch.long))
        rr.append(torch.arange(p, hi, dtype=torch.long))
        seqs.append(b)
    if not seqs:
        return None
    rows = torch.cat(rr)
    # the teacher's forward is causal: it needs the tokens up to the last row only (rounded up to 256, at most S)
    t_len = min(S, -(-(int(rows.max()) + 1) // 256) * 256)
    return seqs, t_len, torch.cat(jj), rows


def needle_spans(ids: np.ndarray, am: np.ndarray):
    """Per sequence (query row, needle lo, needle hi) for model.Ctx.kl_focus, as int64 arrays [3, B]: the
    query row is the row that predicts the first answer token; the needle is the first occurrence of the
    answer's tokens (without its leading token when the whole answer is not found) before that row: the
    value the answer copies. Row -1 where there is no answer or no match (plain text; multi-value and
    variable-tracking answers are not one span of the prompt, so they rarely match)."""
    B = ids.shape[0]
    out = np.full((3, B), -1, dtype=np.int64)
    for b in range(B):
        nz = np.nonzero(am[b])[0]
        if nz.size < 2:
            continue
        q = int(nz[0])
        ans = ids[b, nz[:-1] + 1]  # the answer tokens (the mask's last row predicts eos)
        prompt = ids[b, : q + 1]
        for a in (ans, ans[1:]):
            if a.size == 0 or a.size > prompt.size:
                continue
            win = np.lib.stride_tricks.sliding_window_view(prompt, a.size)
            hit = np.nonzero((win == a).all(axis=1))[0]
            if hit.size:
                out[:, b] = (q, int(hit[0]), int(hit[0]) + a.size)
                break
    return out


def focus_tensors(spans: np.ndarray, device) -> tuple:
    return tuple(torch.from_numpy(np.ascontiguousarray(spans[i])).to(device) for i in range(3))


def needle_summary(stats: list) -> dict:
    """ctx.needle_stats -> {layer: mean share of the needle's entries in the top-k} over the sequences with a needle."""
    per = {}
    for layer, v in stats:
        per.setdefault(layer, []).append(v.float().cpu())
    out = {}
    for layer, vs in sorted(per.items()):
        v = torch.cat([x.flatten() for x in vs])
        v = v[~torch.isnan(v)]
        if v.numel():
            out[str(layer)] = round(float(v.mean()), 3)
    return out


def train_step(model, opt, ids, am, ctx_kw, answer_weight, lr, timing=False, replay_start=None, kl_focus=None, encoder_replay_start=None, distill=None):
    """One optimizer step: forward, loss (LM + answer_weight x answer tokens + indexer KL [+ distillation]),
    backward, clip, AdamW. Returns the detached losses, the grad norm, the Ctx (indexer stats) and host times.

    distill: (weight, distill_plan(...)) or None. The plan's sequences run first through an exact
    forward without gradient (the teacher; before the student so that the MoE's last_counts, which the bias
    rule reads, are the student's), and weight x the mean over the plan's rows of KL(exact || the student's
    replayed row) is added to the loss."""
    if lr is not None:
        set_lr(opt, lr)
    dev = ids.device
    t_lp = None
    if distill is not None:
        dw, (d_seqs, t_len, d_j, d_rows) = distill
        d_b = torch.tensor(d_seqs, dtype=torch.long, device=dev)
        d_j, d_rows = d_j.to(dev), d_rows.to(dev)
        with torch.no_grad():
            th = model.hidden(ids[d_b, :t_len], M.Ctx(attn_chunk_tokens=ctx_kw.get("attn_chunk_tokens", 8192)))
            t_lp = torch.log_softmax(model.logits(th[d_j, d_rows]), dim=-1)
            del th
    ctx = M.Ctx(**ctx_kw, replay_start=replay_start, kl_focus=kl_focus, encoder_replay_start=encoder_replay_start)
    h = model.hidden(ids, ctx)
    logits = model.logits(h[:, :-1])
    tgt = ids[:, 1:]
    ce = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt.reshape(-1), reduction="none").view_as(tgt)
    lm_loss = ce.mean()
    amf = am[:, :-1].float()
    n_ans = amf.sum().clamp_min(1)
    ans_loss = (ce * amf).sum() / n_ans
    kl = torch.stack(ctx.kl_losses).mean() if ctx.kl_losses else torch.zeros((), device=dev)
    loss = lm_loss + answer_weight * ans_loss + kl
    dkl = None
    if t_lp is not None:
        s_lp = torch.log_softmax(logits[d_b[d_j], d_rows], dim=-1)
        dkl = (t_lp.exp() * (t_lp - s_lp)).sum(-1).mean()
        loss = loss + dw * dkl
    if timing:
        torch.cuda.synchronize()
    t_fwd = time.time()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if timing:
        torch.cuda.synchronize()
    t_bwd = time.time()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return {"lm_loss": lm_loss.detach(), "ans_loss": ans_loss.detach(), "kl": kl.detach(), "grad_norm": gn, "ctx": ctx, "t_fwd": t_fwd, "t_bwd": t_bwd,
            "distill_kl": None if dkl is None else dkl.detach(), "distill_rows": 0 if t_lp is None else int(t_lp.size(0))}


def set_lr(opt, lr: float) -> None:
    for g in opt.param_groups:
        if isinstance(g["lr"], torch.Tensor):
            g["lr"].fill_(lr)  # a device tensor: what a captured AdamW step reads
        else:
            g["lr"] = lr


class GraphStep:
    """train_step captured as one CUDA graph for one batch shape (forward, backward, clip, AdamW).

    Why: the step is ~150K small kernels (40 blocks x hyper-connection Sinkhorn iterations, quantizers,
    casts, the recomputation of checkpointed blocks), and eager PyTorch launches them slower than the
    GPU runs them; a replayed graph launches them back to back. Requirements, all met by the model:
    static shapes, no host synchronization, RNG only through graph-safe generators (the KL's draws),
    an AdamW with capturable=True and its LR a device tensor (set_lr fills it before each replay).
    The inputs are copied into static buffers; the outputs (losses, grad norm, ctx stats, the MoE
    loads read by the bias rule) are static tensors that each replay overwrites."""

    def __init__(self, model, opt, ctx_kw, answer_weight, ids, am, lr, replay_start=None):
        """Runs one real (eager) step on (ids, am) on the capture's side stream, its warm-up, whose
        result is `first_out`, then captures the step (capturing runs nothing)."""
        self.shape = tuple(ids.shape)
        self.ids = ids.clone()
        self.am = am.clone()
        self.rs = None if replay_start is None else replay_start.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.first_out = train_step(model, opt, self.ids, self.am, ctx_kw, answer_weight, lr, replay_start=self.rs)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        opt.zero_grad(set_to_none=True)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, stream=side):
            self.out = train_step(model, opt, self.ids, self.am, ctx_kw, answer_weight, None, replay_start=self.rs)
        torch.cuda.synchronize()

    def __call__(self, ids, am, replay_start=None):
        self.ids.copy_(ids, non_blocking=True)
        self.am.copy_(am, non_blocking=True)
        if (self.rs is None) != (replay_start is None):
            raise ValueError("GraphStep: replay_start must be given at every step or at none")
        if replay_start is not None:
            self.rs.copy_(replay_start, non_blocking=True)
        self.graph.replay()
        t = time.time()
        return {**self.out, "t_fwd": t, "t_bwd": t}

    def release(self, opt):
        opt.zero_grad(set_to_none=True)
        self.graph.reset()
        self.graph = self.out = None


class Producer:
    """Batches made in the training process, between steps. A GPU step is queued asynchronously, so
    making the next batch (tenths of a second) overlaps the GPU's work; no worker processes (forked
    workers of a process holding a CUDA context and thread pools are a deadlock risk)."""

    def __init__(self, corpus, seed, task_fraction, task_weights=None, phrasing_frac=0.0):
        self.corpus, self.task_fraction, self.task_weights = corpus, task_fraction, task_weights
        self.phrasing_frac = phrasing_frac
        self.rng = random.Random(seed)
        self.shape = None

    def set_shape(self, batch, seq_len):
        self.shape = (batch, seq_len)

    def get(self):
        for _ in range(100):
            try:
                ids, am, tasks, doc_end = make_batch(self.corpus, self.rng, self.shape[0], self.shape[1], self.task_fraction, task_weights=self.task_weights, with_doc_end=True, phrasing_frac=self.phrasing_frac)
                return torch.from_numpy(ids), torch.from_numpy(am), tasks, doc_end
            except Exception as e:  # noqa: BLE001 - a bad draw must not stop training
                print(json.dumps({"type": "producer_error", "error": repr(e)[:300]}), flush=True)
        raise RuntimeError("data producer failed 100 times in a row")

    def close(self):
        pass


def eval_depths(n_per):
    """The evaluation's needle depths: n_per spread over 5..95%."""
    return [0.05 + 0.9 * i / max(1, n_per - 1) for i in range(n_per)]


def eval_sample(corpus, seed, task, L, i, depth):
    """Held-out sample i of `task` at length L, as evaluate draws it (its own seeded stream). task: a task
    spec TASK[.PHRASING[.HAYSTACK]] (phrasings.parse_task_spec): `passkey` is the canonical wording on the
    held-out text, `passkey.heldout` the held-out wordings, `passkey.heldout.genre` those on the
    evaluation-only genre; each spec has its own stream (the plain task names' samples are unchanged)."""
    name, phrasing, hay = parse_task_spec(task)
    return corpus.task_sample(random.Random(zlib.crc32(f"{seed}/{task}/{L}/{i}".encode())), name, L + 64, hay, target_len=L, depth=depth, phrasing=phrasing)


@contextlib.contextmanager
def matmul_precision(kind):
    """TF32 allowed (kind "tf32") or not ("fp32") inside the block; the previous setting restored after it."""
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = kind == "tf32"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@torch.no_grad()
def evaluate(model, corpus, device, lengths, n_per, seed, lm_batches=4, replay=0, tasks=TASKS, passes=("exact", "replay", "doc"), kl=True, kl_n=8):
    """Held-out figures: LM loss on held-out text, and per task and length the answer accuracy
    (exact = every answer token is the argmax given the right prefix, i.e. greedy decoding would
    produce the answer) at depths spread over 5..95%. With replay = R > 0 also under csa2-serve's
    decoder replay over the last R prompt tokens (`_replayR`: a prompt sent whole) and under the
    stored-document path (`_docR`: the haystack stored as a document, the question appended; the
    encoder replayed from D - R as well, D the question's first token), and replay_kl (kl).
    passes: which of "exact", "replay", "doc" to run. n_per: samples per cell, an int or {length: n}
    (the recipe: 32 at 4K-8K, 16 beyond; the samples of a cell depend on its n through the depths).
    Each cell also records every sample's answer and each pass's predicted answer tokens (`want`, `pred`,
    `pred_replayR`, `pred_docR`: the argmax at each answer position given the right prefix, decoded)."""
    model.eval()
    rng = random.Random(seed)
    out = {"lm_loss": None, "tasks": {}}
    losses = []
    for _ in range(lm_batches):
        ids = torch.from_numpy(np.stack([corpus.lm_window(rng, 1024, "heldout") for _ in range(8)]).astype(np.int64)).to(device)
        logits = model(ids, M.Ctx())
        losses.append(F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1)).item())
    out["lm_loss"] = float(np.mean(losses)) if losses else None
    if "genre" in corpus.ids and lm_batches:  # the same on the evaluation-only genre (own stream: the figures above are unchanged)
        grng, gl = random.Random(seed + 1), []
        for _ in range(lm_batches):
            ids = torch.from_numpy(np.stack([corpus.lm_window(grng, 1024, "genre") for _ in range(8)]).astype(np.int64)).to(device)
            logits = model(ids, M.Ctx())
            gl.append(F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1)).item())
        out["lm_loss_genre"] = float(np.mean(gl))
    for L in lengths:
        for task in tasks:
            n_L = n_per.get(L, n_per.get(0)) if isinstance(n_per, dict) else n_per
            samples = [eval_sample(corpus, seed, task, L, i, d) for i, d in enumerate(eval_depths(n_L))]
            T = max(s.length for s in samples)
            ids = np.full((len(samples), T), corpus.eos, dtype=np.int64)
            am = np.zeros((len(samples), T), dtype=bool)
            for i, s in enumerate(samples):
                ids[i, : s.length] = s.ids[: s.length]
                m = s.answer_mask[: s.length].copy()
                m[np.nonzero(m)[0][-1]] = False  # the answer tokens, not the closing eos
                am[i, : s.length] = m
            ids_t = torch.from_numpy(ids).to(device)
            chunk = max(1, 65536 // T)
            tgt = np.concatenate([ids[:, 1:], np.full((len(samples), 1), corpus.eos)], axis=1)
            rec = {"n": len(samples), "tokens": int(T), "want": [corpus.tok.decode(tgt[i][am[i]].tolist()) for i in range(len(samples))]}
            # exact, and with csa2-serve's decoder replay over the last R prompt tokens (the answer is generated after it)
            starts = torch.tensor([max(0, int(np.nonzero(am[i])[0][0]) + 1 - replay) for i in range(len(samples))]) if replay > 0 else None
            enc = torch.tensor([max(0, s.doc_end - replay) for s in samples]) if replay > 0 else None
            spans = needle_spans(ids, am)
            runs = [("", None, None, "exact"), (f"_replay{replay}", starts, None, "replay"), (f"_doc{replay}", starts, enc, "doc")]
            for tag, rs, es, name in runs:
                if name not in passes or (tag and rs is None):
                    continue
                preds = []
                nstats = []
                for i in range(0, len(samples), chunk):
                    # the exact pass also records, per index layer, the share of the needle's entries in the top-k at the question's last row
                    focus = None if tag else focus_tensors(spans[:, i : i + chunk], device)
                    ctx = M.Ctx(replay_start=None if rs is None else rs[i : i + chunk].to(device), kl_focus=focus,
                                encoder_replay_start=None if es is None else es[i : i + chunk].to(device))
                    preds.append(model(ids_t[i : i + chunk], ctx).argmax(-1).cpu())
                    nstats += ctx.needle_stats
                if not tag:
                    rec["needle_in_topk"] = needle_summary(nstats)
                    rec["needle_found"] = int((spans[0] >= 0).sum())
                pred = torch.cat(preds).numpy()
                ok = (pred == tgt) | ~am
                rec["exact" + tag] = float(ok.all(axis=1).mean())
                rec["token_acc" + tag] = float(((pred == tgt) & am).sum() / am.sum())
                rec["pred" + tag] = [corpus.tok.decode(pred[i][am[i]].tolist()) for i in range(len(samples))]
            out["tasks"][f"{task}@{L}"] = rec
    if replay > 0 and kl:
        out["replay_kl"] = replay_kl(model, corpus, device, replay, n_passages=kl_n)
    model.train()
    return out


def kl_passages(corpus, doc_tokens=4096, question_tokens=32, steps=16, n_passages=8):
    """Held-out passages of the KL figure, each doc + question + forced tokens long (int64 arrays).

    Passage 0 is the CPU bench's (bench/src/retrieval-bench.ts klOnRealText): the first held-out text
    (Austen) from the first newline after a third of it, `<|bos|>` + the tokens of doc_tokens x 5
    characters; the others start the same way at the first newline after 10% and 60% of Austen's and
    Moby Dick's held-out text and after 10%, a third and 60% of Brown's: 8 passages in all. n_passages = 16
    adds 8 more after 20%, 45%, 71% and 80% of Austen's and 20%, 45%, 70% and 90% of Brown's
    held-out text (none overlaps another; Moby Dick's held-out text, 61.5K characters, has room for no more
    20K-character passages that do not overlap; the first 8 unchanged)."""
    need = doc_tokens + question_tokens + steps
    out = []
    fracs = ((0, 1 / 3), (0, 0.1), (0, 0.6), (1, 0.1), (1, 0.6), (2, 0.1), (2, 1 / 3), (2, 0.6),
             (0, 0.2), (0, 0.45), (0, 0.71), (0, 0.8), (2, 0.2), (2, 0.45), (2, 0.7), (2, 0.9))
    # n_passages = 48: 32 more, from the first newline after each of the 16 positions above moved back
    # by 5,000 and by 10,000 characters (at least 0): their documents overlap the first 16 passages' (the held-out
    # text has room for ~22 disjoint 20K-character passages), their KL rows (the last ~200 characters) do not
    plan = [(src, frac, 0) for src, frac in fracs] + [(src, frac, back) for back in (5000, 10000) for src, frac in fracs]
    used = set()
    for src, frac, back in plan[:n_passages]:
        text = corpus.text["heldout"][src]
        start = text.find("\n", max(0, int(len(text) * frac) - back)) + 1
        while (src, start) in used:  # Moby Dick's 10% moved back 5,000 and 10,000 characters: the same newline
            start = text.find("\n", start + 2500) + 1
        used.add((src, start))
        ids = [corpus.bos] + corpus.tok.encode(text[start : start + doc_tokens * 5]).ids
        if len(ids) >= need:
            out.append(np.array(ids[:need], dtype=np.int64))
    return out


@torch.no_grad()
def replay_kl(model, corpus, device, R, doc_tokens=4096, question_tokens=32, steps=16, n_passages=8, batch=0):
    """KL(exact || decoder replay R) of next-token distributions on held-out text, as the CPU bench
    measures it: a doc_tokens passage stored as a document, the next question_tokens tokens the question
    (the prompt is P = doc + question tokens), steps teacher-forced decode steps; the KL at the rows that
    predict the steps' tokens (P - 1 .. P + steps - 2), replay starting at P - R (model.Ctx.replay_start),
    in the training numerics, float64 softmax. Returns the mean / max over the bench's passage (passage
    0) and over all passages, for the decoder replay alone and (doc_*) with the stored-document path's
    encoder replay from doc_tokens - R too."""
    was = model.training
    model.eval()
    P = doc_tokens + question_tokens
    seqs = kl_passages(corpus, doc_tokens, question_tokens, steps, n_passages)
    ids = torch.from_numpy(np.stack(seqs)[:, : P + steps - 1]).to(device)
    rows = torch.arange(P - 1, P + steps - 1, device=device)
    n = ids.size(0)
    dec = torch.full((n,), P - R, dtype=torch.long, device=device)
    enc = torch.full((n,), doc_tokens - R, dtype=torch.long, device=device)
    logp = {}
    # "replay": the decoder replay alone (a prompt sent whole: `generate --replay R`); "doc": the stored-document
    # path the bench measures, where appending the question also re-runs the encoder from D - R (Ctx.encoder_replay_start).
    # batch > 0: the passages run in consecutive batches of that many (the batch composition; 0 = all at once)
    b = batch if batch > 0 else n
    for tag in ("exact", "replay", "doc"):
        parts = []
        for i in range(0, n, b):
            j = min(n, i + b)
            ctx = {"exact": M.Ctx(), "replay": M.Ctx(replay_start=dec[i:j]), "doc": M.Ctx(replay_start=dec[i:j], encoder_replay_start=enc[i:j])}[tag]
            h = model.hidden(ids[i:j], ctx)
            parts.append(torch.log_softmax(model.logits(h[:, rows]).double(), dim=-1))
            del h
        logp[tag] = torch.cat(parts)
    out = {"R": R, "passages": len(seqs), "rows_each": steps, "batch": b}
    for tag, pre in (("replay", ""), ("doc", "doc_")):
        kl = (logp["exact"].exp() * (logp["exact"] - logp[tag])).sum(-1).clamp_min(0)  # [n, steps]
        out.update({f"{pre}bench_passage_mean": float(kl[0].mean()), f"{pre}bench_passage_max": float(kl[0].max()), f"{pre}mean": float(kl.mean()),
                    f"{pre}max": float(kl.max()), f"{pre}median_row": float(kl.flatten().median()), f"{pre}per_passage_mean": [round(float(x), 6) for x in kl.mean(-1)],
                    f"{pre}mean_first8": float(kl[:8].mean()), f"{pre}mean_first16": float(kl[:16].mean())})
    model.train(was)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", type=Path, default=HERE / "configs" / "v41-mini-128k.json")
    ap.add_argument("--tokenizer", type=Path, default=HERE.parent / "models" / "v41-mini-128k" / "tokenizer.json")
    ap.add_argument("--corpus", type=Path, default=HERE / "data" / "corpus")
    ap.add_argument("--corpus-sources", default=",".join(SOURCES), help="the training sources (their first 95%%), data/corpus/NAME.txt.gz; "
                    "all: austen,mobydick,brown,kjv,pydoc,debref (data.TRAIN_SOURCES_ALL)")
    ap.add_argument("--heldout-sources", default=",".join(SOURCES), help="the sources whose last 5%% is the held-out text (LM loss, task haystacks, replay_kl); "
                    "the default keeps the figures comparable with the served model's")
    ap.add_argument("--eval-sources", default=",".join(EVAL_SOURCES), help="evaluation-only sources (the held-out genre: task specs TASK.PHRASING.genre, lm_loss_genre); '' = none")
    ap.add_argument("--phrasing-frac", type=float, default=0.0, help="share of the task samples worded from the 'train' phrasing set "
                    "(csa2_train/phrasings.py); the rest canonical. 0: the batches are those of before")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--init", type=Path, default=None, help="served weights to continue from (warm restart)")
    ap.add_argument("--state-dir", type=Path, default=HERE / "state" / "full", help="the full training state (train_state.pt)")
    ap.add_argument("--time-budget-s", type=float, default=480)
    ap.add_argument("--phases", default="512:0.3,1024:0.4,2048:0.3", help="seq_len:fraction of the time budget, ...")
    ap.add_argument("--tokens-per-step", type=int, default=131072)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup-steps", type=int, default=100)
    ap.add_argument("--decay-frac", type=float, default=0.0, help="linear LR decay over the last fraction of the time budget")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--task-fraction", type=float, default=0.4)
    ap.add_argument("--task-weights", default="", help="task:weight,... (default: uniform over the tasks)")
    ap.add_argument("--answer-weight", type=float, default=1.0)
    ap.add_argument("--replay-tokens", type=int, default=0, help="decoder-replay simulation: R (0 = off; csa2-serve's default is 128)")
    ap.add_argument("--replay-frac", type=float, default=0.5, help="share of the sequences trained with the replay simulation")
    ap.add_argument("--doc-replay-frac", type=float, default=0.0, help="share of the replayed sequences also given the stored-document path's encoder replay from D - R (replay_starts; 0 = decoder replay only)")
    ap.add_argument("--distill-weight", type=float, default=0.0, help="weight of the mean KL(exact || stored-document replay) over the distilled rows of the text sequences given the stored-document path (train_step's distill; 0 = off)")
    ap.add_argument("--distill-rows", type=int, default=192, help="rows p .. p + N - 1 of each distilled text sequence (p: its decoder-replay start)")
    ap.add_argument("--eval-replay", type=int, default=128, help="also score the held-out tasks with decoder replay over the last R tokens (0 = off)")
    ap.add_argument("--kl-rows", type=int, default=128)
    ap.add_argument("--kl-extra", type=int, default=64, help="random visible entries added to the selected ones in the indexer KL's support")
    ap.add_argument("--kl-focus-weight", type=float, default=0.0, help="needle focus (model.Ctx.kl_focus): > 0 makes the indexer KL's row 0 the answer's query row, with the needle's entries in its support, and adds that row's KL again with this weight (0 = off)")
    ap.add_argument("--pre-eval", action="store_true", help="measure replay_kl before training too (the starting checkpoint's figure)")
    ap.add_argument("--bias-rate", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--compile", choices=["off", "on", "auto"], default="off")
    ap.add_argument("--graph", choices=["off", "on"], default="off", help="replay the training step as a CUDA graph (GraphStep; +2%% measured, one capture per phase)")
    ap.add_argument("--fast", type=int, default=1, help="model.set_fast: the fast paths (same values)")
    ap.add_argument("--kernels", choices=("auto", "triton", "torch"), default="auto",
                    help="model.set_kernels: the sparse attention and the indexer's scoring as Triton kernels (triton), "
                         "as PyTorch (torch), or triton where Triton and CUDA are present (auto)")
    ap.add_argument("--eval-lengths", default="512,1024,2048,4096")
    ap.add_argument("--eval-n", type=int, default=6)
    ap.add_argument("--eval-n-by-length", default="", help="length:n,... overriding --eval-n at those lengths (e.g. 4096:32,8192:32)")
    ap.add_argument("--kl-passages", type=int, default=8, help="held-out passages of replay_kl (8, 16 or 48: kl_passages)")
    ap.add_argument("--pre-eval-lengths", default="", help="with --pre-eval: also evaluate the starting checkpoint's tasks (exact pass, --eval-n per cell) at these lengths before training")
    ap.add_argument("--eval-tasks", default=",".join(TASKS), help="the held-out task specs evaluated (default: all tasks, canonical wording): TASK[.PHRASING[.HAYSTACK]], "
                    "e.g. passkey,niah_single,passkey.heldout,niah_single.heldout.genre (phrasings.parse_task_spec)")
    ap.add_argument("--eval-passes", default="exact,replay,doc", help="the evaluation's task passes (evaluate: exact, replay = decoder replay R, doc = the stored-document path)")
    ap.add_argument("--eval-lm-batches", type=int, default=4)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--save-every-s", type=float, default=150)
    ap.add_argument("--eval-reserve-s", type=float, default=45, help="time kept for the final evaluation and save")
    ap.add_argument("--eval-precision", choices=("tf32", "fp32"), default="tf32",
                    help="matmul precision of the evaluations (training itself always allows TF32). fp32 is what csa2-serve's "
                         "engine computes in; step 1334's predicted 32K answers differ between the two in 22 "
                         "of 32 samples (training/README.md, \"Evaluation precision\")")
    a = ap.parse_args()

    t_start = time.time()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    a.out.mkdir(parents=True, exist_ok=True)
    a.state_dir.mkdir(parents=True, exist_ok=True)
    log_f = open(a.out / "log.jsonl", "a")

    def log(rec):
        rec["wall_s"] = round(time.time() - t_start, 2)
        log_f.write(json.dumps(rec) + "\n")
        log_f.flush()
        print(json.dumps(rec), flush=True)

    args = ModelArgs.load(a.config)
    M.set_kernels(a.kernels)
    model = M.Transformer(args).to(device)
    def names(x):
        return tuple(n for n in x.split(",") if n)

    corpus = Corpus(a.corpus, a.tokenizer, sources=names(a.corpus_sources), heldout_sources=names(a.heldout_sources), eval_sources=names(a.eval_sources))
    log({"type": "start", "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "kernels": M.kernels_mode() if device.type == "cuda" else "torch",
         "params": sum(p.numel() for p in model.parameters()), "corpus_tokens": {k: int(len(v)) for k, v in corpus.ids.items()}, "argv": sys.argv[1:]})

    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.ndim == 2 and not n.startswith("embed") else no_decay).append(p)
    cuda = device.type == "cuda"
    lr0 = torch.tensor(a.lr, device=device) if cuda and a.graph == "on" else a.lr
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=lr0, betas=(0.9, 0.95), eps=1e-8, fused=cuda, capturable=cuda and a.graph == "on")

    step, tokens, fresh_opt = 0, 0, True
    prev_log = []
    init_meta = {}
    if a.init is not None and (a.init / "train_meta.json").exists():
        init_meta = json.loads((a.init / "train_meta.json").read_text())
    state_file = a.state_dir / "train_state.pt"
    # a warm machine keeps the previous call's full state: used when it is at least as far as the carried weights
    if state_file.exists() and (a.init is None or torch.load(state_file, map_location="cpu", weights_only=False)["step"] >= init_meta.get("step", -1)):
        st = torch.load(state_file, map_location=device, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        for g in opt.param_groups:  # a fresh LR tensor of our own per group (set_lr fills it)
            g["lr"] = torch.tensor(a.lr, device=device) if isinstance(lr0, torch.Tensor) else a.lr
        step, tokens, fresh_opt = st["step"], st["tokens"], False
        log({"type": "resume", "from": "device state (fp32 master + AdamW)", "step": step, "tokens": tokens})
    elif a.init is not None:
        model.load_official({k: v.to(device) for k, v in load_weights(a.init).items()})
        step, tokens = init_meta.get("step", 0), init_meta.get("tokens", 0)
        log({"type": "resume", "from": f"{a.init} (served bf16 weights, fresh AdamW, warm-up {a.warmup_steps} steps)", "step": step, "tokens": tokens})
    else:
        model.init_weights(a.seed)
        log({"type": "init", "seed": a.seed})
    if init_meta.get("phases"):
        prev_log = init_meta["phases"]
    model.train()
    M.set_fast(bool(a.fast))

    if a.compile == "on":
        M.set_compiled(True)

    eval_tasks = tuple(x for x in a.eval_tasks.split(",") if x)
    eval_n = {0: a.eval_n, **{int(k): int(v) for k, v in (x.split(":") for x in a.eval_n_by_length.split(",") if x)}}
    if a.pre_eval and a.eval_replay > 0:
        with matmul_precision(a.eval_precision):
            log({"type": "pre_eval", "step": step, "replay_kl": replay_kl(model, corpus, device, a.eval_replay, n_passages=a.kl_passages)})
    if a.pre_eval and a.pre_eval_lengths:
        with matmul_precision(a.eval_precision):
            ev0 = evaluate(model, corpus, device, [int(x) for x in a.pre_eval_lengths.split(",")], eval_n, seed=12345, lm_batches=a.eval_lm_batches, replay=a.eval_replay, tasks=eval_tasks, passes=("exact",), kl=False)
        log({"type": "pre_eval_tasks", "step": step, **ev0})
    if a.doc_replay_frac > 0 and a.graph == "on":
        raise SystemExit("--doc-replay-frac needs --graph off (GraphStep has no encoder replay start)")
    if a.distill_weight > 0 and (a.graph == "on" or a.doc_replay_frac <= 0):
        raise SystemExit("--distill-weight needs --graph off and --doc-replay-frac > 0 (it distils the stored-document rows)")
    if a.kl_focus_weight > 0 and a.graph == "on":
        raise SystemExit("--kl-focus-weight needs --graph off (the focus rows change every step)")
    phases = parse_phases(a.phases)
    for spec in eval_tasks:
        try:
            if parse_task_spec(spec)[2] == "genre" and "genre" not in corpus.text:
                raise ValueError("needs --eval-sources")
        except ValueError as e:
            raise SystemExit(f"--eval-tasks: {spec!r}: {e} (tasks: {', '.join(TASKS)}; spec TASK[.canonical|train|heldout[.heldout|genre]])")
    train_budget = a.time_budget_s - a.eval_reserve_s - (time.time() - t_start)
    t_train0 = time.time()
    tw = None
    if a.task_weights:
        tw = {k: float(v) for k, v in (x.split(":") for x in a.task_weights.split(","))}
        unknown = set(tw) - set(TASKS)
        if unknown:
            raise SystemExit(f"--task-weights: unknown tasks {sorted(unknown)} (known: {', '.join(TASKS)})")
    producer = Producer(corpus, a.seed * 100003 + step, a.task_fraction, tw, a.phrasing_frac)
    replay_rng = random.Random(a.seed * 7919 + step)
    warm0 = step
    last_save = time.time()
    phase_stats = []

    def lr_at(frac_time, s):
        lr = a.lr
        if fresh_opt and s - warm0 < a.warmup_steps:
            lr *= (s - warm0 + 1) / a.warmup_steps
        if a.decay_frac > 0 and frac_time > 1 - a.decay_frac:
            k = (frac_time - (1 - a.decay_frac)) / a.decay_frac
            lr *= 1 - (1 - a.min_lr_frac) * min(1.0, k)
        return lr

    def save(tag):
        sd = model.official_state_dict()
        save_sharded(sd, a.out)
        (a.out / "config.json").write_text(json.dumps(args.to_dict(), indent=2) + "\n")
        meta = {"step": step, "tokens": tokens, "phases": prev_log + phase_stats, "tag": tag}
        (a.out / "train_meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "tokens": tokens}, state_file)

    acc = {"loss": 0.0, "ans": 0.0, "ans_n": 0, "kl": 0.0, "n": 0}
    t_phase_end = t_train0
    use_graph = a.graph == "on" and device.type == "cuda"
    graph = None
    batch_of = {}  # per length: the batch (halved on an out-of-memory error, for the rest of the call)
    for pi, (cycle, frac) in enumerate(phases):
        t_phase_end += frac * train_budget
        if use_graph and len(set(cycle)) > 1:
            use_graph = False  # a graph is one shape; a mixed phase runs eagerly
            log({"type": "graph_off", "reason": "mixed-length phase", "phase": phase_name(cycle)})
        ctx_kw = dict(train=True, kl_rows=a.kl_rows, kl_extra=a.kl_extra, kl_focus_weight=a.kl_focus_weight, ckpt_blocks=True, attn_chunk_tokens=16384)
        p_t0, p_step0, p_tok0 = time.time(), step, tokens
        losses = []
        by_len = {}  # mixed phase: steps and tokens per length
        ci = 0
        while time.time() < t_phase_end:
            seq_len = cycle[ci % len(cycle)]
            B = batch_of.setdefault(seq_len, max(1, a.tokens_per_step // seq_len))
            producer.set_shape(B, seq_len)
            if a.compile == "auto" and device.type == "cuda":
                k = step - warm0  # eager steps 3..8 timed, compile at 9, compiled steps 10..15 timed
                if k in (3, 10):
                    torch.cuda.synchronize()
                    t_probe = time.time()
                elif k == 8:
                    torch.cuda.synchronize()
                    eager_dt = (time.time() - t_probe) / 5
                    M.set_compiled(True)
                elif k == 15:
                    torch.cuda.synchronize()
                    comp_dt = (time.time() - t_probe) / 5
                    keep = comp_dt < 0.97 * eager_dt and not M.compile_failed()
                    log({"type": "compile_probe", "eager_step_s": round(eager_dt, 3), "compiled_step_s": round(comp_dt, 3), "kept": keep})
                    if not keep:
                        M.set_compiled(False)
            timing = step - warm0 < 6 or (step - warm0) % 100 == 0
            if timing and device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.time()
            ids, am, tasks, doc_end = producer.get()
            t_data = time.time() - t0
            rinfo = {}
            rs, es = replay_starts(am, a.replay_tokens, a.replay_frac, replay_rng, doc_end, a.doc_replay_frac, info=rinfo)
            distill = None
            if a.distill_weight > 0 and rs is not None and rinfo.get("doc_text"):
                plan = distill_plan(rinfo["doc_text"], rs, ids.size(1), a.distill_rows)
                distill = None if plan is None else (a.distill_weight, plan)
            focus = None
            if a.kl_focus_weight > 0:  # the needle region of the focus support: 8 tokens before the value to 16 after it
                sp = needle_spans(ids.numpy(), am.numpy())
                sp[1] = np.where(sp[0] >= 0, np.maximum(0, sp[1] - 8), -1)
                sp[2] = np.where(sp[0] >= 0, np.minimum(sp[0] + 1, sp[2] + 16), -1)
                focus = focus_tensors(sp, device)
            ids, am = ids.to(device, non_blocking=True), am.to(device, non_blocking=True)
            rs = None if rs is None else rs.to(device)
            es = None if es is None else es.to(device)
            frac_time = (time.time() - t_train0) / max(1.0, train_budget)
            lr = lr_at(frac_time, step)
            try:
                if use_graph and graph is None and step - p_step0 >= 1:
                    t_cap = time.time()
                    try:
                        graph = GraphStep(model, opt, ctx_kw, a.answer_weight, ids, am, lr, rs)
                    except torch.cuda.OutOfMemoryError:
                        raise
                    except Exception as e:  # noqa: BLE001 - eager steps still train
                        use_graph, graph = False, None
                        opt.zero_grad(set_to_none=True)
                        torch.cuda.synchronize()
                        log({"type": "graph_failed", "step": step, "error": repr(e)[:600], "note": "the warm-up step before the capture trained but is not counted"})
                        continue
                    out = graph.first_out
                    log({"type": "graph_captured", "step": step, "seq_len": seq_len, "batch": B, "warmup_and_capture_s": round(time.time() - t_cap, 2), "mem_gb": round(torch.cuda.max_memory_allocated() / 2**30, 1)})
                elif graph is not None:
                    set_lr(opt, lr)
                    out = graph(ids, am, rs)
                else:
                    out = train_step(model, opt, ids, am, ctx_kw, a.answer_weight, lr, timing=timing and device.type == "cuda", replay_start=rs, kl_focus=focus, encoder_replay_start=es, distill=distill)
                lm_loss, ans_loss, kl, gn, ctx = out["lm_loss"], out["ans_loss"], out["kl"], out["grad_norm"], out["ctx"]
                if timing:
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    t_end = time.time()
                    rec = {"type": "step_time", "step": step, "seq_len": seq_len, "batch": B, "graph": graph is not None, "data_s": round(t_data, 3), "step_s": round(t_end - t0, 3)}
                    if graph is None:
                        rec.update({"fwd_s": round(out["t_fwd"] - t0 - t_data, 3), "bwd_s": round(out["t_bwd"] - out["t_fwd"], 3), "opt_s": round(t_end - out["t_bwd"], 3)})
                    log(rec)
            except torch.cuda.OutOfMemoryError:
                ids = am = ctx = out = None  # noqa: F841 - free the step's tensors
                if graph is not None:
                    graph.release(opt)
                    graph = None
                opt.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()
                B = batch_of[seq_len] = max(1, B // 2)
                log({"type": "oom", "seq_len": seq_len, "new_batch": B})
                producer.set_shape(B, seq_len)
                continue
            with torch.no_grad():
                for layer in model.layers:
                    c = layer.ffn.last_counts.float()
                    load = c / c.sum().clamp_min(1)
                    layer.ffn.gate.bias += a.bias_rate * torch.sign(1.0 / c.numel() - load)
            step += 1
            tokens += ids.numel()
            ci += 1
            bl = by_len.setdefault(seq_len, [0, 0])
            bl[0] += 1
            bl[1] += ids.numel()
            acc["loss"] += lm_loss.detach()
            acc["ans"] += ans_loss.detach()
            acc["kl"] += kl.detach()
            acc["n"] += 1
            if out.get("distill_kl") is not None:
                acc["dkl"] = acc.get("dkl", 0.0) + out["distill_kl"]
                acc["dkl_n"] = acc.get("dkl_n", 0) + 1
                acc["dkl_rows"] = acc.get("dkl_rows", 0) + out["distill_rows"]
            al = acc.setdefault("by_len", {}).setdefault(seq_len, [0.0, 0.0, 0])
            al[0] += lm_loss.detach()
            al[1] += ans_loss.detach()
            al[2] += 1
            if step % a.log_every == 0:
                n = acc["n"]
                rec = {"type": "train", "step": step, "tokens": tokens, "seq_len": seq_len, "batch": B, "lr": lr,
                       "loss": round(float(acc["loss"] / n), 4), "answer_loss": round(float(acc["ans"] / n), 4),
                       "indexer_kl": round(float(acc["kl"] / n), 4), "grad_norm": round(float(gn), 3),
                       "tok_per_s": round((tokens - p_tok0) / (time.time() - p_t0)),
                       "mem_gb": round(torch.cuda.max_memory_allocated() / 2**30, 1) if device.type == "cuda" else 0}
                if len(set(cycle)) > 1:
                    rec["phase"] = phase_name(cycle)
                if len(acc["by_len"]) > 1:  # the record's steps had several lengths (a mixed phase): the means per length too
                    rec["by_length"] = {str(L): {"steps": v[2], "loss": round(float(v[0] / v[2]), 4), "answer_loss": round(float(v[1] / v[2]), 4)} for L, v in sorted(acc["by_len"].items())}
                if ctx.indexer_stats:
                    rec["sel_mass"] = {str(l): round(float(v), 3) for l, v in ctx.indexer_stats[: len(ctx.indexer_stats)]}
                if a.distill_weight > 0:  # the distillation term: mean over the record's steps that had distilled rows
                    rec["distill_kl"] = round(float(acc["dkl"] / acc["dkl_n"]), 5) if acc.get("dkl_n") else None
                    rec["distill_steps"], rec["distill_rows"] = acc.get("dkl_n", 0), acc.get("dkl_rows", 0)
                if ctx.needle_stats:  # this step's needles (focus on): share of their entries in each index layer's top-k
                    rec["needle_in_topk"] = needle_summary(ctx.needle_stats)
                losses.append(rec["loss"])
                log(rec)
                acc = {"loss": 0.0, "ans": 0.0, "ans_n": 0, "kl": 0.0, "n": 0}
            if time.time() - last_save > a.save_every_s:
                save("periodic")
                last_save = time.time()
        if graph is not None:
            graph.release(opt)
            graph = None
            torch.cuda.empty_cache()
        ps = {"seq_len": phase_name(cycle), "steps": step - p_step0, "tokens": tokens - p_tok0, "seconds": round(time.time() - p_t0, 1), "last_loss": losses[-1] if losses else None}
        if len(by_len) > 1:
            ps["by_length"] = {str(L): {"steps": v[0], "tokens": v[1]} for L, v in sorted(by_len.items())}
        phase_stats.append(ps)
    producer.close()
    save("end-of-training")
    with matmul_precision(a.eval_precision):
        ev = evaluate(model, corpus, device, [int(x) for x in a.eval_lengths.split(",")], eval_n, seed=12345, lm_batches=a.eval_lm_batches, replay=a.eval_replay, tasks=eval_tasks, passes=tuple(a.eval_passes.split(",")), kl_n=a.kl_passages)
    log({"type": "eval", "step": step, "tokens": tokens, "precision": a.eval_precision, **ev})
    meta = json.loads((a.out / "train_meta.json").read_text())
    meta["eval"] = ev
    (a.out / "train_meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    log({"type": "done", "step": step, "tokens": tokens})


if __name__ == "__main__":
    main()
