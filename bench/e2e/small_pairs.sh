#!/bin/bash
# Small requests side by side: bench_small_pairs under glibc, tcmalloc, mimalloc and the
# modelmem preload library with and without its small-block cache, `rounds` interleaved rounds,
# median CPU ns per allocation+free pair. Usage: bench/e2e/small_pairs.sh [build] [rounds]
set -euo pipefail
build=${1:-build}
rounds=${2:-5}
lib=/usr/lib/x86_64-linux-gnu
pre=$build/integrations/preload/libmodelmem_preload.so
prog=$build/bench/bench_small_pairs
# The planned arena starts its cache with its first plan, which this program never makes:
# modelmem runs under the caching strategy here (small requests never reach the strategy).
configs=(
  "glibc|"
  "tcmalloc|LD_PRELOAD=$lib/libtcmalloc_minimal.so.4"
  "mimalloc|LD_PRELOAD=$lib/libmimalloc.so.2"
  "modelmem (cache)|LD_PRELOAD=$pre MODELMEM_ALLOC_CONF=strategy:caching"
  "modelmem (no cache)|LD_PRELOAD=$pre MODELMEM_ALLOC_CONF=strategy:caching,preload_cache_kb:0"
)
out=$(mktemp)
for ((r = 0; r < rounds; r++)); do
  for c in "${configs[@]}"; do
    name=${c%%|*}
    env ${c#*|} "$prog" 3 | sed "s/^/$name|/" >>"$out"
  done
done
python3 "$(dirname "$0")/pairs_table.py" "$out"
rm -f "$out"
