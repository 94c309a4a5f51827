#!/usr/bin/env bash
# Session 12's device calls (training/README.md, "Session 12"), run from the repository root through the device tool:
#   bash training/state/h12/code/training/s12_call.sh 1|2|3
# carry: training/state/h12 (code/: this branch's training code, git archive; init/: step 1233's call files).
# The device tool sends the session's checkout (main), so each call first copies this branch's code over the device
# copy's training/ (the device copy only).
# Call 1 (cold): from step 1233 at a constant 1e-4 with the distillation term; diagnostic eval 4K.
# Call 2 (warm): constant 1e-4; diagnostic eval 4K and 16K.
# Call 3 (warm): 1e-4 -> 3e-5 and the full evaluation; then (d)'s figures: replay_kl.py on the final checkpoint, step 1020
#   and step 1233, 48 passages in batches of 16, without and with --tf32. Small files go back as one tar (8-file limit).
set -uo pipefail
export PYTHONUNBUFFERED=1
call=$1
t0=$(date +%s)
cp -r training/state/h12/code/training/. training/ || exit 2
common=(--lr 1e-4 --warmup-steps 5 --tokens-per-step 131072 --task-fraction 0.75
  --task-weights passkey:3,niah_single:3,niah_multikey:1 --answer-weight 3 --replay-tokens 128 --replay-frac 0.6
  --doc-replay-frac 0.75 --kl-focus-weight 1 --distill-weight 1 --distill-rows 192 --eval-tasks passkey,niah_single
  --log-every 5 --save-every-s 150 --kl-passages 16)
phases=32768+16384+8192+4096:1.0
init=(--init training/state/h12/init)
run_train() {  # budget, then train.py args
  local b=$1; shift
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 training/train.py --out "$OUT" --time-budget-s "$b" --phases "$phases" "${init[@]}" "${common[@]}" "$@" 2>&1 |
    tee "$OUT/stdout.txt" | grep -v '"type": "train"' | cut -c1-1500
  grep '"type": "train"' "$OUT/stdout.txt" | awk 'NR % 3 == 0' | cut -c1-600
  rm -f "$OUT/stdout.txt"
}
case $call in
1)
  run_train "${BUDGET1:-540}" --eval-n 16 --eval-lengths 4096 --eval-passes exact --eval-reserve-s 45
  ;;
2)
  test -f /root/csa2_state/train_state.pt || { echo "NO DEVICE STATE (machine not warm): stop"; exit 3; }
  run_train "${BUDGET2:-400}" --eval-n 16 --eval-lengths 4096,16384 --eval-passes exact --eval-reserve-s 60
  ;;
3)
  [ "${COLD_OK:-0}" = 1 ] || test -f /root/csa2_state/train_state.pt || { echo "NO DEVICE STATE (machine not warm): stop"; exit 3; }
  run_train "${BUDGET3:-400}" --decay-frac 1.0 --min-lr-frac 0.3 --eval-n 16 --eval-n-by-length 4096:32,8192:32 \
    --eval-lengths 4096,8192,16384,32768 --eval-passes exact,doc --eval-reserve-s 180
  echo "training + evaluation: $(( $(date +%s) - t0 )) s"
  kl=(--kl-passages 48 --kl-batches 16)
  python3 training/replay_kl.py "$OUT" models/v41-mini-128k ${KL_EXTRA:-} "${kl[@]}" --out "$OUT/s12call3.kl_fp32.jsonl" 2>&1 | grep -v Warning
  echo "fp32 KL done at $(( $(date +%s) - t0 )) s"
  python3 training/replay_kl.py "$OUT" models/v41-mini-128k ${KL_EXTRA:-} "${kl[@]}" --tf32 --out "$OUT/s12call3.kl_tf32.jsonl" 2>&1 | grep -v Warning
  echo "TF32 KL done at $(( $(date +%s) - t0 )) s"
  ;;
esac
(cd "$OUT" && tar cf small.tar --ignore-failed-read config.json model.safetensors.index.json log.jsonl train_meta.json s12call3.kl_fp32.jsonl s12call3.kl_tf32.jsonl 2>/dev/null;
 rm -f config.json model.safetensors.index.json log.jsonl train_meta.json s12call3.kl_fp32.jsonl s12call3.kl_tf32.jsonl)
echo "call $call done at $(( $(date +%s) - t0 )) s"; ls -la "$OUT"
