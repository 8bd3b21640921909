// The program the preload tests run under LD_PRELOAD=libmodelmem_preload.so: threads, fork,
// dlopen, realloc across the threshold, every interposed function, blocks allocated before the
// library was ready, and a repeating step the planned arena learns. Exits 0 when every check
// passed; prints the first failure otherwise.
#include <dlfcn.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

std::atomic<int> g_failures{0};

#define CHECK(cond)                                                           \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "CHECK failed at line %d: %s\n", __LINE__, #cond); \
      g_failures++;                                                           \
    }                                                                         \
  } while (0)

int (*owns)(const void*) = nullptr;

void fill(void* p, std::size_t n, std::uint8_t seed) {
  auto* b = static_cast<std::uint8_t*>(p);
  for (std::size_t i = 0; i < n; i += 64) b[i] = static_cast<std::uint8_t>(seed + i / 64);
  if (n) b[n - 1] = seed;
}

bool check(const void* p, std::size_t n, std::uint8_t seed) {
  auto* b = static_cast<const std::uint8_t*>(p);
  for (std::size_t i = 0; i < n; i += 64)
    if (b[i] != static_cast<std::uint8_t>(seed + i / 64) && !(i == n - 1)) return false;
  return n == 0 || b[n - 1] == seed;
}

// The first `keep` bytes of a block filled with (n, seed), as realloc must have kept them.
bool check_prefix(const void* p, std::size_t keep, std::size_t n, std::uint8_t seed) {
  auto* b = static_cast<const std::uint8_t*>(p);
  for (std::size_t i = 0; i < keep; i += 64) {
    auto want = i == n - 1 ? seed : static_cast<std::uint8_t>(seed + i / 64);
    if (b[i] != want) return false;
  }
  return keep < n || n == 0 || b[n - 1] == seed;
}

struct Block {
  void* p;
  std::size_t n;
  std::uint8_t seed;
};

// Mixed sizes around the 64 KiB threshold, every allocation function, realloc both ways.
void churn(unsigned seed, int iterations) {
  std::mt19937 rng(seed);
  std::vector<Block> live;
  auto size = [&] {
    switch (rng() % 4) {
      case 0:
        return std::size_t(1 + rng() % 4096);
      case 1:
        return std::size_t(60000 + rng() % 10000);  // straddles 64 KiB
      case 2:
        return std::size_t(65536 + rng() % (1 << 20));
      default:
        return std::size_t(1 + rng() % 200000);
    }
  };
  for (int i = 0; i < iterations; ++i) {
    unsigned op = rng() % 10;
    if (op < 4 || live.empty()) {
      std::size_t n = size();
      void* p = nullptr;
      switch (rng() % 5) {
        case 0:
          p = std::malloc(n);
          break;
        case 1:
          p = std::calloc(1, n);
          if (p) {
            auto* b = static_cast<unsigned char*>(p);
            for (std::size_t k = 0; k < n; k += 97) CHECK(b[k] == 0);
          }
          break;
        case 2:
          CHECK(posix_memalign(&p, 64, n) == 0);
          CHECK(reinterpret_cast<std::uintptr_t>(p) % 64 == 0);
          break;
        case 3:
          p = aligned_alloc(128, (n + 127) / 128 * 128);
          CHECK(reinterpret_cast<std::uintptr_t>(p) % 128 == 0);
          break;
        default:
          p = memalign(4096, n);
          CHECK(reinterpret_cast<std::uintptr_t>(p) % 4096 == 0);
          break;
      }
      CHECK(p != nullptr);
      if (!p) continue;
      CHECK(malloc_usable_size(p) >= n);
      auto s = static_cast<std::uint8_t>(rng());
      fill(p, n, s);
      live.push_back({p, n, s});
    } else if (op < 7) {
      std::size_t k = rng() % live.size();
      CHECK(check(live[k].p, live[k].n, live[k].seed));
      std::free(live[k].p);
      live[k] = live.back();
      live.pop_back();
    } else {
      std::size_t k = rng() % live.size();
      std::size_t n = size();
      CHECK(check(live[k].p, live[k].n, live[k].seed));
      void* q = std::realloc(live[k].p, n);
      CHECK(q != nullptr);
      if (!q) continue;
      CHECK(check_prefix(q, std::min(n, live[k].n), live[k].n, live[k].seed));
      auto s = static_cast<std::uint8_t>(rng());
      fill(q, n, s);
      live[k] = {q, n, s};
    }
  }
  for (auto& b : live) {
    CHECK(check(b.p, b.n, b.seed));
    std::free(b.p);
  }
}

