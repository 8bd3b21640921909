#!/usr/bin/env bash
# Planner benchmark: every solver on every MiniMalloc instance in ../shared/data/minimalloc/,
# at capacity 1,048,576 (does it fit?) and without a capacity (minimise the arena), then the
# heuristics on 10,000 random buffers. Writes the tables into the `## planner` section of
# docs/benchmarks.md (and prints them).
#
#   bench/planner/run.sh [--time-limit SECONDS] [--solvers a,b,...] [--modes capacity,minimise]
#                        [--no-write]
# Defaults: 60 s per solver and instance, every registered solver, both modes. With exact
# solvers a full run takes up to 2 x 11 x 60 s per searching solver.
set -euo pipefail
cd "$(dirname "$0")/../.."

time_limit=60
solvers=""
modes="capacity,minimise"
write=1
while (($#)); do
  case $1 in
    --time-limit) time_limit=$2; shift 2 ;;
    --solvers) solvers=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --no-write) write=0; shift ;;
    *) echo "usage: $0 [--time-limit S] [--solvers a,b] [--modes capacity,minimise] [--no-write]" >&2; exit 2 ;;
  esac
done
data=${MODELMEM_SHARED_DATA:-$PWD/../shared/data}/minimalloc
files=("$data"/*.1048576.csv)
[[ -f ${files[0]} ]] || { echo "no MiniMalloc instances in $data" >&2; exit 1; }

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target bench_minimalloc bench_heuristics -j2 >/dev/null

solver_args=()
[[ -n $solvers ]] && solver_args=(--solvers "$solvers")
report=$(mktemp)
trap 'rm -f "$report"' EXIT
{
  echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), commit $(git rev-parse --short HEAD), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start, by:"
  echo
  echo '```sh'
  echo "bench/planner/run.sh --time-limit $time_limit${solvers:+ --solvers $solvers} --modes $modes"
  echo '```'
  echo
  echo "Each cell: arena (ratio to the lower bound), **opt** when proven optimal, then the"
  echo "solver's time; \"none found\" = no plan within the capacity, \"proven no fit\" = a proof"
  echo "that none exists. Every plan shown was checked with \`validate\`."
  if [[ ,$modes, == *,capacity,* ]]; then
    echo
    echo "#### MiniMalloc challenging instances at capacity 1,048,576 (limit ${time_limit} s)"
    echo
    ./build/bench/bench_minimalloc --capacity 1048576 --time-limit "$time_limit" "${solver_args[@]}" "${files[@]}"
  fi
  if [[ ,$modes, == *,minimise,* ]]; then
    echo
    echo "#### The same instances without a capacity: minimise the arena (limit ${time_limit} s)"
    echo
    ./build/bench/bench_minimalloc --time-limit "$time_limit" "${solver_args[@]}" "${files[@]}"
  fi
  echo
  echo "#### Heuristics on 10,000 random buffers (\`build/bench/bench_heuristics\`)"
  echo
  echo "Sparse: lifetimes up to a tenth of the schedule; dense: up to the whole schedule."
  echo "CPU time is the solver's own; wall time includes waiting for a core on the shared machine."
  echo
  echo '```'
  ./build/bench/bench_heuristics --benchmark_min_time=0.5 2>&1 | grep -v -e '^\*\*\*WARNING' -e '^Running' -e '^Run on' -e '^CPU Caches' -e '^  L[123]' -e '^Load Average'
  echo '```'
} | tee "$report"

if ((write)); then
  python3 - "$report" docs/benchmarks.md <<'PY'
# Replaces what follows the "planner:generated" marker in the planner section (or the whole
# section when there is no marker yet); notes written above the marker are kept.
import sys
report, path = sys.argv[1], sys.argv[2]
body = open(report).read().rstrip("\n")
text = open(path).read()
marker = "<!-- planner:generated (bench/planner/run.sh rewrites what follows) -->\n"
end = text.index("<!-- end:planner -->")
if marker in text[:end]:
    start = text.index(marker) + len(marker)
else:
    start = text.index("## planner\n") + len("## planner\n")
    body = "\n" + marker + body
open(path, "w").write(text[:start] + body + "\n\n" + text[end:])
PY
  echo "wrote the planner section of docs/benchmarks.md" >&2
fi
