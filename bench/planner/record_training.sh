#!/usr/bin/env bash
# Records CPU training steps of ResNet-50 (batch 8 and 32), BERT-base (seq 128) and a GPT-2-style
# decoder (about 300 M parameters, seq 256) under `modelmem run --trace`, every request of 1 KiB
# and more going through modelmem (preload_threshold_kb:1), then turns them into planning problems
# with bench/planner/make_instances.py. Traces go to $OUT (default /tmp/modelmem_training), the
# problems to bench/planner/instances/. One thread, nice 10: ResNet-50 b32 and the decoder take
# minutes each on a slow core.
#
#   bench/planner/record_training.sh [MODEL...]     (default: resnet50_b8 resnet50_b32 bert gpt2)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/modelmem_training}
mkdir -p "$out"
python=${PYTHON:-/usr/bin/python3}  # Debian's python3-torch
models=("$@")
((${#models[@]})) || models=(resnet50_b8 resnet50_b32 bert gpt2)
for m in "${models[@]}"; do
  case $m in
    resnet50_b8) args=(resnet50 --batch 8 --steps 3) ;;
    resnet50_b32) args=(resnet50 --batch 32 --steps 2) ;;
    bert) args=(bert --batch 8 --seq 128 --steps 3) ;;
    gpt2) args=(gpt2 --batch 1 --seq 256 --steps 2) ;;
    *) echo "unknown model $m (resnet50_b8, resnet50_b32, bert, gpt2)" >&2; exit 2 ;;
  esac
  echo "recording $m: ${args[*]}" >&2
  nice -n 10 ./build/modelmem run --conf "strategy:caching,preload_threshold_kb:1" \
    --trace "$out/$m.trace.csv" -- "$python" bench/planner/train_step.py "${args[@]}"
done
