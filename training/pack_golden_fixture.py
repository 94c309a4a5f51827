"""Packs the official runs on the served checkpoint into the repository's golden fixture.

    python3 training/pack_golden_fixture.py GPU_GOLDEN CPU_FORCED_GOLDEN CPU_FREE_GOLDEN OUT_DIR

GPU_GOLDEN: `official_golden.py --device cuda` (free-running greedy); CPU_FORCED_GOLDEN: the same on a CPU
with `--force-ids GPU_GOLDEN` (its rows follow the GPU run's tokens, so the two are comparable row by
row); CPU_FREE_GOLDEN: the CPU run free-running (its greedy ids only). Writes OUT_DIR/golden.safetensors
in the tiny-a fixture's layout (`logits` = the GPU run, `xcheck.logits_bf16_cpu` = the CPU run) and
OUT_DIR/provenance.json (the three sidecars).
"""
import json
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    gpu_p, cpu_p, free_p, out = map(Path, sys.argv[1:])
    gpu, cpu, free = load_file(str(gpu_p)), load_file(str(cpu_p)), load_file(str(free_p))
    side = {k: json.loads(p.with_suffix(".json").read_text()) for k, p in (("gpu", gpu_p), ("cpu_forced", cpu_p), ("cpu_free", free_p))}
    shas = {s["model_safetensors_sha256"] for s in side.values()}
    if len(shas) != 1:
        sys.exit(f"the three runs are of different weights: {shas}")
    if not (gpu["prompt_ids"].equal(cpu["prompt_ids"]) and gpu["prompt_ids"].equal(free["prompt_ids"])):
        sys.exit("the three runs have different prompts")
    n = gpu["generated_ids"].numel() - 1
    if not cpu["force_ids"].equal(gpu["generated_ids"][:n]):
        sys.exit(f"{cpu_p} was not forced along {gpu_p}'s tokens")
    t = {k: v for k, v in gpu.items()}
    t["xcheck.logits_bf16_cpu"] = cpu["logits"]
    t["xcheck.generated_ids_cpu_free"] = free["generated_ids"]
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in sorted(t.items())}, str(out / "golden.safetensors"), metadata={"format": "pt", "model_safetensors_sha256": shas.pop()})
    (out / "provenance.json").write_text(json.dumps(side, indent=1) + "\n")
    print(f"wrote {out}/golden.safetensors ({len(t)} tensors) and provenance.json")


if __name__ == "__main__":
    main()
