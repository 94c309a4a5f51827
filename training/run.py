"""Train the served model, or resume its training, on any CUDA machine: one command for the recipe in
training/configs/v41-mini-128k.run.json.

    python3 training/run.py [--plan continue|from-scratch] [--run-dir training/runs/v41-mini-128k]
    python3 training/run.py --dry-run            # print the train.py commands and stop
    python3 training/run.py --check              # the serving rule on the finished run (training/README.md)

A plan is a list of segments, each one train.py invocation (its arguments are in the run configuration).
The run directory holds one folder per segment (`segments/NN/`: the weights, config.json, log.jsonl,
train_meta.json that train.py writes) and the full training state (`state/train_state.pt`: fp32 master
weights and AdamW moments). Running the command again resumes: finished segments (an `eval` record in
train_meta.json) are skipped, and an interrupted segment continues from the full state it saved last.

- plan `continue` (default) starts from the served checkpoint (models/v41-mini-128k, step 1334) with
  the hyper-parameters of the last stage of its training;
- plan `from-scratch` repeats the whole recorded training from random initialization.

When the run is done, the last segment's folder is a candidate: `--check` measures the serving rule's
figures, and `python3 training/make_model_dir.py RUN_DIR/segments/NN models/v41-mini-128k` serves it.
"""

import argparse
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def finished(seg_dir: Path) -> bool:
    meta = seg_dir / "train_meta.json"
    return meta.exists() and "eval" in json.loads(meta.read_text())


def prepare_start(plan: dict, run_dir: Path) -> Path | None:
    """The first segment's --init: the plan's start weights with their train_meta.json, or None (random init)."""
    start = plan.get("start")
    if not start:
        return None
    d = run_dir / "start"
    if not (d / "train_meta.json").exists():
        d.mkdir(parents=True, exist_ok=True)
        src = REPO / start["weights"]
        for f in ("model.safetensors", "config.json"):
            shutil.copyfile(src / f, d / f)
        (d / "train_meta.json").write_text(json.dumps(start["train_meta"], indent=1) + "\n")
    return d


def segment_command(cfg: dict, seg: dict, out: Path, init: Path | None, state_dir: Path) -> list[str]:
    cmd = [sys.executable, str(HERE / "train.py"), "--config", str(REPO / cfg["model_config"]),
           "--tokenizer", str(REPO / cfg["tokenizer"]), "--out", str(out), "--state-dir", str(state_dir)]
    if init is not None:
        cmd += ["--init", str(init)]
    return cmd + shlex.split(seg["args"])


