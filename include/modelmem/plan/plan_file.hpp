// Reads the two sizes a static pool needs from a plan file (the JSON that `modelmem plan`
// writes): the top-level integers `arena_bytes` and `weights_bytes`. The core may use no JSON
// library, so this is a small strict reader: the whole file must be valid JSON (RFC 8259), the
// top level an object, both keys non-negative integers that fit in 64 bits, each at most once;
// other keys and nested values are checked for syntax and otherwise skipped.
//
// A plan is a promise of non-overlap, and a pool is sized from it: it is validated before the
// sizes are returned. `format` and `version`, when present, must be this writer's ("modelmem-plan",
// 1); `total_bytes`, when present, must be arena_bytes + weights_bytes; every buffer of
// `buffers`, when present, must have a size, start, end and offset that are non-negative integers
// of 64 bits, end inside the arena, keep its alignment, and overlap no buffer in address while
// both are live; the arena must end where the last buffer ends. The message names the first bad
// buffer (its index and id).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace modelmem::plan {

struct PlanSizes {
  std::size_t arena_bytes = 0;    ///< required
  std::size_t weights_bytes = 0;  ///< optional (0 when absent: a plan of activations only)
  std::size_t total() const;      ///< overflow-checked sum
};

/// Throws InvalidInput naming `name`, the line and column, and what is wrong.
PlanSizes parse_plan_sizes(std::string_view json, const std::string& name);
/// Reads `path` (InvalidInput when it cannot be read) and parses it.
PlanSizes read_plan_sizes(const std::string& path);

}  // namespace modelmem::plan
