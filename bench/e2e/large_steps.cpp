// Large requests under whatever malloc the process has (run it under LD_PRELOAD): replays the
// blocks of one recorded inference step (a NAME.step.csv of the shared traces: id,lower,upper,
// size; lower and upper are the times of the allocation and of the free) over and over, through
// posix_memalign(64) and free as PyTorch's CPU allocator calls them, and prints the CPU ns per
// allocation+free pair. bench/e2e/large_steps.sh runs it under each allocator side by side.
//   bench_large_steps STEP.csv [reps]
#include <stdlib.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

struct Event {
  long time;
  bool alloc;
  std::size_t block;
};

struct Step {
  std::vector<std::size_t> sizes;
  std::vector<Event> events;
};

Step read_step(const char* path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path);
    std::exit(2);
  }
  Step s;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::istringstream row(line);
    std::string id, lower, upper, size;
    if (!std::getline(row, id, ',') || !std::getline(row, lower, ',') ||
        !std::getline(row, upper, ',') || !std::getline(row, size, ',')) {
      std::fprintf(stderr, "%s: malformed row '%s'\n", path, line.c_str());
      std::exit(2);
    }
    const std::size_t b = s.sizes.size();
    s.sizes.push_back(std::stoull(size));
    s.events.push_back({std::stol(lower), true, b});
    s.events.push_back({std::stol(upper), false, b});
  }
  // At equal times frees first, so a block freed and one taken at the same instant do not
  // overlap.
  std::stable_sort(s.events.begin(), s.events.end(), [](const Event& a, const Event& b) {
    return a.time != b.time ? a.time < b.time : (!a.alloc && b.alloc);
  });
  return s;
}

void run_steps(const Step& s, int steps, std::vector<void*>& blocks) {
  for (int i = 0; i < steps; ++i) {
    for (const Event& e : s.events) {
      if (e.alloc) {
        void* p = nullptr;
        if (posix_memalign(&p, 64, s.sizes[e.block]) != 0) {
          std::fprintf(stderr, "out of memory\n");
          std::exit(1);
        }
        static_cast<volatile char*>(p)[0] = 1;  // touch, as a caller would
        blocks[e.block] = p;
      } else {
        std::free(blocks[e.block]);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_large_steps STEP.csv [reps]\n");
    return 2;
  }
  const Step s = read_step(argv[1]);
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<void*> blocks(s.sizes.size());
  // Warm-up: enough steps for an allocator that learns the pattern (the planned arena detects
  // the period, then plans a step) and for the heap's first growth.
  run_steps(s, 50, blocks);
  double best = 1e30;
  const int steps = 200;
  for (int r = 0; r < reps; ++r) {
    const double start = cpu_seconds();
    run_steps(s, steps, blocks);
    best = std::min(best, (cpu_seconds() - start) * 1e9 /
                              (static_cast<double>(steps) * static_cast<double>(s.sizes.size())));
  }
  std::printf("%.1f\n", best);
  return 0;
}
