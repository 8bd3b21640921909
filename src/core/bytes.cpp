// Byte sizes formatted and parsed (modelmem/core/bytes.hpp).
#include "modelmem/core/bytes.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <utility>

#include "modelmem/core/error.hpp"
#include "modelmem/core/strings.hpp"

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

std::size_t parse_size(const std::string& text, const std::string& what) {
  auto bad = [&](const std::string& why) {
    return InvalidInput(what + " '" + core::printable(text) + "': " + why);
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
      const std::string u(1, up);
      throw bad("'" + u + "' says neither " + u + "iB (powers of 1024) nor " + u +
                "B (powers of 1000): write one of them");
    }
    throw bad("unknown unit '" + core::printable(text.substr(end)) +
              "' (B, kB, MB, GB, TB, KiB, MiB, GiB or TiB)");
  }
  const double bytes = std::floor(value * scale);
  if (!(bytes >= 1) || !(bytes <= 0x1p63))
    throw bad("out of range: a size is from 1 byte to 8 EiB (2^63 bytes)");
  return static_cast<std::size_t>(bytes);
}

}  // namespace modelmem
