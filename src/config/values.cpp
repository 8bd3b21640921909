// The syntax that several configuration values share (config/internal.hpp): whole numbers and
// bracketed "[KEY:VALUE,...]" lists (roundup_power2_divisions, pools).
#include <charconv>
#include <string>

#include "config/internal.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/core/strings.hpp"

namespace modelmem::config::detail {

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
