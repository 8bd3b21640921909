// The one JSON format of a memory plan (docs/plan-format.md): what `modelmem solve --output
// PLAN.json` and `modelmem plan --json` write and what the `plan:` config key reads
// (plan_file.hpp reads its `arena_bytes` and `weights_bytes`). One top-level object:
//
//   format             "modelmem-plan"
//   version            1
//   source             what was planned (a problem file, a model path)
//   solver             the solver that produced the offsets
//   arena_bytes        bytes of the arena: max over buffers of offset + size
//   weights_bytes      bytes of weights held beside the arena (0 for a bare problem)
//   total_bytes        arena_bytes + weights_bytes: what a static pool needs
//   lower_bound_bytes  no plan of the problem can use less
//   proven_optimal     the solver proved arena_bytes minimal
//   capacity_bytes     the arena limit the plan was made under, or null
//   buffers            [{id, size, alignment, start, end, offset}], start inclusive, end
//                      exclusive (steps of the problem), in the problem's order
//
// A front end may add members of its own after these (`plan --json` adds the model's dims,
// steps and tensors); readers ignore members they do not know. Std-only, like the plan layer.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "modelmem/plan/problem.hpp"

namespace modelmem::plan {

inline constexpr std::string_view kPlanFormat = "modelmem-plan";
inline constexpr int kPlanFormatVersion = 1;

/// What a plan file says beside the problem and the offsets.
struct PlanInfo {
  std::string source;
  std::string solver;
  std::size_t weights_bytes = 0;
  std::size_t lower_bound = 0;
  bool proven_optimal = false;
  std::optional<std::size_t> capacity;
  /// Extra top-level members, written after the standard ones in this order: a name and its
  /// value as JSON text (the caller serialises it; it must be valid JSON). Names must not repeat
  /// a standard member's.
  std::vector<std::pair<std::string, std::string>> extra;
};

/// Writes the plan file (2-space indentation, a newline at the end). `plan` must have one
/// offset per buffer (InvalidInput otherwise); an extra member named like a standard one is
/// rejected with InvalidInput before anything is written.
void write_plan_json(std::ostream& out, const Problem& problem, const Plan& plan,
                     const PlanInfo& info);
std::string plan_json_text(const Problem& problem, const Plan& plan, const PlanInfo& info);

/// `text` as a JSON string literal (quotes included), escaping what RFC 8259 requires.
std::string json_quote(std::string_view text);

}  // namespace modelmem::plan
