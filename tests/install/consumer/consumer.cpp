// Uses one function of each installed layer: plan a problem, allocate from a caching pool built
// from a config string, load an ONNX model (its dim `n` bound to 1). Prints one line a layer; exit
// 0 when all agree.
#include <cstdio>
#include <cstdlib>

#include "modelmem/modelmem.hpp"

int main(int argc, char** argv) {
  using namespace modelmem;
  plan::Problem problem;
  problem.buffers = {{.id = "a", .size = 64, .start = 0, .end = 2},
                     {.id = "b", .size = 32, .start = 1, .end = 3},
                     {.id = "c", .size = 64, .start = 2, .end = 4}};
  auto solved = plan::solve(problem, "best", {});
  std::printf("plan: arena %zu bytes for 3 buffers (lower bound %zu)\n", solved.plan->arena_size,
              plan::lower_bound(problem));

  auto built = config::build(config::parse_config("strategy:caching"));
  void* p = built.allocator->allocate(1000);
  auto stats = built.allocator->stats();
  std::printf("alloc: %lld bytes allocated from %s\n",
              static_cast<long long>(stats.allocated_bytes.all.current),
              built.device->name().c_str());
  built.allocator->deallocate(p);

  if (argc > 1) {
    model::LoadOptions options;
    options.dims["n"] = 1;
    auto graph = model::load_onnx(argv[1], options);
    std::printf("model: %zu nodes\n", graph.nodes.size());
  }
  return solved.plan && solved.plan->arena_size == plan::lower_bound(problem) ? EXIT_SUCCESS
                                                                              : EXIT_FAILURE;
}
