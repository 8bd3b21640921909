// Allocator microbenchmarks: alloc+free pairs for every modelmem strategy against the C heaps
// people deploy with (glibc malloc, jemalloc, tcmalloc, mimalloc), side by side in one process.
//
// The other heaps are loaded with dlopen(RTLD_DEEPBIND) and called through their own entry
// points (mallocx/dallocx, tc_malloc/tc_free, mi_malloc/mi_free), so none of them replaces the
// process's malloc and modelmem's own bookkeeping runs on glibc in every case. Debian's jemalloc
// uses initial-exec TLS, which dlopen can only place with extra static TLS: main() re-executes
// itself once with GLIBC_TUNABLES=glibc.rtld.optional_static_tls set.
//
//   BM_Hit/<heap>/<size>     the same size allocated and freed again: the cache-hit path
//   BM_Random/<heap>         log-uniform sizes 256 B .. 64 MiB, 8 blocks live, oldest freed first
//   BM_Trace/<heap>/<trace>  a recorded PyTorch inference trace replayed in order (one
//                            iteration = the whole trace); counters pairs, peak_live_MiB and,
//                            for modelmem strategies, peak_reserved_MiB
// Times are CPU times (the shared machine is loaded; wall time mostly measures the others).
// bench/alloc_report.py turns --benchmark_format=json output into the tables of
// docs/benchmarks.md.
// Memory is never touched: these measure the allocator, not page faults.
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "modelmem/alloc/caching_allocator.hpp"
#include "modelmem/alloc/static_allocator.hpp"
#include "modelmem/alloc/system_allocator.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/host.hpp"

#ifndef MODELMEM_SHARED_DATA
#define MODELMEM_SHARED_DATA "../shared/data"
#endif

namespace {

using modelmem::alloc::Allocator;
constexpr std::size_t kMiB = 1u << 20;

// ---- the heaps under test ------------------------------------------------------------------

struct Heap {
  virtual ~Heap() = default;
  virtual void* alloc(std::size_t n) = 0;
  virtual void release(void* p) = 0;
  virtual double peak_reserved() { return std::nan(""); }
  virtual void reset_peak() {}
};

struct CHeap : Heap {
  using Alloc = void* (*)(std::size_t);
  using Free = void (*)(void*);
  Alloc a;
  Free f;
  CHeap(Alloc a_, Free f_) : a(a_), f(f_) {}
  void* alloc(std::size_t n) override { return a(n); }
  void release(void* p) override { f(p); }
};

struct JeHeap : Heap {
  using Alloc = void* (*)(std::size_t, int);
  using Free = void (*)(void*, int);
  Alloc a;
  Free f;
  JeHeap(Alloc a_, Free f_) : a(a_), f(f_) {}
  void* alloc(std::size_t n) override { return a(n, 0); }
  void release(void* p) override { f(p, 0); }
};

struct ModelmemHeap : Heap {
  std::shared_ptr<Allocator> a;
  explicit ModelmemHeap(std::shared_ptr<Allocator> a_) : a(std::move(a_)) {}
  void* alloc(std::size_t n) override { return a->allocate(n); }
  void release(void* p) override { a->deallocate(p); }
  double peak_reserved() override {
    return static_cast<double>(a->stats().reserved_bytes.all.peak);
  }
  void reset_peak() override { a->reset_peak(); }
};

void* open_lib(const char* name) {
  void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!h) std::fprintf(stderr, "alloc_bench: skipping %s: %s\n", name, dlerror());
  return h;
}

// Creates a fresh heap; modelmem strategies get a new allocator (empty cache) each time.
using HeapFactory = std::function<std::unique_ptr<Heap>(std::size_t static_budget)>;

struct Subject {
  std::string name;
  HeapFactory make;
  bool is_static = false;
};

