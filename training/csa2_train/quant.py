"""The KV-side fake quantizers of the V4.1 reference, bit-exact, with straight-through gradients.

Each takes a bf16 tensor and returns bf16 values that are exactly the reference's quantize-then-dequantize
(`act_quant(..., inplace=True)` / `fp4_act_quant(..., inplace=True)` of inference/kernel.py; formulas in
/work/shared/docs/csa2-reference.md §2.3). In training the backward pass is the identity (STE).

- fp8_window:  FP8 E4M3, one power-of-two scale per 32 values (the sliding-window KV)
- fp4_main:    FP4 E2M1, one E4M3 scale per 16 values (the compressed main KV, after RoPE)
- fp4_index:   FP4 E2M1, one power-of-two (E8M0) scale per 32 values (index keys and index queries)
"""

import torch

FP8_MAX = 448.0
FP4_MAX = 6.0
# the kernels multiply by the reciprocal as a float32 constant
_FP8_MAX_INV = 1.0 / FP8_MAX
_FP4_MAX_INV = 1.0 / FP4_MAX


def _pow2_ceil(x: torch.Tensor) -> torch.Tensor:
    """2^ceil(log2(x)) for positive normal fp32 x, from the IEEE bits (exponent + (mantissa != 0))."""
    bits = x.contiguous().view(torch.int32)
    exp = (bits >> 23) & 0xFF
    man = bits & ((1 << 23) - 1)
    e = exp + (man != 0).to(torch.int32)
    return (e << 23).view(torch.float32)


def _e2m1_round(v: torch.Tensor) -> torch.Tensor:
    """Nearest E2M1 value (0, .5, 1, 1.5, 2, 3, 4, 6, signed), ties to the even code, for v in [-6, 6].

    Within each binade the E2M1 grid is uniform (step .5 below 2, 1 below 4, 2 up to 6), and the even
    codes are exactly the grid points that are even multiples of the step, so round-half-even of v/step
    is the table's round-to-nearest-even."""
    a = v.abs()
    step = torch.where(a < 2, 0.5, torch.where(a < 4, 1.0, 2.0))
    return torch.copysign(torch.round(a / step) * step, v)


def _fp8_window_exact(x: torch.Tensor) -> torch.Tensor:
    xg = x.float().unflatten(-1, (-1, 32))
    amax = xg.abs().amax(dim=-1, keepdim=True).clamp_min(1e-4)
    s = _pow2_ceil(amax * _FP8_MAX_INV)
    q = (xg / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).float()
    return (q * s).flatten(-2).to(x.dtype)


def _fp4_main_exact(x: torch.Tensor) -> torch.Tensor:
    xg = x.float().unflatten(-1, (-1, 16))
    amax = xg.abs().amax(dim=-1, keepdim=True).clamp_min(6 * 2.0**-9)
    s = (amax / FP4_MAX).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).float()
    v = (xg / s).clamp(-FP4_MAX, FP4_MAX)
    return (_e2m1_round(v) * s).flatten(-2).to(x.dtype)


def _fp4_index_exact(x: torch.Tensor) -> torch.Tensor:
    xg = x.float().unflatten(-1, (-1, 32))
    amax = xg.abs().amax(dim=-1, keepdim=True).clamp_min(6 * 2.0**-126)
    s = _pow2_ceil(amax * _FP4_MAX_INV)
    v = (xg / s).clamp(-FP4_MAX, FP4_MAX)
    return (_e2m1_round(v) * s).flatten(-2).to(x.dtype)


_IMPL = {"fp8_window": _fp8_window_exact, "fp4_main": _fp4_main_exact, "fp4_index": _fp4_index_exact}


def set_compiled(enabled: bool) -> None:
    """Use torch.compile'd quantizers (same values; fewer kernel launches on a GPU)."""
    base = {"fp8_window": _fp8_window_exact, "fp4_main": _fp4_main_exact, "fp4_index": _fp4_index_exact}
    from .model import safe_compile

    for k, f in base.items():
        _IMPL[k] = safe_compile(f) if enabled else f


def _ste(x: torch.Tensor, kind: str) -> torch.Tensor:
    if not x.requires_grad:
        return _IMPL[kind](x)
    with torch.no_grad():
        q = _IMPL[kind](x.detach())
    return x + (q - x).detach()


def fp8_window(x: torch.Tensor) -> torch.Tensor:
    return _ste(x, "fp8_window")


def fp4_main(x: torch.Tensor) -> torch.Tensor:
    return _ste(x, "fp4_main")


def fp4_index(x: torch.Tensor) -> torch.Tensor:
    return _ste(x, "fp4_index")
