// Initialisation of libmodelmem_preload.so: the one place that reads the configuration
// (MODELMEM_ALLOC_CONF, MODELMEM_TRACE, MODELMEM_REPORT, MODELMEM_STRICT), builds the stack
// (stack.cpp: the region, the strategy, pools), starts the small-block cache, turns the library
// ready and publishes its pools. It runs from the library's constructor; until it has finished
// every request goes to the next allocator (and for good when it fails: the library then says
// why on stderr and stays off, or stops the program with MODELMEM_STRICT=1). The shared state it
// fills in is defined here (state.hpp).
#include <malloc.h>
#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "cache_glue.hpp"
#include "modelmem/alloc/planned_allocator.hpp"
#include "report.hpp"
#include "state.hpp"
#include "strategy.hpp"
#include "trace_file.hpp"

namespace modelmem::preload {

// The shared state (state.hpp says what each one is).
std::atomic<int> g_state{kNotReady};
std::size_t g_threshold = 64u << 10;
RegionDevice* g_region = nullptr;
std::mutex g_mutex;
alloc::Allocator* g_alloc = nullptr;
bool g_has_pools = false;
bool g_planned = false;
Stack* g_stack = nullptr;
trace::Recorder* g_recorder = nullptr;
std::string* g_trace_path = nullptr;
std::string* g_describe = nullptr;
std::uint64_t g_served = 0;
std::atomic<std::uint64_t> g_large_libc{0};
// Every thread-local of the library (state.hpp, strategy.hpp, next_allocator.hpp,
// cache_glue.hpp), defined together in this order: one TLS block laid out as one translation
// unit lays it out, the small-block cache first, so the fields malloc and free touch share
// cache lines the same way in every build.
__thread int t_depth __attribute__((tls_model("initial-exec"))) = 0;
__thread bool t_quota_refused __attribute__((tls_model("initial-exec"))) = false;
__thread bool t_resolving __attribute__((tls_model("initial-exec"))) = false;
__thread ThreadCache t_cache __attribute__((tls_model("initial-exec")));

namespace {

// MODELMEM_STRICT=1: a library that cannot serve requests stops the program instead.
bool strict() {
  const char* v = std::getenv("MODELMEM_STRICT");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

__attribute__((constructor)) void preload_constructor() {
  initialise();
}

}  // namespace

void initialise() noexcept {
  int expected = kNotReady;
  if (!g_state.compare_exchange_strong(expected, kInitialising)) return;
  Inside inside;
  resolve_exec();
  // The planned arena's planning thread allocates as modelmem code: from the C heap, never from
  // the arena it is planning, and not counted as the program's requests.
  alloc::set_planner_thread_hook([] { ++t_depth; });
  try {
    const char* conf = std::getenv("MODELMEM_ALLOC_CONF");
    const char* trace = std::getenv("MODELMEM_TRACE");
    auto* stack = new Stack(build_stack(conf ? conf : "", trace ? trace : "", false));
    if (stack->off) {  // strategy:system
      delete stack;
      g_state.store(kOff, std::memory_order_release);
      return;
    }
    g_stack = stack;  // kept for the process's lifetime: exit handlers may free its memory
    g_threshold = stack->threshold;
    g_region = stack->region.get();
    // Said once per run: the children of a program inherit the limit and the note.
    if (!stack->region->adapted().empty() && std::getenv("MODELMEM_RESERVE_NOTED") == nullptr) {
      std::fprintf(stderr, "modelmem preload: %s\n", stack->region->adapted().c_str());
      ::setenv("MODELMEM_RESERVE_NOTED", "1", 1);
    }
    // The C library now sees small requests only: keep its heap top instead of trimming it
    // at 128 KiB (its default), or a steady loop would shrink and regrow it (brk calls and page
    // faults) over and over.
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    g_alloc = stack->built.allocator.get();
    g_has_pools = !g_alloc->pools().empty();
    const alloc::Allocator* main = g_has_pools ? g_alloc->upstream() : g_alloc;
    g_planned = main != nullptr && main->stats().planned.has_value();
    g_describe = new std::string(g_alloc->describe());
    if (trace != nullptr && *trace != '\0') {
      g_trace_path = new std::string(trace);
      // Streamed every kTraceChunk events: the ring only has to absorb a burst while one
      // thread writes.
      g_recorder = new trace::Recorder(std::size_t{1} << 16);
      start_trace(trace);
      // Says in the trace that this device has no virtual memory, so that analyze advises no
      // expandable segments a run here would not get (it falls back to fixed-size segments).
      if (stack->built.device && !stack->built.device->probe_virtual_memory().supported)
        g_recorder->mark("device_no_vmm");
      g_alloc->set_listener(g_recorder);
    }
    if (const char* r = std::getenv("MODELMEM_REPORT"); r != nullptr && std::strcmp(r, "1") == 0)
      std::atexit(print_report);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    start_cache(stack->cache_bytes);
    g_state.store(kReady, std::memory_order_release);
    publish_pools();  // after pthread_atfork above: the publisher's fork handlers run first
  } catch (const std::exception& e) {
    if (strict()) {
      std::fprintf(stderr, "modelmem preload: cannot serve requests (MODELMEM_STRICT=1): %s\n",
                   e.what());
      _exit(2);
    }
    std::fprintf(stderr,
                 "modelmem preload: disabled, every request goes to the next allocator: %s\n",
                 e.what());
    g_state.store(kOff, std::memory_order_release);
  }
}

}  // namespace modelmem::preload
