// traces: cost of recording one event (Recorder::on_event), and of an allocate+free pair on the
// caching pool with and without the recorder installed.
#include <benchmark/benchmark.h>

#include "modelmem/alloc/caching_allocator.hpp"
#include "modelmem/device/host.hpp"
#include "modelmem/trace/recorder.hpp"

namespace {
using namespace modelmem;

void drain_all(trace::Recorder& r) {
  r.drain([](const alloc::Event&, void*) {}, nullptr);
}

void BM_RecorderOnEvent(benchmark::State& state) {
  static trace::Recorder recorder(1 << 16);
  alloc::Event e{alloc::EventKind::kAlloc, 1, 0x1000, 4096, 0, 0, 0, nullptr};
  std::size_t n = 0;
  for (auto _ : state) {
    recorder.on_event(e);
    if (++n % 32768 == 0 && state.thread_index() == 0) drain_all(recorder);
  }
}
BENCHMARK(BM_RecorderOnEvent)->Threads(1)->Threads(2);

void BM_CachingPair(benchmark::State& state) {
  alloc::CachingAllocator pool(device::make_host_device());
  trace::Recorder recorder(1 << 16);
  if (state.range(0) != 0) pool.set_listener(&recorder);
  std::size_t n = 0;
  for (auto _ : state) {
    void* p = pool.allocate(4096);
    benchmark::DoNotOptimize(p);
    pool.deallocate(p);
    if (++n % 16384 == 0) drain_all(recorder);
  }
  state.SetLabel(state.range(0) ? "traced" : "untraced");
}
BENCHMARK(BM_CachingPair)->Arg(0)->Arg(1);
}  // namespace

BENCHMARK_MAIN();