std::vector<Subject> subjects() {
  std::vector<Subject> out;
  out.push_back(
      {"glibc", [](std::size_t) { return std::make_unique<CHeap>(&std::malloc, &std::free); }});
  if (void* h = open_lib("libjemalloc.so.2")) {
    auto a = reinterpret_cast<JeHeap::Alloc>(dlsym(h, "mallocx"));
    auto f = reinterpret_cast<JeHeap::Free>(dlsym(h, "dallocx"));
    if (a && f)
      out.push_back({"jemalloc", [a, f](std::size_t) { return std::make_unique<JeHeap>(a, f); }});
  }
  if (void* h = open_lib("libtcmalloc_minimal.so.4")) {
    auto a = reinterpret_cast<CHeap::Alloc>(dlsym(h, "tc_malloc"));
    auto f = reinterpret_cast<CHeap::Free>(dlsym(h, "tc_free"));
    if (a && f)
      out.push_back({"tcmalloc", [a, f](std::size_t) { return std::make_unique<CHeap>(a, f); }});
  }
  if (void* h = open_lib("libmimalloc.so.2")) {
    auto a = reinterpret_cast<CHeap::Alloc>(dlsym(h, "mi_malloc"));
    auto f = reinterpret_cast<CHeap::Free>(dlsym(h, "mi_free"));
    if (a && f)
      out.push_back({"mimalloc", [a, f](std::size_t) { return std::make_unique<CHeap>(a, f); }});
  }
  auto host = modelmem::device::make_host_device();
  out.push_back({"mm_system", [](std::size_t) {
                   return std::make_unique<ModelmemHeap>(
                       std::make_shared<modelmem::alloc::SystemAllocator>());
                 }});
  out.push_back({"mm_static",
                 [host](std::size_t budget) {
                   return std::make_unique<ModelmemHeap>(
                       std::make_shared<modelmem::alloc::StaticAllocator>(
                           host, modelmem::alloc::StaticOptions{budget, 256}));
                 },
                 true});
  out.push_back({"mm_caching", [host](std::size_t) {
                   return std::make_unique<ModelmemHeap>(
                       std::make_shared<modelmem::alloc::CachingAllocator>(host));
                 }});
  out.push_back({"mm_caching_tc", [host](std::size_t) {
                   modelmem::alloc::CachingOptions o;  // thread_cache_mb:8
                   o.thread_cache_bytes = 8 * kMiB;
                   return std::make_unique<ModelmemHeap>(
                       std::make_shared<modelmem::alloc::CachingAllocator>(host, o));
                 }});
  out.push_back({"mm_expandable", [host](std::size_t) {
                   modelmem::alloc::CachingOptions o;
                   o.expandable_segments = true;
                   return std::make_unique<ModelmemHeap>(
                       std::make_shared<modelmem::alloc::CachingAllocator>(host, o));
                 }});
  return out;
}

// The heap a subject's hit and random runs share (threads included), made on first use and
// kept for the process: caches stay warm from one run to the next, as in a long-lived server.
struct Shared {
  const Subject* subject;
  std::once_flag once;
  std::unique_ptr<Heap> heap;
  Heap& get() {
    std::call_once(once, [this] { heap = subject->make(kStaticBudget); });
    return *heap;
  }
  static constexpr std::size_t kStaticBudget = std::size_t{4} << 30;  // virtual; never touched
};

// ---- benchmarks ------------------------------------------------------------------------------

void hit(benchmark::State& state, Shared* shared) {
  const auto size = static_cast<std::size_t>(state.range(0));
  Heap& heap = shared->get();
  heap.release(heap.alloc(size));  // the first request fills the cache
  for (auto _ : state) {
    void* p = heap.alloc(size);
    benchmark::DoNotOptimize(p);
    heap.release(p);
  }
}

std::vector<std::size_t> random_sizes(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log_size(std::log2(256.0), std::log2(64.0 * kMiB));
  std::vector<std::size_t> sizes(4096);
  for (auto& n : sizes) n = static_cast<std::size_t>(std::exp2(log_size(rng)));
  return sizes;
}

