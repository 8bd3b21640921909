// Stress test of every strategy, as the trusted allocators are tested: T threads allocate random
// sizes (1 B to 8 MiB, log-uniform), write a checksum into every block, free blocks made by
// other threads (one in eight goes through a shared exchange), and check every block before it
// is freed. A corrupted or misaligned block, a crash or a hang fails the run. Every block is
// checked against the alignment its strategy promises (256 bytes; 64 for strategy:system).
//   alloc_stress [--seconds S] [--threads T] [--idle S] [--trim] [--conf STRING ...] [--libc]
// Without --conf: every strategy (system, caching with and without the thread cache, expandable
// segments, a pool whose quota the load overflows, static, a static pool too small for the load,
// planned with automatic and with marked steps and with the direct fallback). Prints
// one line per strategy; exits 1 on any corruption or misaligned block.
// --libc: the same load through the C functions instead (malloc, calloc, realloc,
// posix_memalign, aligned_alloc, memalign at alignments of 16 to 4096 bytes, each block checked
// at the alignment it asked for), for a run under LD_PRELOAD=libmodelmem_preload.so
// (tests/preload runs it with pools that overflow). --idle S: once everything is freed, wait S
// seconds and print the process's peak RSS and its RSS then (what the allocator gave back;
// bench/stress/rss_compare.sh runs it under glibc, jemalloc, tcmalloc and modelmem side by side).
// --trim: once everything is freed, call malloc_trim(0) and print the RSS right after it.
// The sanitizer build runs it for a few seconds in the test suite (CTest stress.allocators);
// docs/benchmarks.md has longer runs.
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/core/error.hpp"

namespace {

struct Block {
  unsigned char* p = nullptr;
  std::size_t size = 0;
  std::uint64_t id = 0;
};

// Where the blocks come from: a modelmem strategy, or the C functions (--libc).
class Heap {
 public:
  virtual ~Heap() = default;
  /// A block of `size` bytes and the alignment it must have; {nullptr, 0} when refused.
  virtual std::pair<void*, std::size_t> allocate(std::size_t size, std::mt19937_64& rng) = 0;
  /// `b`'s block moved to `size` bytes (the first min(old, new) bytes kept), or nullptr when
  /// refused (b stays valid); the alignment it must have in `align`.
  virtual void* reallocate(const Block& b, std::size_t size, std::size_t& align) = 0;
  virtual void release(void* p) = 0;
  virtual void end_step() {}
  virtual bool resizes() const { return false; }
};

class StrategyHeap final : public Heap {
 public:
  StrategyHeap(modelmem::alloc::Allocator& a, std::size_t align) : a_(a), align_(align) {}
  std::pair<void*, std::size_t> allocate(std::size_t size, std::mt19937_64&) override {
    try {
      return {a_.allocate(size), align_};
    } catch (const modelmem::OutOfMemory&) {
      return {nullptr, 0};
    }
  }
  void* reallocate(const Block&, std::size_t, std::size_t&) override { return nullptr; }
  void release(void* p) override { a_.deallocate(p); }
  void end_step() override {
    a_.end_step();
    a_.begin_step();
  }

