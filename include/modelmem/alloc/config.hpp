// The configuration string (`key:value,key:value`, from MODELMEM_ALLOC_CONF or an API call) and
// the factory that builds the allocator stack from it: device, probe, strategy, fallback.
// Keys that PyTorch's PYTORCH_CUDA_ALLOC_CONF also has mean the same thing.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "modelmem/alloc/caching.hpp"
#include "modelmem/allocator.hpp"
#include "modelmem/device.hpp"

namespace modelmem::alloc {

/// Parsed configuration: every key with its effective value (defaults filled in) and which keys
/// were given explicitly. Owned by the strategies layer; other layers add keys here.
struct Config {
  std::map<std::string, std::string> values;  ///< effective value of every known key
  std::vector<std::string> explicit_keys;     ///< keys present in the string, in order
  std::string source;                         ///< the string as given

  /// Typed accessors. Throw InvalidInput naming the key when it is unknown, unset or not of
  /// that type. get_size reads a plain integer; get_size_mb reads MiB and returns bytes.
  std::string get(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  double get_double(const std::string& key) const;
  std::size_t get_size(const std::string& key) const;
  std::size_t get_size_mb(const std::string& key) const;
  bool has(const std::string& key) const;  ///< given explicitly
};

/// One row of the key table (the README's table is made from it).
struct ConfigKey {
  std::string name;
  std::string default_value;  ///< "" = unset
  std::string values;         ///< accepted forms
  std::string meaning;
};
/// Every known key, in the order `modelmem config` prints them.
const std::vector<ConfigKey>& config_keys();

/// PyTorch's roundup_power2_divisions forms, a single power of two ("4") or a list of
/// (interval lower edge in MiB, divisions) with ">" for all larger intervals
/// ("[256:1,512:2,>:8]"), as CachingOptions::roundup_power2_divisions (lower edge in bytes).
std::map<std::size_t, unsigned> parse_roundup_power2_divisions(std::string_view text);

/// The caching pool's options from a Config (expandable_segments as given, before any probe).
CachingOptions caching_options(const Config& config);

/// The size of a static pool and where it came from ("static_pool_mb:512",
/// "model_type:cnn: 512 MiB x 1.2", "plan:p.json: arena 100 MiB + weights 20 MiB x 1.0", ...).
struct StaticSizing {
  std::size_t bytes = 0;
  std::string source;
};
/// From static_pool_mb, plan or model_type, else per_process_memory_fraction of the device's
/// total memory (refused on the host device, whose whole memory is no sensible pool).
StaticSizing static_pool_size(const Config& config, const device::Device& device);

/// Throws InvalidInput naming the key for an unknown key, a malformed value, or a conflicting
/// combination (e.g. expandable_segments:True with max_split_size_mb).
Config parse_config(std::string_view text);

/// The allocator stack built from a Config, with a human-readable account of what was built.
struct Built {
  std::shared_ptr<Allocator> allocator;
  device::DevicePtr device;
  std::vector<std::pair<std::string, std::string>> settings;  ///< effective settings, in order
  std::string probe;  ///< result of the virtual-memory probe, when one ran
  std::optional<std::string> fallback_warning;  ///< the one-time warning, when a fallback was taken
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
/// parse_config(getenv("MODELMEM_ALLOC_CONF") or "") then build.
Built build_from_env();

}  // namespace modelmem::alloc
