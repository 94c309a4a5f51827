#!/bin/bash
# session 14 (helper h14): the official check on tiny-a and the golden runs of step 1334 (device copy only)
set -o pipefail
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
S=training/state/h14
rm -rf training/official && cp -r $S/official training/official
cp $S/model.safetensors models/v41-mini-128k/model.safetensors
sha256sum training/official/*.py models/v41-mini-128k/model.safetensors
nvidia-smi -L; python3 -c "import torch, sympy, numpy, safetensors, tokenizers; print('torch', torch.__version__, 'threads', torch.get_num_threads())"
python3 training/official_golden.py --check-fixture training/official/tiny-a --device cuda || { echo "CHECK-FIXTURE CUDA FAILED"; exit 3; }
python3 training/official_golden.py --check-fixture training/official/tiny-a --device cpu | tail -4
G="--model models/v41-mini-128k --prompt-ids training/official/prompt-2k.json --decode-steps 72"
python3 training/official_golden.py $G --out $OUT/golden-cuda.safetensors --device cuda || exit 4
python3 training/official_golden.py $G --force-ids $OUT/golden-cuda.safetensors --out $OUT/golden-cpu-forced.safetensors --device cpu || exit 5
python3 training/official_golden.py $G --out $OUT/golden-cpu.safetensors --device cpu || exit 6
echo ALL DONE