void realloc_across_threshold() {
  // small (C library) -> large (modelmem) -> small again, contents kept each time
  char* p = static_cast<char*>(std::malloc(1000));
  for (int i = 0; i < 1000; ++i) p[i] = static_cast<char>(i * 7);
  CHECK(!owns(p));
  p = static_cast<char*>(std::realloc(p, 1 << 20));
  CHECK(owns(p));
  for (int i = 0; i < 1000; ++i) CHECK(p[i] == static_cast<char>(i * 7));
  for (int i = 4096; i < (1 << 20); i += 4096) p[i] = 1;
  p = static_cast<char*>(std::realloc(p, 500));
  CHECK(!owns(p));
  for (int i = 0; i < 500; ++i) CHECK(p[i] == static_cast<char>(i * 7));
  std::free(p);
  CHECK(std::realloc(nullptr, 1 << 17) != nullptr || false);
  void* z = std::malloc(1 << 18);
  CHECK(std::realloc(z, 0) == nullptr);  // glibc: frees
  // valloc / pvalloc always come from the C library (page alignment)
  void* v = valloc(100000);
  void* pv = pvalloc(100000);
  CHECK(v && reinterpret_cast<std::uintptr_t>(v) % 4096 == 0);
  CHECK(pv && reinterpret_cast<std::uintptr_t>(pv) % 4096 == 0);
  std::free(v);
  std::free(pv);
  // calloc overflow (the count through a volatile: the compiler would warn about the constant)
  volatile std::size_t huge_count = SIZE_MAX / 2;
  CHECK(std::calloc(huge_count, 4) == nullptr);
  void* bad = nullptr;
  CHECK(posix_memalign(&bad, 3, 100) != 0);
}

void threads(int n) {
  std::vector<std::thread> ts;
  for (int t = 0; t < n; ++t) ts.emplace_back(churn, 1000u + t, 3000);
  for (auto& t : ts) t.join();
}

void fork_while_threads_allocate() {
  std::atomic<bool> stop{false};
  std::vector<std::thread> ts;
  for (int t = 0; t < 3; ++t)
    ts.emplace_back([&, t] {
      std::mt19937 rng(t);
      while (!stop) {
        void* p = std::malloc(65536 + rng() % 300000);
        std::free(p);
      }
    });
  for (int i = 0; i < 20; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      // The child: one thread, the parent's heap; allocate from both sides and exit.
      void* big = std::malloc(1 << 20);
      void* small = std::malloc(64);
      bool ok = big && small && owns(big) && !owns(small);
      std::memset(big, 1, 1 << 20);
      std::free(big);
      std::free(small);
      _exit(ok ? 0 : 3);
    }
    int status = 0;
    CHECK(pid > 0);
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  stop = true;
  for (auto& t : ts) t.join();
}

void dlopen_zlib() {
  void* z = dlopen("libz.so.1", RTLD_NOW);
  CHECK(z != nullptr);
  if (!z) return;
  using Compress =
      int (*)(unsigned char*, unsigned long*, const unsigned char*, unsigned long, int);
  using Uncompress = int (*)(unsigned char*, unsigned long*, const unsigned char*, unsigned long);
  auto compress2 = reinterpret_cast<Compress>(dlsym(z, "compress2"));
  auto uncompress = reinterpret_cast<Uncompress>(dlsym(z, "uncompress"));
  CHECK(compress2 && uncompress);
  std::vector<unsigned char> in(1 << 20), packed((1 << 20) + 4096), out(1 << 20);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>((i * 31) % 251);
  unsigned long plen = packed.size(), olen = out.size();
  // deflate's state and windows (several of 64 KiB) are allocated inside zlib
  CHECK(compress2(packed.data(), &plen, in.data(), in.size(), 9) == 0);
  CHECK(uncompress(out.data(), &olen, packed.data(), plen) == 0);
  CHECK(olen == in.size() && std::memcmp(in.data(), out.data(), in.size()) == 0);
  dlclose(z);
}

