#!/usr/bin/env bash
# `modelmem solve --time-limit T` at 10^6 buffers: does the whole command keep T once the file is
# read? The instance is large.sh's bert.x1000.jitter (1,010,758 buffers: 1,000 recorded BERT
# training steps stacked with jitter). For each limit: the command's wall time, the part spent
# reading the file (`read_seconds` of --json, the one part the limit does not cover), the rest
# (the bound, the search, validating and writing the plan with --output, the process's exit),
# CPU time, peak RSS, and the plan: its ratio to the peak-live bound and the heuristic behind it.
#
#   bench/planner/time_limit.sh [--limits "1 2 5 10"] [--threads N]
set -euo pipefail
cd "$(dirname "$0")/../.."
limits="1 2 5 10" threads=1
while (($#)); do
  case $1 in
    --limits) limits=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "usage: $0 [--limits \"1 2 5 10\"] [--threads N]" >&2; exit 2 ;;
  esac
done
bin=${MODELMEM:-build/modelmem}
[[ -x $bin ]] || { echo "$bin: build it first (cmake --build build --target modelmem_cli)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gzip -dc bench/planner/instances/bert.step.csv.gz >"$work/bert.step.csv"
python3 bench/planner/stack_steps.py "$work/bert.step.csv" --copies 1000 --carry 2 --jitter 0.25 \
  -o "$work/bert.x1000.jitter.csv" 2>/dev/null

echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) cores, commit $(git rev-parse --short HEAD), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start, by:"
echo
echo '```sh'
echo "bench/planner/time_limit.sh --limits \"$limits\" --threads $threads"
echo '```'
echo
echo "| --time-limit | wall (s) | reading (s) | after reading (s) | within the limit | CPU (s) | peak RSS (MB) | arena / peak-live | found by | note |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for t in $limits; do
  rc=0
  /usr/bin/time -f "%e %U %S %M" -o "$work/time" nice -n 10 "$bin" solve "$work/bert.x1000.jitter.csv" \
    --time-limit "$t" --threads "$threads" --json -o "$work/plan.csv" >"$work/out.json" 2>"$work/err" || rc=$?
  python3 - "$t" "$rc" "$work/out.json" "$work/time" <<'PY'
import json, sys
t, rc, out, tm = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
wall, user, sys_, rss = open(tm).read().split()[-4:]
wall = float(wall)
try:
    rep = json.load(open(out))
except Exception:
    print(f"| {t:g} | {wall:.1f} | - | - | - | - | - | - | - | exit {rc}, no report |")
    sys.exit(0)
row = rep["solvers"][0]
read = rep["read_seconds"]
after = wall - read
ratio = f"{rep['best']['arena'] / rep['peak_live_bound']:.4f}" if rep["best"] else "-"
found = rep["best"]["found_by"] if rep["best"] else "-"
note = row["note"].replace("|", "/")
print(f"| {t:g} | {wall:.1f} | {read:.1f} | {after:.1f} | {'yes' if after <= t else 'no'} "
      f"| {float(user) + float(sys_):.1f} | {int(rss) / 1024:.0f} | {ratio} | {found} | {note} |")
PY
done
