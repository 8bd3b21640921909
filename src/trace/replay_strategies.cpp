// The strategies `modelmem replay` knows: one entry each.
#include "modelmem/alloc/caching.hpp"
#include "modelmem/alloc/planned.hpp"
#include "modelmem/device/host.hpp"
#include "modelmem/trace/replay.hpp"

namespace modelmem::trace {

namespace {

std::shared_ptr<alloc::Allocator> caching(bool expandable) {
  alloc::CachingOptions options;
  options.expandable_segments = expandable;
  return std::make_shared<alloc::CachingAllocator>(device::make_host_device(), options);
}

std::shared_ptr<alloc::Allocator> planned(const StrategyContext& context) {
  alloc::PlannedOptions options;
  options.fallback = caching(false);
  options.device = device::make_host_device();
  options.auto_steps = !context.has_marks;
  return std::make_shared<alloc::PlannedAllocator>(options);
}

}  // namespace

const std::vector<ReplayStrategy>& replay_strategies() {
  static const std::vector<ReplayStrategy> strategies = {
      {"caching", "caching pool, fixed segments (PyTorch defaults)",
       [](const StrategyContext&) { return caching(false); }},
      {"caching+expandable", "caching pool, expandable segments",
       [](const StrategyContext&) { return caching(true); }},
      {"planned", "profile-guided planned arena (steps from marks or the period), caching fallback",
       planned},
  };
  return strategies;
}

}  // namespace modelmem::trace