def run(cfg: dict, plan_name: str, run_dir: Path, dry_run: bool) -> Path:
    plan = cfg["plans"][plan_name]
    state_dir = run_dir / "state"
    init = prepare_start(plan, run_dir) if not dry_run else (run_dir / "start" if plan.get("start") else None)
    last = init
    for i, seg in enumerate(plan["segments"]):
        out = run_dir / "segments" / f"{i:02d}"
        if finished(out):
            last = init = out
            continue
        cmd = segment_command(cfg, seg, out, init, state_dir)
        print(f"segment {i + 1}/{len(plan['segments'])} (recorded steps {seg['steps'][0]}-{seg['steps'][1]}):", shlex.join(cmd), flush=True)
        if dry_run:
            last = init = out
            continue
        started = out / ".started"
        if seg.get("fresh_optimizer") and not started.exists():
            # start from the previous segment's weights with fresh AdamW moments, as the recorded run did
            (state_dir / "train_state.pt").unlink(missing_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        started.touch()
        r = subprocess.run(cmd, cwd=REPO)
        if r.returncode != 0 or not finished(out):
            sys.exit(f"segment {i + 1} stopped (exit status {r.returncode}); run the same command again to resume it")
        last = init = out
    return last


def check(cfg: dict, candidate: Path, served: Path) -> bool:
    """The serving rule (training/README.md, 'Serving a candidate'): (a)-(d) on the candidate's last evaluation
    and on replay_kl.py's stored-document KL of the candidate and the served model, without and with TF32."""
    log = [json.loads(x) for x in (candidate / "log.jsonl").read_text().splitlines() if x.strip()]
    ev = [r for r in log if r["type"] == "eval"][-1]
    kl = {}
    for mode, extra in (("fp32", []), ("tf32", ["--tf32"])):
        out = candidate / f"kl_{mode}.jsonl"
        if not out.exists():
            subprocess.run([sys.executable, str(HERE / "replay_kl.py"), str(candidate), str(served), "--kl-passages", "48",
                            "--kl-batches", "16", "--out", str(out), *extra], cwd=REPO, check=True)
        recs = [json.loads(x) for x in out.read_text().splitlines() if x.strip()]
        kl[mode] = [r["replay_kl"]["doc_mean"] for r in recs]  # [candidate, served]
    f_cand = (kl["fp32"][0] + kl["tf32"][0]) / 2
    f_served = (kl["fp32"][1] + kl["tf32"][1]) / 2
    spread = max(abs(kl["tf32"][1] - kl["fp32"][1]), abs(kl["tf32"][0] - kl["fp32"][0]))
    t = ev["tasks"]
    ex = lambda c: 100 * t[c]["exact"]  # noqa: E731
    s16 = ex("passkey@16384") + ex("niah_single@16384")
    s32 = ex("passkey@32768") + ex("niah_single@32768")
    rule = {
        "(a) held-out loss <= 4.36": ev["lm_loss"] <= 4.36,
        "(b) 4K passkey >= 93.75, NIAH >= 87.5; 8K passkey >= 87.5, NIAH >= 68.75":
            ex("passkey@4096") >= 93.75 and ex("niah_single@4096") >= 87.5 and ex("passkey@8192") >= 87.5 and ex("niah_single@8192") >= 68.75,
        "(c) 16K passkey + NIAH >= 162.5, 32K > 100": s16 >= 162.5 and s32 > 100,
        "(d) stored-document KL F(candidate) <= F(served) + S": f_cand <= f_served + spread,
    }
    print(f"step {ev['step']}: held-out {ev['lm_loss']:.4f}; 16K sum {s16:.2f}, 32K sum {s32:.2f}; "
          f"F(candidate) {f_cand:.6e}, F(served) {f_served:.6e}, S {spread:.6e}")
    for clause, ok in rule.items():
        print(f"  {clause}: {'holds' if ok else 'fails'}")
    met = all(rule.values())
    print("the candidate meets the serving rule" if met else "the candidate does not meet the serving rule")
    return met


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-config", type=Path, default=HERE / "configs" / "v41-mini-128k.run.json")
    ap.add_argument("--plan", default="continue")
    ap.add_argument("--run-dir", type=Path, default=HERE / "runs" / "v41-mini-128k")
    ap.add_argument("--dry-run", action="store_true", help="print the train.py commands, run nothing")
    ap.add_argument("--check", action="store_true", help="the serving rule on the run's last segment against the served model")
    a = ap.parse_args()
    cfg = json.loads(a.run_config.read_text())
    if a.plan not in cfg["plans"]:
        sys.exit(f"--plan: one of {', '.join(cfg['plans'])}")
    run_dir = a.run_dir.resolve()
    if a.check:
        n = len(cfg["plans"][a.plan]["segments"])
        last = run_dir / "segments" / f"{n - 1:02d}"
        if not finished(last):
            sys.exit(f"{last} is not finished: run the plan first")
        sys.exit(0 if check(cfg, last, REPO / "models" / "v41-mini-128k") else 1)
    last = run(cfg, a.plan, run_dir, a.dry_run)
    if not a.dry_run:
        print(f"done: {last} (python3 training/run.py --check measures the serving rule)")


if __name__ == "__main__":
    main()
