// Helpers the parser (config.cpp) and the factory (factory.cpp) share; not public.
#pragma once

#include <cstddef>
#include <string>

#include "modelmem/config/factory.hpp"

namespace modelmem::config::detail {

inline constexpr std::size_t kMiB = std::size_t{1} << 20;

/// Throws InvalidInput "config: KEY: WHAT".
[[noreturn]] void bad(const std::string& key, const std::string& what);

/// The seed's table of what deployments budget per model family (model_type:cnn, ...).
struct Preset {
  const char* name;
  std::size_t base_mb;
  double factor;
};
/// The preset named `name`; bad("model_type", ...) when there is none.
const Preset& preset(const std::string& name);

/// build() for a Config with pools (pools.cpp).
Built build_pools(const Config& config, device::DevicePtr base);

/// `d` with the shortest "%g" spelling ("1.2", "1").
std::string trim_double(double d);

}  // namespace modelmem::config::detail
