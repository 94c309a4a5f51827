#!/usr/bin/env bash
# Session 15, after the training call became impossible (README "Session 15", interim 3): a diagnostic of the served
# step 1334 only, changing no rule and no verdict: passkey / NIAH single at 32K, n = 48, exact and stored document.
#   bash training/state/h15/s15_diag.sh   (carry: training/state/h15)
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
sha256sum models/v41-mini-128k/model.safetensors | cut -c1-64
python3 training/replay_kl.py models/v41-mini-128k --eval-lengths 32768 --eval-n ${N:-48} --eval-passes exact,doc --kl-passages 8 \
  --out "$OUT/s15diag-step1334.jsonl" 2>&1 | grep -v Warning
echo "done at $(( $(date +%s) - t0 )) s"
