#!/usr/bin/env bash
# The planner on real instances nobody here made: every solver on every file of
# ../shared/data/dsa/ (MindSpore SOMAS training graphs of PanGu-alpha and BERT, IREE compiler
# buffers; idealloc's benchmark suite) and on MiniMalloc's challenging instances A-K (at capacity
# 1,048,576, the decision the MiniMalloc paper times, and without a capacity). Prints one
# Markdown table per set: arena, its ratio to the peak-live bound and to the best lower bound
# proven, seconds and peak memory (RSS of the whole `modelmem solve` process, reading included).
#
#   bench/planner/dsa.sh [--limit S] [--minimalloc-limit S] [--threads N] [--only NAME,...]
# Defaults: 20 s per searching solver on the dsa files, 2 s on MiniMalloc's, 2 threads.
set -euo pipefail
cd "$(dirname "$0")/../.."
limit=20 mm_limit=2 threads=2 only=""
while (($#)); do
  case $1 in
    --limit) limit=$2; shift 2 ;;
    --minimalloc-limit) mm_limit=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "usage: $0 [--limit S] [--minimalloc-limit S] [--threads N] [--only NAME,...]" >&2; exit 2 ;;
  esac
done
bin=${MODELMEM:-build/modelmem}
[[ -x $bin ]] || { echo "$bin: build it first (cmake --build build --target modelmem_cli)" >&2; exit 1; }
shared=${MODELMEM_SHARED_DATA:-$PWD/../shared/data}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
solvers=(naive greedy-size greedy-breadth best-fit exact best)

# run FILE LIMIT [--capacity C]: one JSON line per solver into $work/rows.jsonl
run() {
  local f=$1 t=$2
  shift 2
  for s in "${solvers[@]}"; do
    local rc=0
    /usr/bin/time -f "%M" -o "$work/rss" nice -n 10 "$bin" solve "$f" --solver "$s" \
      --time-limit "$t" --threads "$threads" --json "$@" >"$work/out.json" 2>"$work/err" || rc=$?
    python3 - "$f" "$s" "$rc" "$work/out.json" "$work/err" "$work/rss" >>"$work/rows.jsonl" <<'PY'
import json, os, sys
f, s, rc, out, err, rss = sys.argv[1:]
row = {"file": os.path.basename(f), "solver": s, "rc": int(rc)}
try:
    row["report"] = json.load(open(out))
except Exception:
    row["error"] = open(err).read().strip().splitlines()[-1:] or ["no output"]
lines = [l for l in open(rss).read().split() if l.isdigit()]
row["rss_mb"] = int(lines[-1]) / 1024 if lines else None
print(json.dumps(row))
PY
  done
}

table() {  # table TITLE: prints the rows gathered so far, then forgets them
  python3 - "$1" "$work/rows.jsonl" <<'PY'
import json, sys
title, path = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(path)]
print(f"\n#### {title}\n")
print("| file | buffers | solver | arena | / peak-live | / best bound | proven bound | time (s) | peak RSS (MB) | note |")
print("|---|---|---|---|---|---|---|---|---|---|")
by_file = {}
for r in rows:
    by_file.setdefault(r["file"], []).append(r)
for f, rs in by_file.items():
    best_bound = max((r["report"]["proven_lower_bound"] for r in rs if "report" in r), default=0)
    for r in rs:
        if "report" not in r:
            print(f"| {f} | - | {r['solver']} | - | - | - | - | - | - | {r['error'][0]} |")
            continue
        rep = r["report"]
        row = rep["solvers"][0]
        arena = row["arena"]
        pl = rep["peak_live_bound"]
        ratio = f"{arena / pl:.4f}" if arena and pl else "-"
        to_best = f"{arena / best_bound:.4f}" if arena and best_bound else "-"
        proven = " **opt**" if arena and row["proven_optimal"] else ""
        note = row["note"].replace("|", "/")
        rss = f"{r['rss_mb']:.0f}" if r["rss_mb"] else "-"
        print(f"| {f} | {rep['buffers']} | {r['solver']} | {arena if arena else 'none'}{proven} | {ratio} | {to_best} "
              f"| {row['lower_bound']} | {row['seconds']:.3f} | {rss} | {note} |")
    if len(rs) > 1:
        pass
total = {}
for r in rows:
    if "report" in r:
        total[r["solver"]] = total.get(r["solver"], 0) + r["report"]["solvers"][0]["seconds"]
print("\nTotal solver time per solver (s): " + ", ".join(f"{s} {t:.2f}" for s, t in total.items()))
PY
  : >"$work/rows.jsonl"
}

echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) cores, commit $(git rev-parse --short HEAD), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start, by:"
echo
echo '```sh'
echo "bench/planner/dsa.sh --limit $limit --minimalloc-limit $mm_limit --threads $threads${only:+ --only $only}"
echo '```'
: >"$work/rows.jsonl"
for f in "$shared"/dsa/*.csv; do
  name=$(basename "${f%.csv}")
  [[ -n $only && ,$only, != *,$name,* ]] && continue
  run "$f" "$limit"
done
[[ -s $work/rows.jsonl ]] && table "Real instances (\`../shared/data/dsa/\`, --time-limit $limit --threads $threads)"
if [[ -z $only || ,$only, == *,minimalloc,* ]]; then
  for f in "$shared"/minimalloc/[A-K].1048576.csv; do run "$f" "$mm_limit" --capacity 1048576; done
  table "MiniMalloc A-K at capacity 1,048,576 (--time-limit $mm_limit)"
  for f in "$shared"/minimalloc/[A-K].1048576.csv; do run "$f" "$mm_limit"; done
  table "MiniMalloc A-K without a capacity: minimise (--time-limit $mm_limit)"
fi
