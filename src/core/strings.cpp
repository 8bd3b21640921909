// Small string helpers (modelmem/core/strings.hpp).
#include "modelmem/core/strings.hpp"

#include <cstdio>

namespace modelmem::core {

std::string format_double(double d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", d);
  return buf;
}

}  // namespace modelmem::core
