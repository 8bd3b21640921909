// Sizes as users write them, and the configuration strings of several models sharing a device
// (modelmem/model/plan_model.hpp).
#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>

#include "modelmem/core/error.hpp"
#include "modelmem/model/plan_model.hpp"

namespace modelmem::model {

std::size_t parse_size(const std::string& text, const std::string& what) {
  auto bad = [&] {
    return InvalidInput(fmt::format(
        "{} '{}': expected a size such as 16GiB, 512MiB or a number of bytes", what, text));
  };
  std::size_t end = 0;
  while (end < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.'))
    ++end;
  if (end == 0) throw bad();
  double value = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + end, value);
  if (ec != std::errc() || p != text.data() + end) throw bad();
  std::string unit = text.substr(end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  if (!unit.empty() && unit.back() == 'I') unit.pop_back();
  double scale = 1;
  if (unit == "K")
    scale = 1024.0;
  else if (unit == "M")
    scale = 1024.0 * 1024;
  else if (unit == "G")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "T")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty())
    throw bad();
  const double bytes = std::floor(value * scale);
  if (!(bytes >= 1))
    throw InvalidInput(fmt::format("{} '{}': must be at least 1 byte", what, text));
  if (bytes >= 9.0e18) throw InvalidInput(fmt::format("{} '{}': too large", what, text));
  return static_cast<std::size_t>(bytes);
}

}  // namespace modelmem::model

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
