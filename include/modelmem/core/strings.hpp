// Small string helpers shared by the parsers (config strings, CSV problems, traces) and the
// messages that echo their values.
#pragma once

#include <string>
#include <string_view>

namespace modelmem::core {

/// `s` without leading and trailing characters from `chars` (blanks and tabs by default).
constexpr std::string_view trim(std::string_view s, std::string_view chars = " \t") noexcept {
  const std::size_t first = s.find_first_not_of(chars);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(chars) - first + 1);
}

/// Text from an input made safe for one line of an error message: bytes outside printable ASCII
/// as \xNN, cut after `max_len` characters with "...".
std::string printable(std::string_view s, std::size_t max_len = 60);

/// `d` in the shortest "%g" spelling: "1.2", "1", "0.05", "1e+20".
std::string format_double(double d);

}  // namespace modelmem::core
