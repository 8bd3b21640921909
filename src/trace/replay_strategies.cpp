// The strategies `modelmem replay` knows: one entry each.
#include "modelmem/alloc/caching_allocator.hpp"
#include "modelmem/alloc/static_allocator.hpp"
#include "modelmem/alloc/system_allocator.hpp"
#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/device/host.hpp"
#include "modelmem/trace/replay.hpp"

#include <algorithm>

namespace modelmem::trace {

namespace {

std::shared_ptr<alloc::Allocator> caching(bool expandable) {
  alloc::CachingOptions options;
  options.expandable_segments = expandable;
  return std::make_shared<alloc::CachingAllocator>(device::make_host_device(), options);
}

// Built from the configuration string exactly as `modelmem run` builds its default, so a
// replay shows what a run would get (the same fallback and settings), except that a step mark
// waits for its plan and nothing goes back by age (config::for_replay): a replay runs its steps
// far faster than the program did, and its figures must not depend on the machine's load.
std::shared_ptr<alloc::Allocator> planned(const StrategyContext& context) {
  return allocator_from_config(context.has_marks ? "strategy:planned,planned_steps:marked"
                                                 : "strategy:planned");
}

}  // namespace

const std::vector<ReplayStrategy>& replay_strategies() {
  static const std::vector<ReplayStrategy> strategies = {
      {"system", "C heap (aligned_alloc/free)",
       [](const StrategyContext&) { return std::make_shared<alloc::SystemAllocator>(); }},
      {"caching", "caching pool, fixed segments (PyTorch defaults)",
       [](const StrategyContext&) { return caching(false); }},
      {"caching+expandable", "caching pool, expandable segments",
       [](const StrategyContext&) { return caching(true); }},
      {"planned",
       "profile-guided planned arena (steps from marks or the period), as modelmem run's default",
       planned},
      {"static", "static best-fit pool of analyze's recommended size (static_pool_mb)",
       [](const StrategyContext& c) {
         alloc::StaticOptions options;
         options.budget = std::max<std::size_t>(c.static_pool_bytes, 4096);
         return std::make_shared<alloc::StaticAllocator>(device::make_host_device(), options);
       }},
  };
  return strategies;
}

std::shared_ptr<alloc::Allocator> allocator_from_config(const std::string& config) {
  return config::build(config::parse_config(config::for_replay(config))).allocator;
}

}  // namespace modelmem::trace
