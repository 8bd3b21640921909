#!/bin/bash
# Large requests side by side: bench_large_steps replays one recorded inference step (the blocks
# of 64 KiB and more of PyTorch eager, ResNet-50 batch 1, by default) under glibc, jemalloc,
# tcmalloc, mimalloc and the modelmem preload library (planned arena, caching pool),
# `rounds` interleaved rounds, median CPU ns per allocation+free pair.
# Usage: bench/e2e/large_steps.sh [build] [rounds] [STEP.csv]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
rounds=${2:-5}
step=${3:-$here/../../../shared/data/traces/torch_resnet50.step.csv}
lib=/usr/lib/x86_64-linux-gnu
pre=$build/integrations/preload/libmodelmem_preload.so
prog=$build/bench/bench_large_steps
configs=(
  "glibc|"
  "jemalloc|LD_PRELOAD=$lib/libjemalloc.so.2"
  "tcmalloc|LD_PRELOAD=$lib/libtcmalloc_minimal.so.4"
  "mimalloc|LD_PRELOAD=$lib/libmimalloc.so.2"
  "modelmem planned|LD_PRELOAD=$pre MODELMEM_ALLOC_CONF=strategy:planned"
  "modelmem caching|LD_PRELOAD=$pre MODELMEM_ALLOC_CONF=strategy:caching"
)
out=$(mktemp)
for ((r = 0; r < rounds; r++)); do
  for c in "${configs[@]}"; do
    name=${c%%|*}
    echo "$name|$(env ${c#*|} "$prog" "$step" 3)" >>"$out"
  done
done
python3 - "$out" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, ns = line.rstrip("\n").split("|")
    rows.setdefault(name, []).append(float(ns))
print("| allocator | ns per pair (median) | min | max |")
print("|---|---|---|---|")
for name, v in rows.items():
    print(f"| {name} | {statistics.median(v):.1f} | {min(v):.1f} | {max(v):.1f} |")
PY
rm -f "$out"
