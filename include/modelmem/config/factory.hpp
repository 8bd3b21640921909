// The factory that builds the allocator stack a Config describes: device, virtual-memory probe,
// strategy, fallback, and per-model pools (a quota per pool, a router in front). It attaches no
// trace recorder and publishes nothing to the monitor: the caller does (the LD_PRELOAD library,
// the pluggable libraries, Python).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "modelmem/alloc/allocator.hpp"
#include "modelmem/alloc/caching_allocator.hpp"
#include "modelmem/alloc/pool_router.hpp"
#include "modelmem/config/config.hpp"
#include "modelmem/device/device.hpp"

namespace modelmem::config {

/// The caching pool's options from a Config (expandable_segments as given, before any probe).
alloc::CachingOptions caching_options(const Config& config);

/// The size of a static pool and where it came from ("static_pool_mb:512",
/// "model_type:cnn: 512 MiB x 1.2", "plan:p.json: arena 100 MiB + weights 20 MiB x 1.0", ...).
struct StaticSizing {
  std::size_t bytes = 0;
  std::string source;
};
/// From static_pool_mb, plan or model_type, else per_process_memory_fraction of the device's
/// total memory (refused on the host device, whose whole memory is no sensible pool).
StaticSizing static_pool_size(const Config& config, const device::Device& device);

/// The allocator stack built from a Config, with a human-readable account of what was built.
struct Built {
  std::shared_ptr<alloc::Allocator> allocator;
  device::DevicePtr device;
  std::vector<std::pair<std::string, std::string>> settings;  ///< effective settings, in order
  std::string probe;  ///< result of the virtual-memory probe, when one ran
  std::optional<std::string> fallback_warning;  ///< the one-time warning, when a fallback was taken
  /// With pools: each pool (its quota and its allocator, also reachable through the
  /// allocator, a PoolRouter), in the order given.
  std::vector<alloc::NamedPool> pools;

  /// The effective value of setting `key` ("" when the stack has none of that name).
  std::string setting(const std::string& key) const;
};

/// Builds the stack. Prints the fallback warning once per process on stderr (each distinct
/// warning once) and records it in the allocator's Stats::warnings. Throws Unsupported when
/// the probe fails and fallback:error is set, InvalidInput for a pool larger than the device (or
/// its per_process_memory_fraction), OutOfMemory when the device has not that much free.
Built build(const Config& config);
/// As build(config), on `base` instead of host memory (the CUDA library passes the GPU):
/// device:limited then wraps `base`; huge_pages and prefault, host-only, are refused.
/// nullptr = host memory.
Built build(const Config& config, device::DevicePtr base);
/// While one lives, build() on this thread records the fallback warning but does not print it:
/// for a check made before the real stack is built elsewhere (`modelmem run` checks the string
/// the preloaded child will build and print), so the user sees the warning once.
class QuietWarnings {
 public:
  QuietWarnings() noexcept;
  ~QuietWarnings();
  QuietWarnings(const QuietWarnings&) = delete;
  QuietWarnings& operator=(const QuietWarnings&) = delete;

 private:
  bool previous_;
};

/// parse_config(getenv("MODELMEM_ALLOC_CONF") or "") then build.
Built build_from_env();

/// What `modelmem config` prints (and Python's modelmem.config_report returns) for a
/// configuration string: every key's effective value (* = given), the stack built from it, the
/// probe's result, the fallback taken and the allocator. The stack is built first, so a string
/// the parser or the factory rejects throws before any text exists. `from` says where the string
/// came from ("the argument", "MODELMEM_ALLOC_CONF").
std::string config_report(const std::string& text, const std::string& from);
/// `modelmem config --keys`: every key as a Markdown table (key, default, values, meaning).
std::string keys_markdown();

/// `text` (a valid configuration) with what makes a replay of a trace independent of the
/// machine's speed and load, for each key that applies and that `text` does not give:
/// planned_defer:False (a step mark waits for its plan) and cache_decay_ms:0 (nothing cached goes
/// back by age). `modelmem replay` and the sizing layer's replays use it.
std::string for_replay(std::string_view text);

}  // namespace modelmem::config