void random_pairs(benchmark::State& state, Shared* shared) {
  Heap& heap = shared->get();
  const auto sizes = random_sizes(42 + static_cast<std::uint64_t>(state.thread_index()));
  constexpr std::size_t kLive = 8;
  void* ring[kLive] = {};
  std::size_t i = 0;
  for (auto _ : state) {
    void*& slot = ring[i % kLive];
    if (slot) heap.release(slot);
    slot = heap.alloc(sizes[i % sizes.size()]);
    benchmark::DoNotOptimize(slot);
    ++i;
  }
  for (void* p : ring)
    if (p) heap.release(p);
}

// ---- what a locked hit path costs at least: the floors under a caching pool's pair ----------

void floor_mutex(benchmark::State& state) {
  std::mutex m;
  for (auto _ : state) {
    m.lock();  // allocate
    m.unlock();
    m.lock();  // deallocate
    m.unlock();
    benchmark::ClobberMemory();
  }
}

void floor_set(benchmark::State& state) {
  std::set<std::pair<std::size_t, std::uintptr_t>> free_blocks;
  for (std::size_t i = 0; i < 64; ++i) free_blocks.emplace(65536 * (i % 8 + 1), i * 4096);
  for (auto _ : state) {
    auto it = free_blocks.lower_bound({65536, 0});  // best fit ...
    auto node = free_blocks.extract(it);            // ... taken out ...
    benchmark::DoNotOptimize(node.value());
    free_blocks.insert(std::move(node));  // ... and put back by the free
  }
}

void floor_hash(benchmark::State& state) {
  std::unordered_map<std::uintptr_t, void*> live;
  for (std::uintptr_t i = 0; i < 64; ++i) live.emplace(i * 4096, nullptr);
  std::uintptr_t key = 1 << 30;
  for (auto _ : state) {
    live.emplace(key, nullptr);  // allocate records the block
    live.erase(key);             // deallocate looks it up
  }
}

// ---- recorded traces -------------------------------------------------------------------------

struct Op {
  bool alloc;
  std::size_t size;  // alloc only
  std::size_t slot;
};

struct Trace {
  std::string name;
  std::vector<Op> ops;
  std::size_t slots = 0;
  std::size_t pairs = 0;
  std::size_t peak_live = 0;  // bytes requested and live at once
};

Trace load_trace(const std::string& path, const std::string& name) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  Trace t;
  t.name = name;
  std::unordered_map<std::string, std::size_t> live;  // address -> slot
  std::vector<std::size_t> slot_size;
  std::string line;
  std::getline(in, line);  // header
  std::size_t live_bytes = 0;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) f.push_back(cell);
    if (f.size() < 4) continue;
    if (f[0] == "alloc") {
      std::size_t size = std::stoull(f[3]);
      t.ops.push_back({true, size, t.slots});
      live[f[2]] = t.slots++;
      slot_size.push_back(size);
      live_bytes += size;
      t.peak_live = std::max(t.peak_live, live_bytes);
      ++t.pairs;
    } else if (f[0] == "free") {
      auto it = live.find(f[2]);
      if (it == live.end()) continue;  // allocated before recording began
      t.ops.push_back({false, 0, it->second});
      live_bytes -= slot_size[it->second];
      live.erase(it);
    }
  }
  for (auto& [addr, slot] : live) t.ops.push_back({false, 0, slot});  // still live at the end
  return t;
}

// Replays the trace once; false when the heap ran out of memory.
bool replay(Heap& heap, const Trace& t, std::vector<void*>& slots) {
  slots.assign(t.slots, nullptr);
  bool ok = true;
  for (const Op& op : t.ops) {
    if (op.alloc) {
      try {
        slots[op.slot] = heap.alloc(op.size);
      } catch (const modelmem::OutOfMemory&) {
        ok = false;
      }
    } else if (slots[op.slot]) {
      heap.release(slots[op.slot]);
      slots[op.slot] = nullptr;
    }
  }
  return ok;
}

