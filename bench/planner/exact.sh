#!/bin/sh
# The exact solver on the MiniMalloc challenging suite, single-threaded:
#   1. decision at capacity 2^20 = 1,048,576 (MiniMalloc's setting), TIME_LIMIT s each (default 60);
#   2. decision for C at its lower bound 1,039,360;
#   3. minimisation without capacity, MIN_LIMIT s each (default 60).
# Usage: bench/planner/exact.sh [BUILD_DIR] > out.txt   (run from the repository root)
set -eu
build=${1:-build-release}
data=${MODELMEM_SHARED_DATA:-$(pwd)/../shared/data}/minimalloc
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target bench_exact -j2 >/dev/null
bin="$build/bench/bench_exact"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -m), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "## decision at capacity 1048576"
"$bin" --capacity 1048576 --time-limit "${TIME_LIMIT:-60}" "$data"/[A-K].1048576.csv
echo "## C at its lower bound"
"$bin" --capacity 1039360 --time-limit "${TIME_LIMIT:-60}" "$data"/C.1048576.csv
echo "## minimisation"
"$bin" --time-limit "${MIN_LIMIT:-60}" "$data"/[A-K].1048576.csv
