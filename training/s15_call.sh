#!/usr/bin/env bash
# Session 15's device calls (training/README.md, "Session 15"), run from the repository root through the device tool:
#   bash training/state/h15/s15_call.sh 1|2|3
# carry: training/state/h15 (this script; official/: the git-ignored official copy with tiny-a and prompt-2k.json,
# when obtained; init/: a previous call's files, only after a lost warm machine).
# The device tool sends the lead's checkout (main), whose training/*.py are this branch's; its models/v41-mini-128k is
# the served step 1334, which is the start (with session 12's call-3 train_meta.json: step 1334, 105,906,176 tokens).
# Call 1 (cold): from step 1334, fresh AdamW, 5 steps to 1e-4, constant; 32K twice per 5-step cycle; diagnostic eval 4K.
# Call 2 (warm): constant 1e-4; diagnostic eval 4K and 32K.
# Call 3 (warm): 1e-4 -> 3e-5 and the full evaluation; (d)'s figures (replay_kl.py on the final checkpoint and step
#   1334, 48 passages, batch 16, without and with --tf32); the official golden run on the final checkpoint when the
#   official copy was carried. Small files go back as one tar (8-file limit).
set -uo pipefail
export PYTHONUNBUFFERED=1
call=$1
t0=$(date +%s)
S=training/state/h15
if [ -f $S/init/train_meta.json ]; then init=$S/init; else
  init=/tmp/s15init; mkdir -p $init
  cp models/v41-mini-128k/model.safetensors models/v41-mini-128k/config.json $init/ || exit 2
  cp training/logs/s12call3.train_meta.json $init/train_meta.json || exit 2
fi
sha256sum models/v41-mini-128k/model.safetensors $init/*.safetensors | cut -c1-100
common=(--lr 1e-4 --warmup-steps 5 --tokens-per-step 131072 --task-fraction 0.75
  --task-weights passkey:3,niah_single:3,niah_multikey:1 --answer-weight 3 --replay-tokens 128 --replay-frac 0.6
  --doc-replay-frac 0.75 --kl-focus-weight 1 --distill-weight 1 --distill-rows 192 --eval-tasks passkey,niah_single
  --log-every 5 --save-every-s 150 --kl-passages 16)
phases='32768*2+16384+8192+4096:1.0'
run_train() {  # budget, then train.py args
  local b=$1; shift
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 training/train.py --out "$OUT" --time-budget-s "$b" --phases "$phases" --init "$init" "${common[@]}" "$@" 2>&1 |
    tee "$OUT/stdout.txt" | grep -v '"type": "train"' | cut -c1-1500
  grep '"type": "train"' "$OUT/stdout.txt" | awk 'NR % 3 == 0' | cut -c1-600
  rm -f "$OUT/stdout.txt"
}
case $call in
1)
  run_train "${BUDGET1:-480}" --eval-n 16 --eval-lengths 4096 --eval-passes exact --eval-reserve-s 45
  ;;
2)
  [ "${COLD_OK:-0}" = 1 ] || test -f /root/csa2_state/train_state.pt || { echo "NO DEVICE STATE (machine not warm): stop"; exit 3; }
  run_train "${BUDGET2:-400}" --eval-n 16 --eval-lengths 4096,32768 --eval-passes exact --eval-reserve-s 75
  ;;
3)
  [ "${COLD_OK:-0}" = 1 ] || test -f /root/csa2_state/train_state.pt || { echo "NO DEVICE STATE (machine not warm): stop"; exit 3; }
  run_train "${BUDGET3:-360}" --decay-frac 1.0 --min-lr-frac 0.3 --eval-n 16 --eval-n-by-length 4096:32,8192:32 \
    --eval-lengths 4096,8192,16384,32768 --eval-passes exact,doc --eval-reserve-s 180
  echo "training + evaluation: $(( $(date +%s) - t0 )) s"
  kl=(--kl-passages 48 --kl-batches 16)
  python3 training/replay_kl.py "$OUT" models/v41-mini-128k "${kl[@]}" --out "$OUT/s15call3.kl_fp32.jsonl" 2>&1 | grep -v Warning
  echo "fp32 KL done at $(( $(date +%s) - t0 )) s"
  python3 training/replay_kl.py "$OUT" models/v41-mini-128k "${kl[@]}" --tf32 --out "$OUT/s15call3.kl_tf32.jsonl" 2>&1 | grep -v Warning
  echo "TF32 KL done at $(( $(date +%s) - t0 )) s"
  if [ -f $S/official/model.py ] && [ "${GOLDEN:-1}" = 1 ]; then
    rm -rf training/official && cp -r $S/official training/official
    sha256sum training/official/*.py
    C=/tmp/cand; rm -rf $C; cp -r models/v41-mini-128k $C && python3 training/make_model_dir.py "$OUT" $C
    if python3 training/official_golden.py --check-fixture training/official/tiny-a --device cuda 2>&1 | tail -3; then
      G="--model $C --prompt-ids training/official/prompt-2k.json --decode-steps 72"
      python3 training/official_golden.py $G --out $OUT/golden-cuda.safetensors --device cuda 2>&1 | tail -2 &&
      python3 training/official_golden.py $G --force-ids $OUT/golden-cuda.safetensors --out $OUT/golden-cpu-forced.safetensors --device cpu 2>&1 | tail -2 &&
      python3 training/official_golden.py $G --out $OUT/golden-cpu.safetensors --device cpu 2>&1 | tail -2
    else echo "CHECK-FIXTURE CUDA FAILED"; fi
    echo "golden done at $(( $(date +%s) - t0 )) s"
  fi
  ;;
esac
(cd "$OUT" && tar cf small.tar --ignore-failed-read config.json model.safetensors.index.json log.jsonl train_meta.json s15call3.kl_fp32.jsonl s15call3.kl_tf32.jsonl golden-cuda.json golden-cpu-forced.json golden-cpu.json 2>/dev/null;
 rm -f config.json model.safetensors.index.json log.jsonl train_meta.json s15call3.kl_fp32.jsonl s15call3.kl_tf32.jsonl golden-cuda.json golden-cpu-forced.json golden-cpu.json)
echo "call $call done at $(( $(date +%s) - t0 )) s"; ls -la "$OUT"
