#!/usr/bin/env bash
# Do the quotas `plan --fit` prints hold under PyTorch? For each torchvision model: `modelmem plan
# WORK/MODEL.onnx --fit batch --device-memory BUDGET --runtime eager --strategy caching
# --device-kind host`, then the model at the batch found, under exactly the string printed
# (tests/journeys/fit_child.py: built and run three times inside its pool). One line per model:
# the batch, the string, ok or refused, and the requests passed to the next allocator.
# The exports are those of bench/model/eager_validation.sh (WORK/MODEL.onnx, at SIZE).
# Usage: [BUDGET=400MiB] [SIZE=224] bench/model/fit_check.sh BUILD_DIR WORK_DIR MODEL...
set -uo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "${1:?build dir}")
work=${2:?work dir}
shift 2
budget=${BUDGET:-400MiB}
size=${SIZE:-224}
for m in "$@"; do
  out=$("$build/modelmem" plan "$work/$m.onnx" --fit batch --device-memory "$budget" \
    --runtime eager --strategy caching --device-kind host 2>&1)
  b=$(echo "$out" | grep -oP '^fit +batch=\K[0-9]+')
  conf=$(echo "$out" | grep -oP '^config +one process: \K.*')
  if [ -z "$b" ] || [ -z "$conf" ]; then
    echo "$m: no batch fits $budget"
    continue
  fi
  r=$(OMP_NUM_THREADS=1 timeout 900 "$build/modelmem" run --report --conf "$conf" -- \
    "${PYTHON:-.venv/bin/python}" tests/journeys/fit_child.py "$size" "$m:$b" 2>&1)
  echo "$m batch=$b conf=$conf -> $(echo "$r" | grep -E '^ok|^refused' | cut -c1-40) |" \
    "$(echo "$r" | grep -oE '[0-9]+ by the next allocator')"
done
