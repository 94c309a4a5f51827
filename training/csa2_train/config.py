"""ModelArgs: the official V4.1 config keys (inference/config.json spelling), as the reference's dataclass.

Only the text trunk is built here: Engram, vision and DSpark/MTP must be off (as in csa2-core).
"""

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ModelArgs:
    max_batch_size: int = 1
    max_seq_len: int = 4096
    temperature: float = 0.0
    dtype: str = "bf16"
    expert_dtype: str | None = None
    vocab_size: int = 129280
    dim: int = 1024
    moe_inter_dim: int = 1024
    n_layers: int = 5
    n_mtp_layers: int = 0
    n_heads: int = 16
    n_routed_experts: int = 8
    n_shared_experts: int = 1
    n_activated_experts: int = 2
    score_func: str = "sqrtsoftplus"
    gate_temp: float = 1.0
    norm_topk_prob: bool = True
    route_scale: float = 1.0
    swiglu_limit: float = 0.0
    q_lora_rank: int = 256
    head_dim: int = 128
    rope_head_dim: int = 32
    norm_eps: float = 1e-20
    o_groups: int = 8
    o_lora_rank: int = 256
    window_size: int = 128
    compress_ratios: tuple = (0, 2, 2, 1, 1, 0)
    kv_source_layers: tuple = (1, 3)
    index_source_layers: tuple = (1, 3)
    compress_rope_theta: float = 40000.0
    original_seq_len: int = 0
    rope_theta: float = 10000.0
    rope_factor: float = 40
    beta_fast: int = 32
    beta_slow: int = 1
    index_n_heads: int = 16
    index_head_dim: int = 64
    index_topk: int = 64
    candidate_source_layer: int = -1
    candidate_topk_blocks: int = 0
    candidate_block_size: int = 0
    hc_mult: int = 4
    hc_sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    engram_layer_ids: tuple = ()
    vision_n_layers: int = 0
    dspark_block_size: int = 0
    # keys we carry through unchanged (the official config has them; nothing here uses them)
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelArgs":
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in names}
        a = cls(**known, extra={k: v for k, v in d.items() if k not in names})
        a.check()
        return a

    @classmethod
    def load(cls, path: str | Path) -> "ModelArgs":
        return cls.from_dict(json.loads(Path(path).read_text()))

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}
        d.update(self.extra)
        return d

    def check(self) -> None:
        if self.engram_layer_ids:
            raise ValueError("engram_layer_ids: Engram is not supported here")
        if self.vision_n_layers:
            raise ValueError("vision_n_layers: the vision tower is not supported here")
        if self.dspark_block_size and self.n_mtp_layers:
            raise ValueError("dspark_block_size: the DSpark/MTP head is not supported here")
        if self.dtype != "bf16" or self.expert_dtype is not None:
            raise ValueError("dtype/expert_dtype: only bf16 weights (dtype 'bf16', expert_dtype null)")
        if len(self.compress_ratios) < self.n_layers:
            raise ValueError("compress_ratios: needs one entry per layer")
        if self.head_dim % 32 or self.index_head_dim % 32 or self.rope_head_dim % 2:
            raise ValueError("head_dim and index_head_dim must be multiples of 32, rope_head_dim even")
        for i in range(self.n_layers):
            r = self.compress_ratios[i]
            if r == 0:
                continue
            srcs = [l for l in self.kv_source_layers if l <= i and self.compress_ratios[l] == r]
            isrcs = [l for l in self.index_source_layers if l <= i and self.compress_ratios[l] == r]
            if not srcs or not isrcs:
                raise ValueError(f"layer {i}: no earlier KV / index source of ratio {r}")
