// Small requests under whatever malloc the process has (run it under LD_PRELOAD): CPU ns per
// allocation+free pair in the patterns a framework makes per operator. bench/e2e/small_pairs.sh
// runs it under glibc, tcmalloc, mimalloc and the modelmem preload library side by side.
//   burst64   64 malloc of 32..144 bytes, then 64 free (fits glibc's per-thread cache)
//   burst1k   1024 malloc of 16..1024 bytes, then 1024 free in another order (does not)
//   align64   64 posix_memalign(64) of 16..1024 bytes, then 64 free (PyTorch's CPU tensors)
#include <stdlib.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

namespace {

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

enum class Kind { plain, aligned };

// ns per pair, best of `reps` runs of `rounds` bursts of the given sizes.
double pattern(const std::vector<std::size_t>& sizes, const std::vector<std::size_t>& free_order,
               Kind kind, int rounds, int reps) {
  std::vector<void*> blocks(sizes.size());
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double start = cpu_seconds();
    for (int i = 0; i < rounds; ++i) {
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        void* p = nullptr;
        if (kind == Kind::aligned) {
          if (posix_memalign(&p, 64, sizes[k]) != 0) p = nullptr;
        } else {
          p = std::malloc(sizes[k]);
        }
        if (p == nullptr) {
          std::fprintf(stderr, "out of memory\n");
          std::exit(1);
        }
        static_cast<volatile char*>(p)[0] = 1;  // touch, as a caller would
        blocks[k] = p;
      }
      for (std::size_t k : free_order) std::free(blocks[k]);
    }
    const double ns = (cpu_seconds() - start) * 1e9 / (static_cast<double>(rounds) * sizes.size());
    best = std::min(best, ns);
  }
  return best;
}

std::vector<std::size_t> sizes_between(std::size_t n, std::size_t lo, std::size_t hi,
                                       unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::size_t> s(n);
  for (auto& v : s) v = lo + rng() % (hi - lo + 1);
  return s;
}

std::vector<std::size_t> order(std::size_t n, bool shuffled, unsigned seed) {
  std::vector<std::size_t> o(n);
  for (std::size_t i = 0; i < n; ++i) o[i] = i;
  if (shuffled) std::shuffle(o.begin(), o.end(), std::mt19937(seed));
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 5;
  const auto b64 = sizes_between(64, 32, 144, 1);
  const auto b1k = sizes_between(1024, 16, 1024, 2);
  const auto a64 = sizes_between(64, 16, 1024, 3);
  // Warm-up: the library's first-call set-up and the heap's first growth are not measured.
  pattern(b1k, order(b1k.size(), true, 4), Kind::plain, 200, 1);
  pattern(a64, order(a64.size(), false, 0), Kind::aligned, 200, 1);
  std::printf("burst64 %.1f\n",
              pattern(b64, order(b64.size(), false, 0), Kind::plain, 20000, reps));
  std::printf("burst1k %.1f\n", pattern(b1k, order(b1k.size(), true, 4), Kind::plain, 1000, reps));
  std::printf("align64 %.1f\n",
              pattern(a64, order(a64.size(), false, 0), Kind::aligned, 20000, reps));
  return 0;
}
