// Runs a TorchScript ResNet-50 with modelmem's planned arena as PyTorch's CPU allocator, one
// step mark pair per inference, and prints latency and what the arena did.
//   resnet50_example MODEL.pt [INFERENCES] [CONFIG]
#include <ATen/Parallel.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "modelmem/alloc/planned_allocator.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem_torch.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.pt [INFERENCES] [CONFIG]\n", argv[0]);
    return 2;
  }
  const int n = argc > 2 ? std::max(1, std::atoi(argv[2])) : 20;
  const std::string config =
      argc > 3 ? argv[3] : "strategy:planned,planned_steps:marked,planned_min_kb:64";
  try {
    auto allocator = modelmem::torch::install(config);
    at::set_num_threads(2);
    torch::jit::Module module = torch::jit::load(argv[1]);
    module.eval();
    torch::Tensor input = torch::randn({1, 3, 224, 224});
    std::vector<double> ms;
    c10::InferenceMode guard;
    for (int i = 0; i < n; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      {
        modelmem::torch::Step step;
        auto out = module.forward({input}).toTensor();
        if (out.size(1) != 1000) throw modelmem::Error("unexpected output shape");
      }
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::vector<double> steady(ms.begin() + std::min<int>(3, n - 1), ms.end());
    std::sort(steady.begin(), steady.end());
    std::printf("strategy      %s\n", allocator->describe().c_str());
    std::printf("inferences    %d (first %.1f ms; steady p50 %.1f ms, max %.1f ms)\n", n, ms[0],
                steady[steady.size() / 2], steady.back());
    if (const auto planned = allocator->stats().planned) {
      const auto& s = *planned;
      std::printf("steps         %llu, plans made %llu\n", static_cast<unsigned long long>(s.steps),
                  static_cast<unsigned long long>(s.plans_made));
      std::printf("hits/misses   %llu / %llu (%llu outside plans by design)\n",
                  static_cast<unsigned long long>(s.hits),
                  static_cast<unsigned long long>(s.misses),
                  static_cast<unsigned long long>(s.unplanned));
      std::printf("arena         %s\n", modelmem::format_bytes(s.arena_size).c_str());
    }
    return 0;
  } catch (const modelmem::InvalidInput& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