void trace_replay(benchmark::State& state, const Subject* s, const Trace* t) {
  std::vector<void*> slots;
  std::unique_ptr<Heap> heap;
  double factor = 1.0;
  if (s->is_static) {
    // The static pool must be sized up front: the smallest of these safety factors over the
    // trace's peak live bytes that replays without running out (best fit fragments a little).
    for (double f : {1.05, 1.1, 1.25, 1.5, 2.0, 3.0}) {
      auto budget = static_cast<std::size_t>(static_cast<double>(t->peak_live) * f);
      budget = (budget + kMiB - 1) / kMiB * kMiB;
      heap = s->make(budget);
      factor = f;
      if (replay(*heap, *t, slots)) break;
      heap.reset();
    }
    if (!heap) {
      state.SkipWithError("static pool ran out even at 3x peak live");
      return;
    }
  } else {
    heap = s->make(0);
  }
  heap->reset_peak();
  for (auto _ : state) {
    if (!replay(*heap, *t, slots)) {
      state.SkipWithError("out of memory");
      break;
    }
  }
  state.counters["pairs"] = static_cast<double>(t->pairs);  // ns per pair = CPU time / pairs
  state.counters["peak_live_MiB"] = static_cast<double>(t->peak_live) / kMiB;
  double reserved = heap->peak_reserved();
  if (!std::isnan(reserved)) {
    state.counters["peak_reserved_MiB"] = reserved / kMiB;
    state.counters["reserved_per_live"] = reserved / static_cast<double>(t->peak_live);
  }
  if (s->is_static) state.counters["static_factor"] = factor;
}

}  // namespace

int main(int argc, char** argv) {
  // Debian's jemalloc needs static TLS room to be dlopen'ed; ask the loader for it once.
  const char* tun = std::getenv("GLIBC_TUNABLES");
  if (tun == nullptr || std::strstr(tun, "optional_static_tls") == nullptr) {
    std::string v =
        std::string(tun ? std::string(tun) + ":" : "") + "glibc.rtld.optional_static_tls=65536";
    setenv("GLIBC_TUNABLES", v.c_str(), 1);
    execv("/proc/self/exe", argv);  // on failure, carry on without jemalloc
  }

  static std::vector<Subject> all = subjects();
  static std::vector<std::unique_ptr<Shared>> shared;
  for (const auto& s : all) {
    shared.push_back(std::make_unique<Shared>());
    shared.back()->subject = &s;
  }
  for (std::size_t i = 0; i < all.size(); ++i) {
    Shared* sh = shared[i].get();
    auto* b = benchmark::RegisterBenchmark(("BM_Hit/" + all[i].name).c_str(), hit, sh);
    for (std::int64_t size :
         {256LL, 4096LL, 65536LL, 262144LL, 1LL << 20, 4LL << 20, 16LL << 20, 64LL << 20})
      b->Arg(size);
    b->Threads(1)->Threads(2);
    benchmark::RegisterBenchmark(("BM_Random/" + all[i].name).c_str(), random_pairs, sh)
        ->Threads(1)
        ->Threads(2);
  }
  benchmark::RegisterBenchmark("BM_Floor/mutex_twice", floor_mutex);
  benchmark::RegisterBenchmark("BM_Floor/ordered_set_take_and_put_back", floor_set);
  benchmark::RegisterBenchmark("BM_Floor/hash_map_insert_and_erase", floor_hash);
  static std::vector<Trace> traces;
  for (const char* name :
       {"torch_resnet50", "torch_resnet50_varbatch", "torch_bert", "torch_bert_varlen"}) {
    std::string path = std::string(MODELMEM_SHARED_DATA) + "/traces/" + name + ".events.csv";
    try {
      traces.push_back(load_trace(path, name));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "alloc_bench: skipping trace %s: %s\n", name, e.what());
    }
  }
  for (const auto& t : traces)
    for (const auto& s : all)
      benchmark::RegisterBenchmark(("BM_Trace/" + s.name + "/" + t.name).c_str(), trace_replay, &s,
                                   &t);

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
