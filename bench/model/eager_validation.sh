#!/usr/bin/env bash
# The eager figure of `modelmem plan` against PyTorch eager: for each torchvision model and
# batch, export the model to ONNX, record one eager inference with `modelmem run --trace`,
# measure its activation peak from the trace (bench/model/eager_trace.py) and compare it with
# the eager peak `modelmem plan --runtime eager` prints. Needs the project environment
# (scripts/setup --runtimes: torch 2.x, torchvision, onnx; PYTHON=... for another interpreter).
#
# Usage: [SIZE=224] [BATCHES="1 8"] [TIMEOUT=1800] [FRESH=1]
#        bench/model/eager_validation.sh [BUILD_DIR] [WORK_DIR] [MODEL... | all]
#   MODEL...  torchvision model names; none: resnet50 mobilenet_v2 densenet121 resnet18;
#             `all`: every classification model of torchvision.models (list_models), smallest
#             (fewest parameters) first.
#   SIZE      the input's height and width.
#   MEASURE=0 measures nothing new: models without a kept measurement get a row saying so
#             (a table of what an interrupted run measured, planned with today's build).
#   KEEP_TRACES=1 keeps each inference's trace (WORK_DIR/MODEL.bB.csv) to compare live sets;
#             without it a trace is kept only when the model is more than 5 % off.
#   MAX_RAM_GIB  (8) a step whose estimated memory exceeds it is not run and the model gets a
#             row saying so (the machine is shared). The estimates, not measurements: an export
#             0.5 GiB + 4 x the fp32 weights (the model, the traced graph, constant folding, the
#             serialized file); an inference 0.5 GiB (the interpreter and torch, measured at
#             0.23 GiB) + 2 x the weights (oneDNN's reordered copies) + 2 x the plan's eager peak.
#   TIMEOUT   seconds one export or one inference may take; past it the model gets a row
#             saying so and the run goes on.
#   Resuming: each measured PyTorch peak is kept in WORK_DIR/MODEL.bB.measured (and the ONNX
#             export in WORK_DIR/MODEL.onnx) and reused by the next run, which plans again with
#             the build given (FRESH=1 re-measures everything). A failure row is kept the same
#             way (MODEL.bB.row), except a timeout or a kill, which the next run retries.
# A model that does not export, run, or fit in memory at SIZE gets a row saying why instead
# of failing the run; the exports and inferences run with oom_score_adj 1000 (the kernel kills
# them first, not a neighbour) under `nice -n 10`. Exit status 1 when a measured model is more
# than 5 % off, 0 otherwise.
set -uo pipefail
cd "$(dirname "$0")/../.."
# MKL keeps its GEMM packing buffers in a cache of its own when MKL_DISABLE_FAST_MM is empty
# (`modelmem run` turns the cache off otherwise): warm after the warm-up inferences, the measured
# one then holds PyTorch's tensors only, what the eager figure counts (docs/preload.md).
export MKL_DISABLE_FAST_MM=
build=$(realpath "${1:-build}")
work=${2:-/tmp/modelmem_eager_validation}
shift $(($# > 2 ? 2 : $#))
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(resnet50 mobilenet_v2 densenet121 resnet18)
tool=$build/modelmem
size=${SIZE:-224}
batches=${BATCHES:-1 8}
limit=${TIMEOUT:-1800}
max_ram=$((${MAX_RAM_GIB:-8} * 1073741824))
script=$PWD/bench/model/eager_trace.py
py=${PYTHON:-$PWD/.venv/bin/python}  # the project environment (scripts/setup --runtimes)
mkdir -p "$work"
if [ "${models[*]}" = all ]; then
  mapfile -t models < <($py "$script" list) || { echo "cannot list torchvision's models" >&2; exit 2; }
fi
[ -n "${FRESH:-}" ] && rm -f "$work"/*.row "$work"/*.measured

# Runs "$@" nicely, first in line for the OOM killer, under the timeout; prints why it failed.
guarded() {
  local log=$1 rc
  shift
  (echo 1000 >/proc/self/oom_score_adj 2>/dev/null; exec timeout -k 10 "$limit" nice -n 10 "$@") \
    >"$log" 2>&1
  rc=$?
  case $rc in
    0) return 0 ;;
    124) echo "timed out after ${limit} s" ;;
    137) echo "killed (out of memory; SIGKILL)" ;;
    *) echo "exit $rc: $(grep -v '^\s*$' "$log" | grep -iv warn | tail -1 | tr '|' '/' | cut -c1-120)" ;;
  esac
  return 1
}
# Prints a failure row; keeps it for the next run unless the failure was a timeout, a kill
# or the RAM limit.
failed() {
  emit "$2"
  case $2 in *"timed out"* | *killed* | *"not measured"*) ;; *) echo "$2" >"$1" ;; esac
}
mib() { $py -c "print(f'{$1 / 1048576:.2f} MiB')"; }
gib() { $py -c "print(f'{$1 / 1073741824:.1f} GiB')"; }

table=$work/table.md
: >"$table"
emit() { echo "$1" | tee -a "$table"; }
date -u
echo
echo "| model | batch | plan eager peak | PyTorch eager peak (trace) | plan / trace | ideal arena |"
echo "|---|---|---|---|---|---|"
for m in "${models[@]}"; do
  onnx=$work/$m.onnx
  export_error=
  for b in $batches; do
    row=$work/$m.b$b.row
    if [ -f "$row" ]; then
      emit "$(cat "$row")"
      continue
    fi
    if [ "${MEASURE:-1}" = 0 ] && { [ ! -s "$work/$m.b$b.measured" ] || [ ! -f "$onnx" ]; }; then
      emit "| $m | $b | not measured (run stopped before this model) | | | |"
      continue
    fi
    if [ ! -f "$onnx" ] && [ -z "$export_error" ]; then
      if ! n=$($py "$script" params "$m" 2>/dev/null); then
        export_error="does not build: $($py "$script" params "$m" 2>&1 | tail -1 | cut -c1-120)"
      elif [ $((536870912 + 16 * n)) -gt "$max_ram" ]; then
        export_error="not measured: its export would need about $(gib $((536870912 + 16 * n))) of RAM (estimate), over MAX_RAM_GIB=${MAX_RAM_GIB:-8}"
      elif ! why=$(guarded "$work/$m.export.log" $py "$script" export "$m" "$onnx.part" "$size"); then
        export_error="does not export at ${size}x${size}: $why"
      else
        mv "$onnx.part" "$onnx"
      fi
    fi
    if [ -n "$export_error" ]; then
      failed "$row" "| $m | $b | $export_error | | | |"
      continue
    fi
    if ! "$tool" plan "$onnx" --dim batch="$b" --runtime eager -o "$work/$m.b$b.json" \
      >"$work/$m.b$b.plan.log" 2>&1; then
      emit "| $m | $b | plan fails: $(tail -1 "$work/$m.b$b.plan.log" | cut -c1-120) | | | |"
      continue
    fi
    read -r eager ideal weights < <($py -c "import json,sys; j=json.load(open(sys.argv[1])); print(j['eager_peak_bytes'], j['ideal_arena_bytes'], j['weights_bytes'])" "$work/$m.b$b.json")
    if [ ! -s "$work/$m.b$b.measured" ]; then
      ram=$((536870912 + 2 * weights + 2 * eager))
      if [ "$ram" -gt "$max_ram" ]; then
        emit "| $m | $b | not measured: its inference would need about $(gib $ram) of RAM (estimate), over MAX_RAM_GIB=${MAX_RAM_GIB:-8} | | | |"
        continue
      fi
      if ! why=$(guarded "$work/$m.b$b.log" "$tool" run --conf strategy:caching,preload_threshold_kb:1 \
        --trace "$work/$m.b$b.csv" -- $py "$script" infer "$m" "$b" "$size"); then
        failed "$row" "| $m | $b | does not run: $why | | | |"
        continue
      fi
      if ! $py "$script" measure "$work/$m.b$b.csv" "$b" "$size" >"$work/$m.b$b.measured"; then
        rm -f "$work/$m.b$b.measured"
        emit "| $m | $b | trace unreadable | | | |"
        continue
      fi
    fi
    measured=$(cat "$work/$m.b$b.measured")
    ratio=$($py -c "print(f'{$eager / $measured:.4f}')")
    # Large models' traces are gigabytes: kept only to study a model more than 5 % off.
    [ -n "${KEEP_TRACES:-}" ] || $py -c "import sys; sys.exit(abs($ratio - 1) <= 0.05)" ||
      rm -f "$work/$m.b$b.csv"
    emit "| $m | $b | $(mib "$eager") | $(mib "$measured") | $ratio | $(mib "$ideal") |"
  done
done
# The summary reads the rows printed above.
read -r n within worst worst_model < <($py -c "
import sys
n = within = 0; worst = 0.0; who = '-'
for line in sys.stdin:
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    try: ratio = float(cells[4])
    except (IndexError, ValueError): continue
    n += 1; off = abs(ratio - 1) * 100
    within += off <= 5
    if off > worst: worst, who = off, f'{cells[0]}/b{cells[1]}'
print(n, within, f'{worst:.2f}', who)" <"$table")
echo
echo "measured rows: $n, within 5 %: $within, largest difference: $worst % ($worst_model)"
$py -c "import sys; sys.exit(0 if $worst <= 5 else 1)"
