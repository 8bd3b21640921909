#!/usr/bin/env bash
# Benchmark of `modelmem plan` on the example models: every solver, stored and memory order.
# Usage: bench/plan_models.sh [BUILD_DIR]   (prints a markdown table per model and order)
set -euo pipefail
cd "$(dirname "$0")/.."
tool=${1:-build}/modelmem
date -u
echo
run() {  # model, label, dims...
  local model=$1 label=$2
  shift 2
  for order in stored memory; do
    echo "### $label, $order order"
    echo
    echo '```'
    echo "\$ modelmem plan models/$model $* --order $order --solver all --time-limit 10"
    "$tool" plan "models/$model" "$@" --order "$order" --solver all --time-limit 10 |
      grep -E '^(solvers|  |planned|lower|order|activations|buffers)' | grep -v '^                 '
    echo '```'
    echo
  done
}
run resnet50.onnx "ResNet-50, batch 1" --dim batch=1
run resnet50.onnx "ResNet-50, batch 8" --dim batch=8
run bert_base.onnx "BERT-base, batch 1, seq 128" --dim batch=1 --dim seq=128
