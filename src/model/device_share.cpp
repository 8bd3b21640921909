// Sizes as users write them, and the configuration strings of several models sharing a device
// (modelmem/model/plan_model.hpp).
#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>

#include "modelmem/core/error.hpp"
#include "modelmem/core/strings.hpp"
#include "modelmem/model/plan_model.hpp"

namespace modelmem::model {

std::size_t parse_size(const std::string& text, const std::string& what) {
  auto bad = [&](const std::string& why) {
    return InvalidInput(fmt::format("{} '{}': {}", what, core::printable(text), why));
  };
  std::size_t end = 0;
  while (end < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.'))
    ++end;
  double value = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + end, value);
  if (end == 0 || ec != std::errc() || p != text.data() + end)
    throw bad("expected a size such as 16GiB, 512MiB, 2GB or a number of bytes");
  std::string unit = text.substr(end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // A unit means what it says: powers of 1000 for kB..TB, of 1024 for KiB..TiB.
  struct Unit {
    const char* name;
    double scale;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},      {"b", 1},        {"kb", 1e3},     {"mb", 1e6},     {"gb", 1e9},
      {"tb", 1e12}, {"kib", 0x1p10}, {"mib", 0x1p20}, {"gib", 0x1p30}, {"tib", 0x1p40},
  };
  double scale = 0;
  for (const Unit& u : kUnits)
    if (unit == u.name) scale = u.scale;
  if (scale == 0) {
    if (unit == "k" || unit == "m" || unit == "g" || unit == "t") {
      const char up = static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0])));
      throw bad(
          fmt::format("'{0}' says neither {0}iB (powers of 1024) nor {0}B (powers of "
                      "1000): write one of them",
                      up));
    }
    throw bad(fmt::format("unknown unit '{}' (B, kB, MB, GB, TB, KiB, MiB, GiB or TiB)",
                          core::printable(text.substr(end))));
  }
  const double bytes = std::floor(value * scale);
  if (!(bytes >= 1) || !(bytes <= 0x1p63))
    throw bad("out of range: a size is from 1 byte to 8 EiB (2^63 bytes)");
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
