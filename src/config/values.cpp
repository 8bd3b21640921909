// The syntax that several configuration values share (config/internal.hpp): whole numbers, their
// ranges, and bracketed "[KEY:VALUE,...]" lists (roundup_power2_divisions, pools).
#include <charconv>
#include <cstdint>
#include <string>

#include "config/internal.hpp"
#include "modelmem/config/config.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/core/strings.hpp"

namespace modelmem::config {

std::string check_whole_number_in(const std::string& key, std::string_view value, std::size_t min,
                                  std::size_t max, std::string_view unit) {
  std::size_t n = 0;
  const std::string u = unit.empty() ? "" : " " + std::string(unit);
  const std::string range = "[" + std::to_string(min) + ", " + std::to_string(max) + "]" + u;
  const bool digits =
      !value.empty() && value.find_first_not_of("0123456789") == std::string_view::npos;
  if (digits && !detail::parse_uint(value, n))  // more than 64 bits hold
    detail::bad(key, std::string(value) + u + " is out of range: must be in " + range);
  if (!digits)
    detail::bad(key, "expected a whole number" + u + ", got '" + std::string(value) + "'");
  if (n < min || n > max)
    detail::bad(key, std::string(value) + u + " is out of range: must be in " + range);
  return std::to_string(n);
}

}  // namespace modelmem::config

namespace modelmem::config::detail {

// A number of MiB that may be 0 (thread_cache_mb): its bytes must fit in 64 bits.
std::string check_mb_or_zero(const std::string& key, std::string_view v) {
  return config::check_whole_number_in(key, v, 0, kMaxMb, "MiB");
}

// planned_min_kb: its bytes must fit in 64 bits.
std::string check_kb_or_zero(const std::string& key, std::string_view v) {
  return config::check_whole_number_in(key, v, 0, SIZE_MAX >> 10, "KiB");
}

// planned_solve_ms: at most an hour (a step plan taking longer is a mistake, and the
// nanoseconds of a larger number would not fit in a clock's 64 bits).
std::string check_solve_ms(const std::string& key, std::string_view v) {
  return config::check_whole_number_in(key, v, 1, 3'600'000, "ms");
}

// cache_decay_ms: 0 (never) to an hour, as planned_solve_ms.
std::string check_decay_ms(const std::string& key, std::string_view v) {
  return config::check_whole_number_in(key, v, 0, 3'600'000, "ms");
}

// Counts of steps and plans: up to 2^32 (more would never be reached).
std::string check_steps_count(const std::string& key, std::string_view v) {
  return config::check_whole_number_in(key, v, 0, std::size_t{1} << 32);
}
std::string check_positive_count(const std::string& key, std::string_view v) {
  return config::check_whole_number_in(key, v, 1, std::size_t{1} << 32);
}

bool parse_uint(std::string_view s, std::size_t& out) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string_view::npos) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::vector<ListEntry> list_entries(std::string_view body, std::string_view entry_word,
                                    std::string_view form) {
  std::vector<ListEntry> out;
  std::size_t start = 0;
  while (start <= body.size()) {
    const std::size_t comma = body.find(',', start);
    const std::string_view entry = core::trim(body.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    start = comma == std::string_view::npos ? body.size() + 1 : comma + 1;
    const std::size_t colon = entry.find(':');
    if (colon == std::string_view::npos)
      throw InvalidInput(std::string(entry_word) + " '" + std::string(entry) + "' is not " +
                         std::string(form));
    out.push_back(ListEntry{core::trim(entry.substr(0, colon)), core::trim(entry.substr(colon + 1)),
                            comma == std::string_view::npos});
  }
  return out;
}

}  // namespace modelmem::config::detail
