// Small string helpers (modelmem/core/strings.hpp).
#include "modelmem/core/strings.hpp"

#include <cstdio>

namespace modelmem::core {

std::string printable(std::string_view s, std::size_t max_len) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (out.size() >= max_len) {
      out += "...";
      break;
    }
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

std::string format_double(double d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", d);
  return buf;
}

namespace {

bool pool_name_char(char ch) noexcept {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '_' || ch == '-' || ch == '.';
}

}  // namespace

std::string pool_name_rule() {
  return "1 to " + std::to_string(kPoolNameMax) + " of A-Z a-z 0-9 _ - .";
}

bool valid_pool_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > kPoolNameMax) return false;
  for (char ch : name)
    if (!pool_name_char(ch)) return false;
  return true;
}

std::string pool_name_from(std::string_view text) {
  std::string out;
  for (char ch : text.substr(0, kPoolNameMax - 4)) out += pool_name_char(ch) ? ch : '_';
  return out.empty() ? "model" : out;
}

}  // namespace modelmem::core
