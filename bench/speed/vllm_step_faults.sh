#!/bin/bash
# vllm_step_faults.py under each allocator of bench.py: glibc, Debian's jemalloc, tcmalloc and
# mimalloc (LD_PRELOAD), modelmem's caching pool and planned arena (the preload library, with
# glibc's heap in huge pages as `modelmem run` sets it).
#   bench/speed/vllm_step_faults.sh [BUILD_DIR] [ARGS of vllm_step_faults.py...]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
shift || true
py=.venv/bin/python
lib=/usr/lib/x86_64-linux-gnu
preload=$PWD/$build/integrations/preload/libmodelmem_preload.so
model=$(mktemp -d)/llama
"$py" -c "import sys; sys.path.insert(0, 'bench/speed'); import bench; bench.vllm_model('$model')"
for arm in glibc jemalloc tcmalloc mimalloc modelmem-caching modelmem-planned; do
  case $arm in
    glibc) env=(MODELMEM_ARM=glibc) ;;
    jemalloc) env=(LD_PRELOAD=$lib/libjemalloc.so.2) ;;
    tcmalloc) env=(LD_PRELOAD=$lib/libtcmalloc_minimal.so.4) ;;
    mimalloc) env=(LD_PRELOAD=$lib/libmimalloc.so.2) ;;
    modelmem-*) env=(LD_PRELOAD="$preload" MODELMEM_ALLOC_CONF="strategy:${arm#modelmem-}"
                     GLIBC_TUNABLES=glibc.malloc.hugetlb=1) ;;
  esac
  printf '%-17s ' "$arm"
  env "${env[@]}" OMP_NUM_THREADS=2 "$py" bench/speed/vllm_step_faults.py --model "$model" "$@" \
    2>/dev/null | tail -1
done
rm -rf "$(dirname "$model")"
