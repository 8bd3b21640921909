#!/usr/bin/env bash
# The planner on instances of real size: the recorded training steps in bench/planner/instances/
# (10^4 buffers each, most of them weights, gradients and optimiser state living across the
# step), steps stacked by stack_steps.py into 10^5 and 10^6 buffers, and the 11 MiniMalloc
# challenging instances stacked into 6.5 x 10^4 (hard parts whose optima are partly unknown).
# Every heuristic and `best` on each, `best` with --threads; prints one Markdown table per
# instance: arena, ratio to the peak-live bound, the strongest lower bound proven, seconds and
# peak memory (RSS of the whole `modelmem solve` process, reading the CSV included).
#
#   bench/planner/large.sh [--limit S] [--limit-1m S] [--threads N] [--only NAME,...]
# Defaults: 20 s for `best` up to 10^5 buffers, 60 s at 10^6, 2 threads.
set -euo pipefail
cd "$(dirname "$0")/../.."
limit=20 limit1m=60 threads=2 only=""
while (($#)); do
  case $1 in
    --limit) limit=$2; shift 2 ;;
    --limit-1m) limit1m=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "usage: $0 [--limit S] [--limit-1m S] [--threads N] [--only NAME,...]" >&2; exit 2 ;;
  esac
done
bin=${MODELMEM:-build/modelmem}
[[ -x $bin ]] || { echo "$bin: build it first (cmake --build build --target modelmem_cli)" >&2; exit 1; }
data=${MODELMEM_SHARED_DATA:-$PWD/../shared/data}/minimalloc
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for f in bench/planner/instances/*.csv.gz; do gzip -dc "$f" >"$work/$(basename "${f%.gz}")"; done
stack=bench/planner/stack_steps.py
python3 $stack "$work/resnet50_b8.step.csv" --copies 100 --carry 2 -o "$work/resnet50_b8.x100.csv" 2>/dev/null
python3 $stack "$work/gpt2.step.csv" --copies 80 --carry 2 --jitter 0.2 --seed 2 -o "$work/gpt2.x80.jitter.csv" 2>/dev/null
python3 $stack "$work/bert.step.csv" --copies 1000 --carry 2 --jitter 0.25 -o "$work/bert.x1000.jitter.csv" 2>/dev/null
if [[ -f $data/A.1048576.csv ]]; then
  python3 $stack "$data"/[A-K].1048576.csv --copies 220 --carry 0 -o "$work/minimalloc.x220.csv" 2>/dev/null
  python3 $stack "$data"/[A-K].1048576.csv --copies 220 --carry 2 --seed 3 -o "$work/minimalloc.x220.carry.csv" 2>/dev/null
fi

echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) cores, commit $(git rev-parse --short HEAD), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start, by:"
echo
echo '```sh'
echo "bench/planner/large.sh --limit $limit --limit-1m $limit1m --threads $threads${only:+ --only $only}"
echo '```'
for f in "$work"/*.csv; do
  name=$(basename "${f%.csv}")
  [[ -n $only && ,$only, != *,$name,* ]] && continue
  n=$(($(wc -l <"$f") - 1))
  t=$limit
  ((n > 500000)) && t=$limit1m
  echo
  echo "#### $name: $n buffers (\`best\`: --time-limit $t --threads $threads)"
  echo
  echo "| solver | arena | / peak-live bound | lower bound proven | time (s) | peak RSS (MB) | note |"
  echo "|---|---|---|---|---|---|---|"
  for s in naive greedy-size greedy-breadth best-fit best; do
    out=$( { /usr/bin/time -f "rss %M" nice -n 10 "$bin" solve "$f" --solver $s --time-limit "$t" --threads "$threads"; } 2>&1 )
    row=$(grep "^$s " <<<"$out" || echo "$s - - - - $(tail -1 <<<"$out")")
    rss=$(grep '^rss ' <<<"$out" | awk '{printf "%.0f", $2 / 1024}' || true)
    lb=$(grep -o '^proven lower bound [0-9]*' <<<"$out" | awk '{print $4}' || true)
    peak=$(head -1 <<<"$out" | grep -o 'lower bound [0-9]*' | awk '{print $3}' || true)
    read -r _ arena ratio _ secs note <<<"$row"
    echo "| $s | $arena | $ratio | ${lb:-$peak} | $secs | $rss | ${note:-} |"
  done
done
