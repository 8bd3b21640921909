#!/usr/bin/env bash
# `modelmem solve --time-limit T` at 10^5 and 10^6 buffers: does the whole command keep T once
# the file is read? The instances are the recorded BERT training step stacked with jitter,
# 100 and 1,000 times (large.sh's bert.x1000.jitter: 1,010,758 buffers). For each size and
# limit: the command's wall time, the part spent
# reading the file and writing the plan with --output (`read_seconds` and `write_seconds` of
# --json, the two parts the limit does not cover), the rest (the bound, the search, validating
# the plan, printing the report, the process's exit), CPU time, peak RSS, and the plan: its
# ratio to the peak-live bound and the heuristic behind it. The load average is printed: run it
# on an idle machine with --nice 0 to see the limit itself, not the other processes.
#
#   bench/planner/time_limit.sh [--limits "1 2 5 10"] [--copies "100 1000"] [--threads N] [--nice N]
set -euo pipefail
cd "$(dirname "$0")/../.."
limits="1 2 5 10" copies="100 1000" threads=1 niceness=10
while (($#)); do
  case $1 in
    --limits) limits=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --copies) copies=$2; shift 2 ;;
    --nice) niceness=$2; shift 2 ;;
    *) echo "usage: $0 [--limits \"1 2 5 10\"] [--copies \"100 1000\"] [--threads N] [--nice N]" >&2; exit 2 ;;
  esac
done
bin=${MODELMEM:-build/modelmem}
[[ -x $bin ]] || { echo "$bin: build it first (cmake --build build --target modelmem_cli)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gzip -dc bench/planner/instances/bert.step.csv.gz >"$work/bert.step.csv"
for c in $copies; do
  python3 bench/planner/stack_steps.py "$work/bert.step.csv" --copies "$c" --carry 2 --jitter 0.25 \
    -o "$work/bert.x$c.jitter.csv" 2>/dev/null
done

echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) cores, commit $(git rev-parse --short HEAD), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start, by:"
echo
echo '```sh'
echo "bench/planner/time_limit.sh --limits \"$limits\" --copies \"$copies\" --threads $threads --nice $niceness"
echo '```'
echo
echo "| buffers | --time-limit | load | wall (s) | reading (s) | writing (s) | the rest (s) | within the limit | CPU (s) | peak RSS (MB) | arena / peak-live | found by | note |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for c in $copies; do
  f=$work/bert.x$c.jitter.csv
  n=$(($(wc -l <"$f") - 1))
  for t in $limits; do
    rc=0
    load=$(cut -d' ' -f1 /proc/loadavg)
    /usr/bin/time -f "%e %U %S %M" -o "$work/time" nice -n "$niceness" "$bin" solve "$f" \
      --time-limit "$t" --threads "$threads" --json -o "$work/plan.csv" >"$work/out.json" 2>"$work/err" || rc=$?
    python3 - "$t" "$rc" "$work/out.json" "$work/time" "$load" "$n" <<'PY'
import json, sys
t, rc, out, tm, load, n = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
wall, user, sys_, rss = open(tm).read().split()[-4:]
wall = float(wall)
try:
    rep = json.load(open(out))
except Exception:
    print(f"| {n} | {t:g} | {load} | {wall:.2f} | - | - | - | - | - | - | - | - | exit {rc}, no report |")
    sys.exit(0)
row = rep["solvers"][0]
read = rep["read_seconds"]
write = rep.get("write_seconds", 0.0)
after = wall - read - write
ratio = f"{rep['best']['arena'] / rep['peak_live_bound']:.4f}" if rep["best"] else "-"
found = rep["best"]["found_by"] if rep["best"] else "-"
note = row["note"].replace("|", "/")
print(f"| {n} | {t:g} | {load} | {wall:.2f} | {read:.2f} | {write:.2f} | {after:.2f} | {'yes' if after <= t else 'no'} "
      f"| {float(user) + float(sys_):.1f} | {int(rss) / 1024:.0f} | {ratio} | {found} | {note} |")
PY
  done
done
