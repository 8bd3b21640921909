// Reading and writing planning problems and plans as MiniMalloc-style CSV files.
//
// Input: a header row and one row per buffer. Columns (any order, names case-sensitive):
//   id (or buffer, buffer_id)   any text; a field may be quoted "like ""this"""
//   lower (or start, begin)     first live step, inclusive
//   upper                       first step no longer live (exclusive), or instead
//   end                         last live step (inclusive; upper = end + 1)
//   size                        bytes, > 0
//   alignment                   optional, > 0 (default 1)
//   offset                      optional: a plan's offsets (read_plan_csv needs it; read_problem
//                               ignores it, fixed offsets are not a planning constraint here;
//                               read_problem_and_plan_csv returns them, e.g. IREE's placement)
//   hint, gaps                  MiniMalloc's optional columns, accepted and ignored (ignoring
//                               gaps keeps every plan valid: a buffer is treated as live
//                               throughout)
// Sizes are non-negative decimal integers; times are integers and may be negative (down to
// -2^62: MindSpore's SOMAS files start tensors at -1), kept as they are (only differences matter).
// Blank lines are skipped; CRLF is accepted. A file whose header is MindSpore's memory tracker's
// (memory_block.csv: start_time_stamp, end_time_stamp, size, ...) is read as the problem its
// blocks make (plan/mindspore_tracker.hpp) by parse_problem_csv, read_problem_csv and
// read_problem_and_plan_csv.
//
// Every malformed input throws InvalidInput with one line "FILE:LINE: what is wrong" (missing
// or unknown column, non-numeric, negative or out-of-range value, zero size, upper <= lower,
// duplicate id, total size overflowing 64 bits, wrong field count, binary data, empty file).
// The reader is linear in the input size and holds no global state (thread-compatible).
#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>
#include <string_view>

#include "modelmem/plan/problem.hpp"

namespace modelmem::plan {

/// A problem read together with the offsets of a plan (the `offset` column).
struct PlannedProblem {
  Problem problem;
  Plan plan;
};

/// Parses CSV text; `source` names the input in error messages (usually the file path).
/// Problem::name is set to `source`, capacity is left empty.
Problem parse_problem_csv(std::string_view text, const std::string& source);
/// Reads a file; throws InvalidInput if it cannot be opened.
Problem read_problem_csv(const std::filesystem::path& path);

/// As parse_problem_csv, but the `offset` column is required and returned as a plan (its
/// arena_size computed). The plan itself is not validated: call validate().
PlannedProblem parse_plan_csv(std::string_view text, const std::string& source);
PlannedProblem read_plan_csv(const std::filesystem::path& path);

/// As read_problem_csv, also returning the `offset` column when the file has one (plan.offsets
/// empty when not): a starting plan to validate and improve (`solve` seeds its searches with it).
PlannedProblem read_problem_and_plan_csv(const std::filesystem::path& path);

/// Writes `id,lower,upper,size[,alignment],offset` (alignment only when some buffer has one
/// above 1), quoting ids that need it. `plan` must have one offset per buffer.
void write_plan_csv(std::ostream& out, const Problem& problem, const Plan& plan);

}  // namespace modelmem::plan
