#!/usr/bin/env bash
# The eager figure of `modelmem plan` against PyTorch eager: for each torchvision model and
# batch, export the model to ONNX, record one eager inference with `modelmem run --trace`,
# measure its activation peak from the trace (bench/model/eager_trace.py) and compare it with
# the eager peak `modelmem plan --runtime eager` prints. Needs Debian's python3-torch,
# python3-torchvision and python3-onnx.
# Usage: [SIZE=224] bench/model/eager_validation.sh [BUILD_DIR] [WORK_DIR] [MODEL...]
# SIZE is the input's height and width. A model that does not export (or run) at SIZE gets a
# row saying so instead of failing the run.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "${1:-build}")
work=${2:-/tmp/modelmem_eager_validation}
shift $(( $# > 2 ? 2 : $# ))
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(resnet50 mobilenet_v2 densenet121 resnet18)
tool=$build/modelmem
size=${SIZE:-224}
script=$PWD/bench/model/eager_trace.py
mkdir -p "$work"
date -u
echo
echo "| model | batch | plan eager peak | PyTorch eager peak (trace) | plan / trace | ideal arena |"
echo "|---|---|---|---|---|---|"
worst=0
for m in "${models[@]}"; do
  [ -f "$work/$m.onnx" ] || /usr/bin/python3 "$script" export "$m" "$work/$m.onnx" "$size" >/dev/null 2>&1 ||
    { echo "| $m | - | does not export at ${size}x${size} | | | |"; continue; }
  for b in 1 8; do
    "$tool" run --conf strategy:caching,preload_threshold_kb:1 --trace "$work/$m.b$b.csv" -- \
      /usr/bin/python3 "$script" infer "$m" "$b" "$size"
    measured=$(/usr/bin/python3 "$script" measure "$work/$m.b$b.csv" "$b" "$size")
    "$tool" plan "$work/$m.onnx" --dim batch=$b --runtime eager --json "$work/$m.b$b.json" >/dev/null
    read -r eager ideal < <(/usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(j['eager_peak_bytes'], j['ideal_arena_bytes'])" "$work/$m.b$b.json")
    ratio=$(/usr/bin/python3 -c "print(f'{$eager / $measured:.4f}')")
    off=$(/usr/bin/python3 -c "print(f'{abs($eager / $measured - 1) * 100:.2f}')")
    worst=$(/usr/bin/python3 -c "print(max($worst, $off))")
    mib() { /usr/bin/python3 -c "print(f'{$1 / 1048576:.2f} MiB')"; }
    echo "| $m | $b | $(mib "$eager") | $(mib "$measured") | $ratio | $(mib "$ideal") |"
  done
done
echo
echo "largest difference: $worst %"
/usr/bin/python3 -c "import sys; sys.exit(0 if $worst <= 5 else 1)"
