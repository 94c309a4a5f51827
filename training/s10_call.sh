#!/usr/bin/env bash
# Session 10's device calls (training/README.md, "Session 10"), run from the repository root through the device tool:
#   bash training/s10_call.sh 1|2|3
# carry: training/state/init (step 1130's call files) and, for calls 2-3, training/official.
# Call 1 (cold): the rule's KL measurement of steps 1020 (models/v41-mini-128k) and 1130 (the carried init), 48 passages,
#   batch compositions 16, 8, 4; then training from step 1130 at a constant 1e-4 for the rest of ~560 s.
# Call 2 (warm): constant 1e-4; then, when GOLDEN1130=1, the official golden run on step 1130.
# Call 3 (warm): 1e-4 -> 3e-5 and the full evaluation; the rule's KL measurement of the final checkpoint and of step
#   1020 in the same call; the official golden run on the final checkpoint. Small files go back as one tar (8-file limit).
set -uo pipefail
export PYTHONUNBUFFERED=1
call=$1
t0=$(date +%s)
common=(--lr 1e-4 --warmup-steps 5 --tokens-per-step 131072 --task-fraction 0.75
  --task-weights passkey:3,niah_single:3,niah_multikey:1 --answer-weight 3 --replay-tokens 128 --replay-frac 0.6
  --doc-replay-frac 0.75 --kl-focus-weight 1 --eval-tasks passkey,niah_single --log-every 5 --save-every-s 150 --kl-passages 16)
phases=32768+16384+8192+4096:1.0
kl=(--kl-passages 48 --kl-batches 16,8,4)
golden() {  # $1: a call dir (shards) -> /tmp/m (a model dir), the official GPU golden run into $2
  rm -rf /tmp/m && cp -r models/v41-mini-128k /tmp/m && python3 training/make_model_dir.py "$1" /tmp/m &&
    python3 training/official_golden.py --model /tmp/m --prompt-ids training/official/prompt-2k.json \
      --decode-steps 72 --out "$2" --device cuda 2>&1 | tail -n 25
}
case $call in
1)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 training/replay_kl.py models/v41-mini-128k training/state/init "${kl[@]}" --out "$OUT/s10call1.kl.jsonl" 2>&1 | grep -v Warning
  budget=$(( 555 - ($(date +%s) - t0) ))
  echo "KL measurement took $(( $(date +%s) - t0 )) s; training budget $budget s"
  bash training/device_run.sh "$budget" "$phases" "${common[@]}" --eval-n 16 --eval-lengths 4096 --eval-passes exact --eval-reserve-s 45
  ;;
2)
  test -f /root/csa2_state/train_state.pt || { echo "NO DEVICE STATE (machine not warm): stop"; exit 3; }
  b=430; [ "${GOLDEN1130:-0}" = 1 ] && b=390
  bash training/device_run.sh "$b" "$phases" "${common[@]}" --eval-n 16 --eval-lengths 4096,16384 --eval-passes exact --eval-reserve-s 60
  if [ "${GOLDEN1130:-0}" = 1 ]; then golden training/state/init "$OUT/golden-cuda-s1130.safetensors"; fi
  ;;
3)
  test -f /root/csa2_state/train_state.pt || { echo "NO DEVICE STATE (machine not warm): stop"; exit 3; }
  bash training/device_run.sh "${BUDGET3:-390}" "$phases" "${common[@]}" --decay-frac 1.0 --min-lr-frac 0.3 --eval-n 16 \
    --eval-n-by-length 4096:32,8192:32 --eval-lengths 4096,8192,16384,32768 --eval-passes exact,doc --eval-reserve-s 180
  echo "training + evaluation: $(( $(date +%s) - t0 )) s"
  python3 training/replay_kl.py "$OUT" models/v41-mini-128k "${kl[@]}" --out "$OUT/s10call3.kl.jsonl" 2>&1 | grep -v Warning
  echo "KL measurement done at $(( $(date +%s) - t0 )) s"
  if [ "${GOLDEN_FINAL:-1}" = 1 ]; then golden "$OUT" "$OUT/golden-cuda-final.safetensors"; fi
  (cd "$OUT" && tar cf small.tar config.json model.safetensors.index.json log.jsonl train_meta.json s10call3.kl.jsonl && rm -f config.json model.safetensors.index.json log.jsonl train_meta.json s10call3.kl.jsonl)
  echo "call 3 done at $(( $(date +%s) - t0 )) s"; ls -la "$OUT"
  ;;
esac
