// Byte formatting (modelmem/core/bytes.hpp).
#include "modelmem/core/bytes.hpp"

#include <cstdio>
#include <utility>

namespace modelmem {
namespace {

// `bytes` in the largest binary unit (1024-based, up to P) that leaves a value >= 1: the value
// and the unit's index (0 = bytes).
std::pair<double, int> scaled(std::uint64_t bytes) {
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  return {value, unit};
}

}  // namespace

std::string format_bytes(std::size_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  const auto [value, unit] = scaled(bytes);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", value, kUnits[unit]);
  return buf;
}

std::string format_bytes_mib(std::size_t bytes) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  if (bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  return format_bytes(bytes);
}

std::string format_bytes_short(std::uint64_t bytes) {
  static const char* const kUnits[] = {"B", "K", "M", "G", "T", "P"};
  if (bytes < 1024) return std::to_string(bytes) + "B";
  const auto [value, unit] = scaled(bytes);
  char buf[32];
  std::snprintf(buf, sizeof buf, value < 100 ? "%.1f%s" : "%.0f%s", value, kUnits[unit]);
  return buf;
}

}  // namespace modelmem
