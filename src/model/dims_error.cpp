// The one error of a model's input dims (dims_error.hpp).
#include "model/dims_error.hpp"

#include <fmt/format.h>

namespace modelmem::model::detail {

std::string dims_error(const std::vector<std::pair<std::string, std::string>>& unbound,
                       const std::vector<std::string>& unknown, const std::set<std::string>& seen) {
  std::string why;
  if (unbound.size() == 1) {
    why = fmt::format("{} '{}' is not bound (use --dim {}=VALUE)", unbound[0].second,
                      unbound[0].first, unbound[0].first);
  } else if (!unbound.empty()) {
    std::string where, use;
    for (const auto& [name, at] : unbound) {
      where += fmt::format("{}'{}' ({})", where.empty() ? "" : ", ", name, at);
      use += fmt::format("{}--dim {}=VALUE", use.empty() ? "" : " ", name);
    }
    why = fmt::format("{} dims are not bound: {} (use {})", unbound.size(), where, use);
  }
  if (!unknown.empty()) {
    std::string flags, names, known;
    for (const auto& u : unknown) {
      flags += fmt::format("{}--dim {}", flags.empty() ? "" : ", ", u);
      names += fmt::format("{}'{}'", names.empty() ? "" : ", ", u);
    }
    for (const auto& d : seen) known += (known.empty() ? "" : ", ") + d;
    why += fmt::format("{}{}: the model's inputs have no dim named {} (they have: {})",
                       why.empty() ? "" : "; ", flags, names, known.empty() ? "none" : known);
  }
  return why;
}

}  // namespace modelmem::model::detail
