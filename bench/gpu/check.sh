#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU, CUDA, CMake, ninja and PyTorch (nothing else
# is needed): builds the minimal configuration (core + CUDA library, no third-party package),
# runs its tests (the CUDA ones must pass, not skip), then benchmarks inference with varying
# batch sizes / sequence lengths under PyTorch's allocator and modelmem's. Prints the table last;
# writes everything to $OUT when set (else bench/gpu/results/). Takes about 5 minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-bench/gpu/results}
mkdir -p "$out"
start=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - start ))s] $*"; }

stamp "machine"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1;
  nvcc --version | tail -1; cmake --version | head -1;
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'; } \
  | tee "$out/machine.txt"

stamp "build (MODELMEM_MINIMAL=ON)"
if ! { cmake -S . -B build-gpu -G Ninja -DMODELMEM_MINIMAL=ON -DCMAKE_BUILD_TYPE=Release \
         -DPython3_EXECUTABLE="$(command -v python3)" &&
       cmake --build build-gpu -j "$(nproc)"; } > "$out/build.log" 2>&1; then
  tail -30 "$out/build.log"
  stamp "build failed"
  exit 1
fi
tail -2 "$out/build.log"

stamp "tests"
ctest --test-dir build-gpu --output-on-failure -V > "$out/ctest.log" 2>&1
test_rc=$?
grep -E "Test +#|tests passed|Skipped|Failed|passed$|SKIPPED|NOTE|expected OOM|cuda:0 " "$out/ctest.log" | head -40
if grep -q "Skipped" "$out/ctest.log" && nvidia-smi >/dev/null 2>&1; then
  echo "a CUDA test was skipped on a machine with a GPU: that is a failure here"
  test_rc=1
fi

stamp "benchmark"
PYTHONUNBUFFERED=1 python3 bench/gpu/run_bench.py --lib build-gpu/libmodelmem_cuda_alloc.so \
  --out "$out" ${PLANNED_CONF:+--planned "$PLANNED_CONF"} 2>&1 | tee "$out/bench.log"
bench_rc=${PIPESTATUS[0]}

stamp "done: tests rc=$test_rc, benchmark rc=$bench_rc"
echo
cat "$out/gpu_bench.md" 2>/dev/null
[[ $test_rc -eq 0 && $bench_rc -eq 0 ]]
