"""How far torch's float32 transcendental functions are from correctly rounded, on CUDA and on CPU.

Backs the README's "Parity with the official reference": the official golden logits come from a GPU,
whose expf/sigmoid are not correctly rounded, so a CPU execution cannot follow it bit for bit.
Needs torch (with CUDA for the GPU rows); prints one line per function and device.

    python3 tools/parity/gpu-transcendentals.py
"""
import torch


def report(name, got, ref):
    diff = (got.view(torch.int32).long() - ref.view(torch.int32).long()).abs()
    off = diff != 0
    n = int(off.sum())
    worst = int(diff.max()) if n else 0
    print(f"  {name:8s} {n:8d} of {got.numel()} ({100 * n / got.numel():5.1f}%) not correctly rounded, max {worst} ulp")


def main():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(1 << 22, generator=g) * 40 - 20  # [-20, 20)
    pos = torch.arange(0x3F800000, 0x40800000, 16, dtype=torch.int32).view(torch.float32)  # [1, 4)
    cases = [
        ("exp", x, torch.exp),
        ("sigmoid", x, torch.sigmoid),
        ("softplus", x, torch.nn.functional.softplus),
        ("silu", x, torch.nn.functional.silu),
        ("log", x.abs() + 1e-3, torch.log),
        ("rsqrt", pos, torch.rsqrt),
        ("sqrt", pos, torch.sqrt),
    ]
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for dev in devices:
        label = torch.cuda.get_device_name() if dev == "cuda" else "CPU"
        print(f"{dev} ({label}, torch {torch.__version__}):")
        for name, inp, fn in cases:
            got = fn(inp.to(dev)).cpu()
            ref = fn(inp.double()).float()  # float64, rounded once
            report(name, got, ref)


if __name__ == "__main__":
    main()