 private:
  modelmem::alloc::Allocator& a_;
  std::size_t align_;
};

// Each request through one of the C functions, aligned ones at 16 .. 4096 bytes.
class LibcHeap final : public Heap {
 public:
  std::pair<void*, std::size_t> allocate(std::size_t size, std::mt19937_64& rng) override {
    static constexpr std::size_t kAligns[] = {16, 32, 64, 128, 256, 4096};
    const std::size_t align = kAligns[rng() % std::size(kAligns)];
    void* p = nullptr;
    switch (rng() % 5) {
      case 0:
        return {std::malloc(size), alignof(std::max_align_t)};
      case 1:
        return {std::calloc(1, size), alignof(std::max_align_t)};
      case 2:
        return {posix_memalign(&p, align, size) == 0 ? p : nullptr, align};
      case 3:  // C11: the size a multiple of the alignment
        return {aligned_alloc(align, (size + align - 1) / align * align), align};
      default:
        return {memalign(align, size), align};
    }
  }
  void* reallocate(const Block& b, std::size_t size, std::size_t& align) override {
    align = alignof(std::max_align_t);
    return std::realloc(b.p, size);
  }
  void release(void* p) override { std::free(p); }
  bool resizes() const override { return true; }
};

// The byte at offset `i` of block `id`: every 4 KiB page and both ends carry it.
unsigned char byte_of(std::uint64_t id, std::size_t i) {
  return static_cast<unsigned char>((id * 0x9e3779b97f4a7c15ull + i * 31) >> 56);
}

template <typename F>
void each_checked_offset(std::size_t size, F f) {
  const std::size_t ends = size < 64 ? size : 64;
  for (std::size_t i = 0; i < ends; ++i) f(i);
  for (std::size_t i = 64; i + 64 < size; i += 4096) f(i);
  for (std::size_t i = size > 64 ? size - 64 : ends; i < size; ++i) f(i);
}

struct Totals {
  std::atomic<std::uint64_t> ops{0}, corrupt{0}, misaligned{0}, refused{0};
};

struct Exchange {
  std::mutex mu;
  std::vector<Block> blocks;
};

bool check(const Block& b) {
  bool ok = true;
  each_checked_offset(b.size, [&](std::size_t i) { ok &= b.p[i] == byte_of(b.id, i); });
  return ok;
}

void fill(const Block& b) {
  each_checked_offset(b.size, [&](std::size_t i) { b.p[i] = byte_of(b.id, i); });
}

bool misaligned(const void* p, std::size_t align) {
  return reinterpret_cast<std::uintptr_t>(p) % align != 0;
}

void worker(Heap& a, unsigned seed, std::chrono::steady_clock::time_point end, Totals& t,
            Exchange& ex, std::atomic<std::uint64_t>& ids, bool marks) {
  std::mt19937_64 rng(seed);
  std::vector<Block> live;
  auto release = [&](const Block& b) {
    if (!check(b)) t.corrupt++;
    a.release(b.p);
  };
  std::uint64_t n = 0;
  while (std::chrono::steady_clock::now() < end) {
    if (marks && n % 256 == 0) a.end_step();
    ++n;
    const unsigned op = rng() % 8;
    if (op < 4 || live.empty()) {
      // log-uniform over [1 B, 8 MiB]
      const double e = std::uniform_real_distribution<double>(0, 23)(rng);
      const auto size = static_cast<std::size_t>(std::exp2(e));
      Block b;
      b.size = size == 0 ? 1 : size;
      b.id = ids.fetch_add(1);
      const auto [p, align] = a.allocate(b.size, rng);
      if (p == nullptr) {
        t.refused++;
        continue;
      }
      b.p = static_cast<unsigned char*>(p);
      if (misaligned(b.p, align)) t.misaligned++;
      fill(b);
      live.push_back(b);
      if (live.size() > 64) {
        std::size_t k = rng() % live.size();
        release(live[k]);
        live[k] = live.back();
        live.pop_back();
      }
    } else if (op == 4) {
      // Hand a block to whichever thread comes next.
      std::size_t k = rng() % live.size();
      std::lock_guard lock(ex.mu);
      ex.blocks.push_back(live[k]);
      live[k] = live.back();
      live.pop_back();
    } else if (op == 5) {
      Block b;
      {
        std::lock_guard lock(ex.mu);
        if (ex.blocks.empty()) continue;
        b = ex.blocks.back();
        ex.blocks.pop_back();
      }
      release(b);
    } else if (op == 6 && a.resizes()) {
      // Resized (the C functions only): the kept bytes checked, then the block filled anew.
      Block& b = live[rng() % live.size()];
      const double e = std::uniform_real_distribution<double>(0, 23)(rng);
      const std::size_t size = std::max<std::size_t>(1, static_cast<std::size_t>(std::exp2(e)));
      std::size_t align = 0;
      if (!check(b)) t.corrupt++;
      void* q = a.reallocate(b, size, align);
      if (q == nullptr) continue;
      b.p = static_cast<unsigned char*>(q);
      const std::size_t kept = std::min(size, b.size);
      bool ok = true;
      for (std::size_t i = 0; i < std::min<std::size_t>(kept, 64); ++i)
        ok &= b.p[i] == byte_of(b.id, i);
      if (!ok) t.corrupt++;
      if (misaligned(b.p, align)) t.misaligned++;
      b.size = size;
      b.id = ids.fetch_add(1);
      fill(b);
    } else {
      std::size_t k = rng() % live.size();
      release(live[k]);
      live[k] = live.back();
      live.pop_back();
    }
    t.ops++;
  }
  for (const Block& b : live) release(b);
}

struct RunStats {
  long long peak_reserved_mib = 0;
  long long live_at_end = 0;
};

int run_on(Heap& a, const std::string& name, bool marks, double seconds, unsigned threads,
           const std::function<RunStats()>& stats) {
  Totals t;
  Exchange ex;
  std::atomic<std::uint64_t> ids{1};
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                       std::chrono::duration<double>(seconds));
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < threads; ++i)
    pool.emplace_back(worker, std::ref(a), 1234 + i, end, std::ref(t), std::ref(ex), std::ref(ids),
                      marks && i == 0);
  for (auto& th : pool) th.join();
  for (const Block& b : ex.blocks) {
    if (!check(b)) t.corrupt++;
    a.release(b.p);
  }
  const RunStats s = stats();
  std::printf(
      "%-45s %10llu ops %3llu corrupt %3llu misaligned %6llu refused  peak reserved %lld MiB, "
      "live at the end %lld B\n",
      name.c_str(), static_cast<unsigned long long>(t.ops.load()),
      static_cast<unsigned long long>(t.corrupt.load()),
      static_cast<unsigned long long>(t.misaligned.load()),
      static_cast<unsigned long long>(t.refused.load()), s.peak_reserved_mib, s.live_at_end);
  return t.corrupt == 0 && t.misaligned == 0 && s.live_at_end == 0 ? 0 : 1;
}

