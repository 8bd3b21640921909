// The one error a model's input dims get: every unbound dim (with where it first appears) and
// every --dim that names no dim of the model, so that one run says everything to fix.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace modelmem::model::detail {

/// `unbound`: (name, "graph input 'X': dim N") of each dim without a value, in order of first
/// appearance; `unknown`: the --dim names no input has; `seen`: every dim name of the inputs.
std::string dims_error(const std::vector<std::pair<std::string, std::string>>& unbound,
                       const std::vector<std::string>& unknown, const std::set<std::string>& seen);

}  // namespace modelmem::model::detail
