#!/bin/bash
# Two builds of libmodelmem_preload.so side by side on bench_small_pairs (a refactor's check that
# the small-request path kept its speed): `rounds` interleaved rounds, each running A then B
# (and B then A with --swap, to see the order's own bias), with and without the small-block
# cache; median CPU ns per allocation+free pair.
# Usage: bench/e2e/small_pairs_ab.sh BUILD_A BUILD_B [rounds] [--swap]
set -euo pipefail
a=$1/integrations/preload/libmodelmem_preload.so
b=$2/integrations/preload/libmodelmem_preload.so
rounds=${3:-15}
prog=$2/bench/bench_small_pairs
for f in "$a" "$b" "$prog"; do [[ -e $f ]] || { echo "small_pairs_ab: $f: no such file" >&2; exit 2; }; done
order=("A|$a" "B|$b")
[[ ${4:-} == --swap ]] && order=("B|$b" "A|$a")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((r = 0; r < rounds; r++)); do
  for cache in "cache|strategy:caching" "no cache|strategy:caching,preload_cache_kb:0"; do
    for o in "${order[@]}"; do
      LD_PRELOAD=${o#*|} MODELMEM_ALLOC_CONF=${cache#*|} "$prog" 3 |
        sed "s/^/${o%%|*} (${cache%%|*})|/" >>"$out"
    done
  done
done
python3 "$(dirname "$0")/pairs_table.py" "$out" preload --sorted