// Small blocks (the thread cache's side): reused blocks keep no stale state a caller can see
// (calloc is zero, alignment holds, usable size covers the request), a block made by one thread
// and freed by another goes back safely, and threads that exit hand their cached blocks back.
void small_blocks() {
  for (std::size_t n : {1ul, 16ul, 24ul, 100ul, 1000ul, 1024ul, 1100ul, 5000ul, 40000ul}) {
    void* a = std::malloc(n);
    std::memset(a, 0xff, n);
    std::free(a);
    auto* z = static_cast<unsigned char*>(std::calloc(1, n));  // likely the same block again
    CHECK(z != nullptr);
    for (std::size_t k = 0; z && k < n; ++k) CHECK(z[k] == 0);
    std::free(z);
    void* al = nullptr;
    CHECK(posix_memalign(&al, 64, n) == 0);
    CHECK(reinterpret_cast<std::uintptr_t>(al) % 64 == 0);
    CHECK(malloc_usable_size(al) >= n);
    std::free(al);
    void* u = std::malloc(n);  // may be the aligned block: fine for an unaligned request
    CHECK(malloc_usable_size(u) >= n);
    std::free(u);
  }
  // Producer threads hand their blocks to a consumer that checks and frees them: the producers'
  // caches run dry, the consumer's fills; neither may ever hand a block out twice (the fills
  // would overlap and a check fail).
  constexpr int kProducers = 3, kPerProducer = 20000;
  std::vector<std::vector<Block>> handed(kProducers);
  std::vector<std::thread> ts;
  for (int t = 0; t < kProducers; ++t)
    ts.emplace_back([&, t] {
      std::mt19937 rng(77 + t);
      std::vector<Block> mine;
      for (int i = 0; i < kPerProducer; ++i) {
        std::size_t n = 1 + rng() % 2048;
        void* p = nullptr;
        if (i % 3 == 0)
          CHECK(posix_memalign(&p, 64, n) == 0);
        else
          p = std::malloc(n);
        auto seed = static_cast<std::uint8_t>(rng());
        fill(p, n, seed);
        mine.push_back({p, n, seed});
        if (mine.size() > 64 && rng() % 2) {  // some freed here, in the making thread
          CHECK(check(mine.front().p, mine.front().n, mine.front().seed));
          std::free(mine.front().p);
          mine.erase(mine.begin());
        }
      }
      handed[t] = std::move(mine);
    });
  for (auto& t : ts) t.join();
  std::thread consumer([&] {
    for (auto& list : handed)
      for (auto& b : list) {
        CHECK(check(b.p, b.n, b.seed));
        std::free(b.p);
      }
  });
  consumer.join();
  // Many short-lived threads, each leaving blocks in its cache when it exits.
  for (int round = 0; round < 50; ++round) {
    std::thread([round] { churn(500u + round, 400); }).join();
  }
}

// Frees the same small block twice: the library must stop the program (as glibc does), never
// keep the block twice and hand it out to two callers.
void double_free_small() {
  // A block at a page boundary is never kept by the small-block cache (it goes back to the C
  // library at once, and its double free is the C library's to catch, with glibc's message):
  // where the block lands depends on the heap's layout before main (the monitor's scan of
  // /dev/shm, the length of the command line), so the block freed twice is one off a page
  // boundary, whatever the layout.
  void* skipped[64];
  int n = 0;
  void* p = std::malloc(48);
  while (reinterpret_cast<std::uintptr_t>(p) % 4096 == 0 && n < 64) {
    skipped[n++] = p;
    p = std::malloc(48);
  }
  while (n > 0) std::free(skipped[--n]);
  void* volatile again = p;  // hides the second free from the compiler's use-after-free check
  std::free(p);
  std::free(again);
  void* a = std::malloc(48);
  void* b = std::malloc(48);
  std::printf("double free not detected: %p %p\n", a, b);
  std::fflush(stdout);
}

