#include "modelmem/core/error.hpp"

#include <cstdio>

namespace modelmem {

std::string format_bytes(std::size_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", value, kUnits[unit]);
  return buf;
}

std::string describe(const OomInfo& info) {
  std::string s = "out of memory";
  if (!info.where.empty()) s += " in " + info.where;
  s += ": requested " + format_bytes(info.requested);
  s += ", device free " + format_bytes(info.device_free);
  s += ", reserved " + format_bytes(info.reserved);
  s += ", allocated " + format_bytes(info.allocated);
  s += ", largest free block " + format_bytes(info.largest_free_block);
  if (info.quota) s += ", quota " + format_bytes(*info.quota);
  return s;
}

std::size_t checked_add(std::size_t a, std::size_t b, const char* what) {
  std::size_t r;
  if (__builtin_add_overflow(a, b, &r))
    throw InvalidInput(std::string(what) + ": size overflows 64 bits");
  return r;
}

std::size_t checked_mul(std::size_t a, std::size_t b, const char* what) {
  std::size_t r;
  if (__builtin_mul_overflow(a, b, &r))
    throw InvalidInput(std::string(what) + ": size overflows 64 bits");
  return r;
}

std::size_t checked_align_up(std::size_t value, std::size_t alignment, const char* what) {
  if (alignment <= 1) return value;
  std::size_t rem = value % alignment;
  if (rem == 0) return value;
  return checked_add(value, alignment - rem, what);
}

}  // namespace modelmem
