#!/bin/sh
# Many runs of a multi-threaded Python program interrupted with SIGINT (as Ctrl-C sends it) in
# the middle of its allocations, under every strategy of `modelmem run`. A run that has not
# ended 10 s after its SIGINT is a hang: its threads' stacks are printed (gdb) and it is killed.
#   bench/stress/sigint_runs.sh BUILD_DIR [RUNS_PER_STRATEGY] [MODE]
# MODE: run (`modelmem run`, the default), trace (`modelmem run --trace`: the program is a child,
# `run` forwards the signal, the trace is flushed in the handler and must read back), preload
# (LD_PRELOAD and MODELMEM_ALLOC_CONF directly, with MODELMEM_TRACE).
# Prints one line per strategy: runs, ended by SIGINT, other endings, hangs, unreadable traces.
set -u
build=${1:?usage: sigint_runs.sh BUILD_DIR [RUNS]}
runs=${2:-40}
mode=${3:-run}
python=${PYTHON:-/usr/bin/python3}
script=$(mktemp /tmp/modelmem-sigint.XXXXXX.py)
trap 'rm -f "$script"' EXIT
cat > "$script" <<'PY'
import os, random, sys, threading
def work(seed):
    r = random.Random(seed)
    live = []
    while True:
        live.append(bytearray(r.choice((70000, 300000, 1 << 20, 5 << 20))))
        if len(live) > 30:
            del live[r.randrange(len(live))]
threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(8)]
for t in threads:
    t.start()
print("ready", flush=True)
work(99)
PY
for conf in strategy:planned strategy:planned,planned_steps:marked strategy:caching \
            strategy:caching,thread_cache_mb:4 strategy:static,static_pool_mb:512 strategy:system; do
  ints=0 other=0 hangs=0 unreadable=0
  i=0
  while [ $i -lt "$runs" ]; do
    i=$((i + 1))
    out=$(mktemp)
    # A non-interactive shell starts background jobs with SIGINT ignored: back to the default.
    trace=$(mktemp -u /tmp/modelmem-sigint-trace.XXXXXX).csv
    case $mode in
      run) env --default-signal=INT "$build/modelmem" run --conf "$conf" -- "$python" "$script" \
             > "$out" 2>&1 & ;;
      trace) env --default-signal=INT "$build/modelmem" run --conf "$conf" --trace "$trace" -- \
               "$python" "$script" > "$out" 2>&1 & ;;
      preload) env --default-signal=INT LD_PRELOAD="$build/integrations/preload/libmodelmem_preload.so" \
                 MODELMEM_ALLOC_CONF="$conf" MODELMEM_TRACE="$trace" "$python" "$script" > "$out" 2>&1 & ;;
    esac
    pid=$!
    # Wait for "ready", then interrupt at a random point of the allocation loop.
    n=0
    while ! grep -q ready "$out" && [ $n -lt 200 ]; do sleep 0.05; n=$((n + 1)); done
    sleep "0.$(shuf -i 0-3 -n 1)$(shuf -i 0-9 -n 1)"
    kill -INT $pid
    n=0
    while kill -0 $pid 2>/dev/null && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
    if kill -0 $pid 2>/dev/null; then
      hangs=$((hangs + 1))
      echo "HANG under $conf (pid $pid); stacks:"
      gdb -p $pid -batch -ex 'thread apply all bt' 2>/dev/null | grep -E '^(Thread|#)' | head -80
      kill -KILL $pid
      wait $pid
    else
      wait $pid
      rc=$?
      if [ $rc -eq 130 ]; then ints=$((ints + 1)); else other=$((other + 1)); tail -3 "$out"; fi
      # strategy:system leaves modelmem off: no trace to read.
      if [ "$mode" != run ] && [ "$conf" != strategy:system ] &&
         ! "$build/modelmem" trace "$trace" -o "${trace%.csv}.check.csv" > /dev/null 2>&1; then
        unreadable=$((unreadable + 1))
        echo "unreadable trace under $conf: $("$build/modelmem" trace "$trace" -o "${trace%.csv}.check2.csv" 2>&1 | tail -1)"
      fi
    fi
    rm -f "$out" "$trace" "${trace%.csv}".*.csv
  done
  echo "$mode $conf: $runs runs, $ints ended by SIGINT, $other other, $hangs hangs, $unreadable unreadable traces"
done
