// The configuration strings of several models sharing a device (modelmem/model/plan_model.hpp).
#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>

#include "modelmem/core/error.hpp"
#include "modelmem/core/strings.hpp"
#include "modelmem/model/plan_model.hpp"

namespace modelmem::model {
namespace {

std::size_t mib_up(std::size_t bytes) {
  return (bytes + (std::size_t{1} << 20) - 1) >> 20;
}

}  // namespace

// docs/config.md, "Per-model pools with quotas": pools:[NAME:MIB,...] and default_pool:NAME.
// Each model in its own process gets its pool as the default; one process serving every model
// lists them all, each model's thread selecting its pool with modelmem_pool_push(NAME).
std::string DevicePlan::config_string(std::size_t i) const {
  const ModelShare& s = models.at(i);
  return fmt::format("pools:[{}:{}],default_pool:{}", s.pool, mib_up(s.quota), s.pool);
}

std::string DevicePlan::config_string_all() const {
  std::string pools;
  for (const auto& s : models)
    pools += fmt::format("{}{}:{}", pools.empty() ? "" : ",", s.pool, mib_up(s.quota));
  return "pools:[" + pools + "]";
}

}  // namespace modelmem::model
