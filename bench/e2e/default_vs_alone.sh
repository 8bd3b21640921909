#!/usr/bin/env bash
# `modelmem run` with its default configuration against the program alone: minor page faults and
# wall time of the whole process, median of RUNS runs each (alternated), for the torch loop of
# issue 16 (no usable period) and ResNet-50 b1 inference (periodic).
#   bench/e2e/default_vs_alone.sh [BUILD_DIR] [RUNS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
runs=${2:-5}
cli=$build/modelmem
python=/usr/bin/python3
export OMP_NUM_THREADS=1

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
measure() {  # prints "faults seconds" of one run of "$@"
  /usr/bin/time -o "$tmp" -f '%R %e' "$@" >/dev/null 2>&1
  tail -1 "$tmp"
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

bench() {
  local name=$1
  shift
  local fa=() ta=() fm=() tm=()
  for ((i = 0; i < runs; i++)); do
    read -r f t < <(measure "$@")
    fa+=("$f"); ta+=("$t")
    read -r f t < <(measure "$cli" run -- "$@")
    fm+=("$f"); tm+=("$t")
  done
  local mfa mta mfm mtm
  mfa=$(printf '%s\n' "${fa[@]}" | median); mta=$(printf '%s\n' "${ta[@]}" | median)
  mfm=$(printf '%s\n' "${fm[@]}" | median); mtm=$(printf '%s\n' "${tm[@]}" | median)
  printf '%-22s alone %8s faults %6ss | modelmem run %8s faults %6ss | faults x%s, time x%s\n' \
    "$name" "$mfa" "$mta" "$mfm" "$mtm" \
    "$(awk -v a="$mfa" -v b="$mfm" 'BEGIN {printf "%.3f", b / a}')" \
    "$(awk -v a="$mta" -v b="$mtm" 'BEGIN {printf "%.3f", b / a}')"
}

echo "runs: $runs each, median; $(date -u +%Y-%m-%dT%H:%MZ); $(git -C "$root" rev-parse --short HEAD)"
bench "torch loop (10x20)" "$python" "$root/tests/journeys/torch_loop.py" 10
bench "resnet50 b1 (20 inf)" "$python" "$here/resnet50_b1.py" 20
