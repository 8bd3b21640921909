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

  /// Typed accessors, e.g. get_size_mb("static_pool_mb"). Throw InvalidInput naming the key.
  std::string get(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  double get_double(const std::string& key) const;
  std::size_t get_size(const std::string& key) const;
  bool has(const std::string& key) const;  ///< given explicitly
};

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

/// Builds the stack. Prints the fallback warning once per process on stderr (and records it in
/// the allocator's Stats::warnings).
Built build(const Config& config);
/// parse_config(getenv("MODELMEM_ALLOC_CONF") or "") then build.
Built build_from_env();

}  // namespace modelmem::alloc
