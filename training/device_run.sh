#!/usr/bin/env bash
# One training call on the GPU machine (run from the repository root through the device tool):
#   bash training/device_run.sh TIME_BUDGET_S PHASES [extra train.py args...]
# Continues from training/state/init (the files the previous call brought back, carried) when present.
# Everything that must come back is written under $OUT (weights in two shards < 16 MiB, log, meta).
set -uo pipefail
budget=$1; phases=$2; shift 2
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, tokenizers, safetensors; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'tokenizers', tokenizers.__version__)"
init=()
if [ -f training/state/init/train_meta.json ]; then init=(--init training/state/init); fi
python3 training/train.py --out "$OUT" --time-budget-s "$budget" --phases "$phases" "${init[@]}" "$@" 2>&1 | tee "$OUT/stdout.txt" | grep -v '"type": "train"' | cut -c1-2000
grep '"type": "train"' "$OUT/stdout.txt" | awk 'NR % 5 == 0' | cut -c1-400
rm -f "$OUT/stdout.txt"
ls -la "$OUT"
