// Test of the libtorch integration (run by ctest as libtorch_allocator): tensors made before
// install() are freed by their own allocator, tensors made after come from modelmem, and a
// repeated computation with step marks is served from the planned arena with the same results;
// the allocator is published to the monitor, and the C step marks are reachable through dlsym.
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <torch/torch.h>

#include <cstdio>

#include "modelmem/alloc/planned_allocator.hpp"
#include "modelmem/monitor/publisher.hpp"
#include "modelmem_torch.hpp"

int main() {
  at::set_num_threads(1);
  torch::manual_seed(0);
  torch::Tensor before = torch::randn({256, 256});  // PyTorch's own allocator
  torch::Tensor w = torch::randn({256, 256});
  auto expected = torch::relu(before.matmul(w)).sum().item<double>();

  auto allocator = modelmem::torch::install(
      "strategy:planned,planned_steps:marked,planned_min_kb:64,planned_solver:best-fit");
  auto planned_stats = [&] { return allocator->stats().planned; };
  const bool planned = planned_stats().has_value();
  int failures = 0;
  torch::Tensor x = torch::randn({256, 256});  // outside any step: the fallback pool
  for (int step = 0; step < 6; ++step) {
    modelmem::torch::Step mark;
    torch::NoGradGuard no_grad;
    auto y = torch::relu(before.matmul(w));  // 256 KiB results: planned requests
    auto z = (y * 2).sum();
    double got = z.item<double>() / 2;
    if (std::abs(got - expected) > 1e-6 * std::abs(expected)) {
      std::fprintf(stderr, "step %d: %.9g != %.9g\n", step, got, expected);
      failures++;
    }
  }
  before = torch::Tensor();  // freed by PyTorch's allocator, not modelmem's
  x = torch::Tensor();
  auto s = planned_stats().value_or(modelmem::alloc::PlannedStats{});
  std::printf("steps %llu, hits %llu, misses %llu, arena %zu bytes\n",
              static_cast<unsigned long long>(s.steps), static_cast<unsigned long long>(s.hits),
              static_cast<unsigned long long>(s.misses), s.arena_size);
  if (!planned || s.hits == 0 || s.misses != 0) failures++;
  if (modelmem::monitor::options().enabled && modelmem::monitor::current_segment().empty()) {
    std::fprintf(stderr, "the installed allocator is not published to the monitor\n");
    failures++;
  }
  // What ctypes.CDLL(None).modelmem_step_begin() finds.
  auto begin = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "modelmem_step_begin"));
  auto end = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "modelmem_step_end"));
  if (begin == nullptr || end == nullptr || begin() != 0 || end() != 0) {
    std::fprintf(stderr, "modelmem_step_begin/end not exported or failing\n");
    failures++;
  } else if (!planned || planned_stats()->steps != s.steps + 1) {
    std::fprintf(stderr, "the C step marks did not reach the allocator\n");
    failures++;
  }
  return failures == 0 ? 0 : 1;
}
