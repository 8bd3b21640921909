// The strategies `modelmem replay` knows: one entry each.
#include <fmt/format.h>

#include "modelmem/alloc/caching_allocator.hpp"
#include "modelmem/alloc/direct_allocator.hpp"
#include "modelmem/alloc/static_allocator.hpp"
#include "modelmem/alloc/system_allocator.hpp"
#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/device/host.hpp"
#include "modelmem/device/limited.hpp"
#include "modelmem/trace/replay.hpp"
#include "modelmem/trace/snapshot.hpp"

#include <algorithm>

namespace modelmem::trace {

namespace {

// The device a strategy sits on: the snapshot's, simulated, or host memory.
device::DevicePtr device_of(const StrategyContext& context) {
  return context.device ? context.device() : device::make_host_device();
}

std::shared_ptr<alloc::Allocator> caching(const StrategyContext& context, bool expandable) {
  alloc::CachingOptions options;
  options.expandable_segments = expandable;
  return std::make_shared<alloc::CachingAllocator>(device_of(context), options);
}

// Built from the configuration string exactly as `modelmem run` builds its default, so a
// replay shows what a run would get (the same fallback and settings), except that a step mark
// waits for its plan and nothing goes back by age (config::for_replay): a replay runs its steps
// far faster than the program did, and its figures must not depend on the machine's load.
std::shared_ptr<alloc::Allocator> planned(const StrategyContext& context) {
  return allocator_from_config(
      context.has_marks ? "strategy:planned,planned_steps:marked" : "strategy:planned",
      context.device ? context.device() : nullptr);
}

}  // namespace

const std::vector<ReplayStrategy>& replay_strategies() {
  static const std::vector<ReplayStrategy> strategies = {
      {"system",
       "C heap (aligned_alloc/free); for a snapshot, one device allocation per block (as "
       "cudaMalloc/cudaFree)",
       [](const StrategyContext& c) -> std::shared_ptr<alloc::Allocator> {
         if (c.device) return std::make_shared<alloc::DirectAllocator>(c.device());
         return std::make_shared<alloc::SystemAllocator>();
       }},
      {"caching", "caching pool, fixed segments (PyTorch defaults)",
       [](const StrategyContext& c) { return caching(c, false); }},
      {"caching+expandable", "caching pool, expandable segments",
       [](const StrategyContext& c) { return caching(c, true); }},
      {"planned",
       "profile-guided planned arena (steps from marks or the period), as modelmem run's default",
       planned},
      {"static", "static best-fit pool of analyze's recommended size (static_pool_mb)",
       [](const StrategyContext& c) {
         alloc::StaticOptions options;
         options.budget = std::max<std::size_t>(c.static_pool_bytes, 4096);
         return std::make_shared<alloc::StaticAllocator>(device_of(c), options);
       }},
  };
  return strategies;
}

std::shared_ptr<alloc::Allocator> allocator_from_config(const std::string& config,
                                                        device::DevicePtr device) {
  return config::build(config::parse_config(config::for_replay(config)), std::move(device))
      .allocator;
}

std::size_t unstated_capacity(const Trace& trace) {
  constexpr std::size_t kTiB = std::size_t{1} << 40;
  const std::size_t reserved = trace.snapshot ? trace.snapshot->reserved() : 0;
  return reserved > kTiB / 4 ? 4 * reserved : kTiB;
}

device::DevicePtr replay_device(const Trace& trace, std::size_t capacity) {
  if (!trace.snapshot) return nullptr;
  return device::make_simulated_device(capacity > 0 ? capacity : unstated_capacity(trace),
                                       "snapshot:0");
}

std::string replay_device_text(const Trace& trace, std::size_t capacity) {
  if (!trace.snapshot) return {};
  const std::string what =
      capacity > 0
          ? fmt::format("its {} (--device-memory)", format_bytes(capacity))
          : fmt::format(
                "capacity not in the snapshot, so not limited ({}; the snapshot reserved {}); "
                "--device-memory SIZE sets it",
                format_bytes(unstated_capacity(trace)), format_bytes(trace.snapshot->reserved()));
  return fmt::format(
      "replays ran on the snapshot's device, simulated (snapshot:0: addresses only, no memory "
      "of this machine is used or touched): {}",
      what);
}

}  // namespace modelmem::trace
