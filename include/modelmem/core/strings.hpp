// Small string helpers shared by the parsers (config strings, CSV problems, traces).
#pragma once

#include <string_view>

namespace modelmem::core {

/// `s` without leading and trailing characters from `chars` (blanks and tabs by default).
constexpr std::string_view trim(std::string_view s, std::string_view chars = " \t") noexcept {
  const std::size_t first = s.find_first_not_of(chars);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(chars) - first + 1);
}

}  // namespace modelmem::core