// The alignment a strategy promises (alloc/allocator.hpp): 256 bytes, 64 for the C heap.
std::size_t promised_alignment(const std::string& conf) {
  return conf.find("strategy:system") != std::string::npos ? 64 : 256;
}

int run(const std::string& conf, double seconds, unsigned threads) {
  modelmem::config::Built built = modelmem::config::build(modelmem::config::parse_config(conf));
  modelmem::alloc::Allocator& a = *built.allocator;
  StrategyHeap heap(a, promised_alignment(conf));
  return run_on(heap, conf, conf.find("planned_steps:marked") != std::string::npos, seconds,
                threads, [&] {
                  const auto s = a.stats();
                  return RunStats{static_cast<long long>(s.reserved_bytes.all.peak >> 20),
                                  static_cast<long long>(s.allocated_bytes.all.current)};
                });
}

int run_libc(double seconds, unsigned threads) {
  LibcHeap heap;
  const char* conf = std::getenv("MODELMEM_ALLOC_CONF");
  const char* preload = std::getenv("LD_PRELOAD");
  const std::string name = std::string("libc") +
                           (preload != nullptr && *preload != 0 ? " (preloaded)" : "") +
                           (conf != nullptr ? std::string(" ") + conf : std::string());
  // What is live at the end is the C library's business here; the blocks were all freed.
  return run_on(heap, name, false, seconds, threads, [] { return RunStats{}; });
}

// VmHWM (peak) and VmRSS of this process, in KiB.
std::pair<long, long> rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string key;
  long peak = -1, now = -1;
  while (in >> key) {
    if (key == "VmHWM:") in >> peak;
    if (key == "VmRSS:") in >> now;
  }
  return {peak, now};
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  unsigned threads = 8;
  double idle = -1;
  bool trim = false;
  std::vector<std::string> confs;
  bool libc = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--threads" && i + 1 < argc) {
      threads = static_cast<unsigned>(std::atoi(argv[++i]));
    } else if (a == "--idle" && i + 1 < argc) {
      idle = std::atof(argv[++i]);
    } else if (a == "--trim") {
      trim = true;
    } else if (a == "--conf" && i + 1 < argc) {
      confs.push_back(argv[++i]);
    } else if (a == "--libc") {
      libc = true;
    } else {
      std::fprintf(stderr,
                   "usage: alloc_stress [--seconds S] [--threads T] [--idle S] [--trim] [--conf "
                   "STRING ...] [--libc]\n");
      return 2;
    }
  }
  if (confs.empty())
    confs = {"strategy:system",
             "strategy:caching",
             "strategy:caching,thread_cache_mb:4",
             "strategy:caching,expandable_segments:True",
             "strategy:caching,pools:[a:64],default_pool:a",  // a quota that overflows
             "strategy:static,static_pool_mb:1024",
             "strategy:static,static_pool_mb:32",  // overflows: refusals counted, none misaligned
             "strategy:planned",
             "strategy:planned,planned_steps:marked",
             "strategy:planned,planned_fallback:direct"};
  int rc = 0;
  try {
    if (libc)
      rc = run_libc(seconds, threads);
    else
      for (const std::string& c : confs)
        rc |= run(c, seconds / static_cast<double>(confs.size()), threads);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "alloc_stress: %s\n", e.what());
    return 2;
  }
  if (trim) {
    const long freed = rss_kib().second;
    const int gave = malloc_trim(0);
    const auto [peak, now] = rss_kib();
    std::printf(
        "rss-trim: peak %ld MiB, when everything was freed %ld MiB, right after "
        "malloc_trim(0) %ld MiB (returned %d)\n",
        peak >> 10, freed >> 10, now >> 10, gave);
  }
  if (idle >= 0) {
    const long freed = rss_kib().second;
    std::this_thread::sleep_for(std::chrono::duration<double>(idle));
    const auto [peak, now] = rss_kib();
    std::printf("rss: peak %ld MiB, when everything was freed %ld MiB, after %.0f s idle %ld MiB\n",
                peak >> 10, freed >> 10, idle, now >> 10);
  }
  std::printf(rc == 0 ? "alloc_stress: ok\n" : "alloc_stress: FAILED\n");
  return rc;
}
