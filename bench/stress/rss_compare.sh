#!/bin/sh
# Memory given back: the random workload of alloc_stress (threads x random sizes 1 B-8 MiB, a
# checksum in every block, cross-thread frees) run through malloc under glibc, jemalloc,
# tcmalloc (Debian's libjemalloc2 / libtcmalloc-minimal4, by LD_PRELOAD) and modelmem (`modelmem
# run`, caching and the default planned strategy), one after the other in one invocation.
# Prints the peak RSS and the RSS once everything is freed and the program has been idle IDLE
# seconds (modelmem gives cached memory back after cache_decay_ms, 10 s by default); then a
# second table with malloc_trim(0) called right after everything is freed.
#   bench/stress/rss_compare.sh BUILD_DIR [SECONDS] [THREADS] [IDLE]
set -u
build=${1:?usage: rss_compare.sh BUILD_DIR [SECONDS] [THREADS] [IDLE]}
seconds=${2:-20} threads=${3:-8} idle=${4:-13}
stress="$build/tests/alloc_stress"
lib=/usr/lib/x86_64-linux-gnu
args="--seconds $seconds --threads $threads --idle $idle --conf strategy:system"
echo "| allocator | ops | peak RSS (MiB) | RSS when all freed (MiB) | RSS after ${idle} s idle (MiB) |"
echo "|---|---|---|---|---|"
row() {
  name=$1; shift
  out=$("$@" 2>&1) || { echo "| $name | failed: $(echo "$out" | tail -1) | | | |"; return; }
  ops=$(echo "$out" | awk '/ ops /{print $2}')
  echo "$out" | awk -v n="$name" -v ops="$ops" '/^rss:/{print "| " n " | " ops " | " $3 " | " $9 " | " $15 " |"}'
}
row "glibc $(ldd --version | head -1 | awk '{print $NF}')" "$stress" $args
for l in libjemalloc.so.2:jemalloc libtcmalloc_minimal.so.4:tcmalloc; do
  so=${l%%:*} name=${l##*:}
  if [ -e "$lib/$so" ]; then row "$name" env LD_PRELOAD="$lib/$so" "$stress" $args
  else echo "| $name | not installed ($lib/$so) | | | |"; fi
done
row "modelmem caching" "$build/modelmem" run --conf strategy:caching -- "$stress" $args
row "modelmem caching, cache_decay_ms:0" "$build/modelmem" run --conf strategy:caching,cache_decay_ms:0 -- "$stress" $args
row "modelmem default (planned)" "$build/modelmem" run -- "$stress" $args

# The same, each allocator asked to give memory back right after everything is freed
# (malloc_trim(0), what a server that dropped a model can call), without idle time.
targs="--seconds $seconds --threads $threads --trim --conf strategy:system"
echo
echo "| allocator | ops | peak RSS (MiB) | RSS when all freed (MiB) | RSS right after malloc_trim(0) (MiB) |"
echo "|---|---|---|---|---|"
trow() {
  name=$1; shift
  out=$("$@" 2>&1) || { echo "| $name | failed: $(echo "$out" | tail -1) | | | |"; return; }
  ops=$(echo "$out" | awk '/ ops /{print $2}')
  echo "$out" | awk -v n="$name" -v ops="$ops" '/^rss-trim:/{print "| " n " | " ops " | " $3 " | " $9 " | " $14 " |"}'
}
trow "glibc $(ldd --version | head -1 | awk '{print $NF}')" "$stress" $targs
for l in libjemalloc.so.2:jemalloc libtcmalloc_minimal.so.4:tcmalloc; do
  so=${l%%:*} name=${l##*:}
  if [ -e "$lib/$so" ]; then trow "$name" env LD_PRELOAD="$lib/$so" "$stress" $targs
  else echo "| $name | not installed ($lib/$so) | | | |"; fi
done
trow "modelmem caching" "$build/modelmem" run --conf strategy:caching -- "$stress" $targs
trow "modelmem default (planned)" "$build/modelmem" run -- "$stress" $targs
