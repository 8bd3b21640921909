// What a pluggable library publishes for its stack (modelmem/config/publish.hpp).
#include "modelmem/config/publish.hpp"

#include <cstdlib>

namespace modelmem::config {

monitor::PoolInfo pool_info(const Config& config, const Built& built,
                            const std::string& default_name, const std::string& device) {
  monitor::PoolInfo info;
  const char* name = std::getenv("MODELMEM_POOL_NAME");
  info.name = name != nullptr && *name ? name : default_name;
  info.device = device;
  const std::string strategy = built.setting("strategy");
  info.strategy = strategy == "caching" && built.setting("expandable_segments") == "True"
                      ? "expandable"
                      : strategy;
  if (config.has("static_pool_mb")) info.budget = config.get_size_mb("static_pool_mb");
  return info;
}

}  // namespace modelmem::config