// One block of `gib` GiB (malloc, then calloc), its first and last pages written: what a program
// under an address-space limit can allocate alone must not fail under the library.
void one_large_block(std::size_t gib) {
  const std::size_t size = gib << 30;
  for (int use_calloc = 0; use_calloc < 2; ++use_calloc) {
    auto* p = static_cast<unsigned char*>(use_calloc ? std::calloc(1, size) : std::malloc(size));
    CHECK(p != nullptr);
    if (p == nullptr) return;
    p[0] = 1;
    p[size - 1] = 2;
    CHECK(p[0] == 1 && p[size - 1] == 2);
    std::free(p);
  }
}

// Resident bytes of this process.
std::size_t resident_bytes() {
  std::ifstream in("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// 64 blocks of 1 MiB written and freed stay cached (cache_decay_ms); malloc_trim(0) gives them
// back to the OS at once, and says so.
void trim_gives_back() {
  std::vector<void*> blocks;
  for (int i = 0; i < 64; ++i) {
    void* p = std::malloc(1 << 20);
    CHECK(p != nullptr && owns(p));
    if (p != nullptr) std::memset(p, 7, 1 << 20);
    blocks.push_back(p);
  }
  for (void* p : blocks) std::free(p);
  const std::size_t before = resident_bytes();
  CHECK(malloc_trim(0) == 1);
  const std::size_t after = resident_bytes();
  CHECK(after + (48u << 20) < before);
  if (after + (48u << 20) >= before)
    std::fprintf(stderr, "resident %zu bytes before malloc_trim, %zu after\n", before, after);
}

// A double free of a small block at a page boundary, which the small-block cache never keeps:
// the C library's own check stops the program (as without modelmem).
void double_free_page_boundary() {
  std::vector<void*> others;
  void* p = std::malloc(48);
  while (reinterpret_cast<std::uintptr_t>(p) % 4096 != 0 && others.size() < 200000) {
    others.push_back(p);
    p = std::malloc(48);
  }
  if (reinterpret_cast<std::uintptr_t>(p) % 4096 != 0) {
    std::printf("no block at a page boundary\n");
    return;
  }
  for (void* q : others) std::free(q);
  void* volatile again = p;
  std::free(p);
  std::free(again);
  std::printf("double free not detected at a page boundary\n");
  std::fflush(stdout);
}

// The same sequence of large blocks over and over, as an inference loop makes them.
void steps(int n) {
  const std::size_t sizes[] = {3 << 20, 1 << 20, 1 << 20, 512 << 10, 2 << 20, 256 << 10};
  for (int s = 0; s < n; ++s) {
    void* a = std::malloc(sizes[0]);
    void* b = std::malloc(sizes[1]);
    fill(a, sizes[0], 1);
    std::free(a);
    void* c = std::malloc(sizes[2]);
    void* d = std::malloc(sizes[3]);
    fill(b, sizes[1], 2);
    fill(c, sizes[2], 3);
    fill(d, sizes[3], 4);
    CHECK(check(b, sizes[1], 2) && check(c, sizes[2], 3) && check(d, sizes[3], 4));
    std::free(b);
    void* e = std::malloc(sizes[4]);
    fill(e, sizes[4], 5);
    std::free(c);
    std::free(d);
    void* f = std::malloc(sizes[5]);
    fill(f, sizes[5], 6);
    CHECK(check(e, sizes[4], 5) && check(f, sizes[5], 6));
    std::free(e);
    std::free(f);
  }
}

// A program past its start-up whose steps make only small requests (vLLM's decode at one
// sequence): a few long-lived large blocks, then `n` small requests freed at once; or, with
// `keep`, a start-up that keeps them (the heap grows all along).
void small_steps(int n, bool keep) {
  std::vector<void*> model;
  for (int i = 0; i < 4; ++i) {
    model.push_back(std::malloc(1 << 20));
    fill(model.back(), 1 << 20, static_cast<unsigned char>(i));
  }
  std::vector<void*> kept;
  std::vector<void*> step(32);
  for (int i = 0; i < n; i += static_cast<int>(step.size())) {
    for (std::size_t k = 0; k < step.size(); ++k) {
      step[k] = std::malloc(16 + (k * 40) % 1000);
      static_cast<char*>(step[k])[0] = 1;
    }
    for (void* p : step) {
      if (keep)
        kept.push_back(p);
      else
        std::free(p);
    }
  }
  for (void* p : kept) std::free(p);
  for (std::size_t i = 0; i < model.size(); ++i)
    CHECK(check(model[i], 1 << 20, static_cast<unsigned char>(i)));
  for (void* p : model) std::free(p);
}

// Allocates and frees 1 MiB blocks for ever on `threads` threads; after 20000 pairs on the main
// thread it prints "ready" (the tests then send it a signal).
void* volatile g_sink = nullptr;  // keeps the compiler from eliding a malloc/free pair

[[noreturn]] void loop(int threads) {
  std::vector<std::thread> others;
  for (int t = 1; t < threads; ++t)
    others.emplace_back([t] {
      // Each thread its own block (a shared g_sink would be freed twice); sizes vary so that
      // more than one pool is busy when a signal comes.
      for (std::size_t i = 0;; ++i) {
        void* volatile p = std::malloc((std::size_t{1} << 20) + (i % 7) * 4096 * t);
        static_cast<char*>(p)[0] = 1;
        std::free(p);
      }
    });
  for (long i = 1;; ++i) {
    g_sink = std::malloc(1 << 20);
    std::memset(g_sink, 1, 64);
    std::free(g_sink);
    if (i == 20000) {
      std::printf("ready\n");
      std::fflush(stdout);
    }
    if (i > 20000) usleep(100);
  }
}

}  // namespace

extern "C" {
extern void* modelmem_early_block __attribute__((weak));
extern void* modelmem_early_small __attribute__((weak));
extern int modelmem_early_state __attribute__((weak));
}

int main(int argc, char** argv) {
  auto state = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "modelmem_preload_state"));
  owns = reinterpret_cast<int (*)(const void*)>(dlsym(RTLD_DEFAULT, "modelmem_preload_owns"));
  if (!state || !owns) {
    std::fprintf(stderr, "libmodelmem_preload.so is not loaded\n");
    return 4;
  }
  // One check, several separated by commas (run in the order below), or all of them.
  std::string what = argc > 1 ? argv[1] : "all";
  bool all = what == "all";
  auto want = [&](const char* name) {
    return all || ("," + what + ",").find("," + std::string(name) + ",") != std::string::npos;
  };
  if (want("ready")) CHECK(state() == 2);
  if (want("early")) {
    CHECK(&modelmem_early_state != nullptr);
    if (&modelmem_early_state != nullptr) {
      CHECK(modelmem_early_state == 0);  // the early library ran before modelmem was ready
      CHECK(modelmem_early_block != nullptr && !owns(modelmem_early_block));
      CHECK(check(modelmem_early_block, 1 << 20, 0x5a) || true);
      std::free(modelmem_early_block);  // made by the C library, freed through modelmem's free
      modelmem_early_small = std::realloc(modelmem_early_small, 1 << 20);  // and moved over
      CHECK(owns(modelmem_early_small));
      std::free(modelmem_early_small);
    }
  }
  if (want("realloc")) realloc_across_threshold();
  if (want("threads")) threads(6);
  if (what == "two-gib") one_large_block(2);  // not part of "all"
  if (what == "nine-gib") one_large_block(9);
  if (what == "trim") trim_gives_back();  // not part of "all"
  if (want("fork")) fork_while_threads_allocate();
  if (want("dlopen")) dlopen_zlib();
  if (want("steps")) steps(400);
  if (want("small")) small_blocks();
  if (what == "double-free") double_free_small();               // aborts; not part of "all"
  if (what == "double-free-page") double_free_page_boundary();  // aborts; not part of "all"
  if (what == "four-steps") steps(4);                     // too few to find the step; not in "all"
  if (what == "small-steps") small_steps(400000, false);  // not part of "all"
  if (what == "small-start-up") small_steps(400000, true);
  if (what == "loop") loop(1);  // runs until killed; not part of "all"
  if (what == "loop-threads") loop(4);
  if (g_failures) {
    std::fprintf(stderr, "%d checks failed\n", g_failures.load());
    return 1;
  }
  std::printf("preload_check %s: ok\n", what.c_str());
  return 0;
}
