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

/// The one pool-name rule (the pools key, default_pool, modelmem.pool(), the pool push
/// functions of every library, and the names `plan` makes from model file names): 1 to
/// kPoolNameMax characters of A-Z a-z 0-9 _ - . (a monitor record holds the name whole).
inline constexpr std::size_t kPoolNameMax = 47;
/// The rule in words, for messages: "1 to 47 of A-Z a-z 0-9 _ - .".
std::string pool_name_rule();
/// Whether `name` follows the rule.
bool valid_pool_name(std::string_view name) noexcept;
/// A name that follows the rule made from any text (a file name's stem): every other character
/// becomes '_', cut to leave room for a "_N" suffix (kPoolNameMax - 4 characters); "model" for
/// an empty text.
std::string pool_name_from(std::string_view text);

}  // namespace modelmem::core
