// The static planning model shared by every planner front end (MiniMalloc CSV, ONNX models,
// recorded traces) and every solver. A buffer occupies [offset, offset + size) during its
// half-open lifetime [start, end); a plan is valid when no two buffers that are live at the same
// time overlap in address. Plain value types: no locking, copy freely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace modelmem::plan {

using Time = std::int64_t;

struct Buffer {
  std::string id;
  std::size_t size = 0;
  Time start = 0;             ///< first step at which the buffer is live (inclusive)
  Time end = 0;               ///< first step at which it is no longer live (exclusive)
  std::size_t alignment = 1;  ///< the offset must be a multiple of this (>= 1)

  bool overlaps_in_time(const Buffer& other) const noexcept {
    return start < other.end && other.start < end;
  }
};

struct Problem {
  std::vector<Buffer> buffers;
  std::optional<std::size_t> capacity;  ///< arena limit, when the caller has one
  std::string name;                     ///< for messages and reports
};

struct Plan {
  std::vector<std::size_t> offsets;  ///< one per buffer, same order as Problem::buffers
  std::size_t arena_size = 0;        ///< max over buffers of offset + size (0 when empty)
};

/// Checks that every buffer is well formed (size > 0, start < end, alignment > 0, no duplicate
/// ids, total size fits in 64 bits). Throws InvalidInput naming the first offending buffer.
void check_problem(const Problem& problem);

/// The largest total size of buffers live at one time: no plan can use less. O(n log n) sweep.
std::size_t lower_bound(const Problem& problem);

/// The time step where lower_bound is reached (the first such step), and which buffers are live
/// there (indices into Problem::buffers). Empty problem: step 0, no buffers.
struct Peak {
  Time step = 0;
  std::size_t bytes = 0;
  std::vector<std::size_t> live;
};
Peak peak(const Problem& problem);

/// Result of validate(): ok, or the first problem found, described in `message`.
struct Validation {
  bool ok = true;
  std::string message;
  explicit operator bool() const noexcept { return ok; }
};

/// Checks a plan against its problem: offsets count, alignment, the capacity if one is set, the
/// recorded arena size, and that no two buffers overlap in both time and address (reports the
/// first such pair by id). O(n log n + k) where k is the number of time-overlapping pairs visited.
Validation validate(const Problem& problem, const Plan& plan);
/// validate, with the capacity checked or not (a plan that is valid but over the capacity can
/// still seed a search), without copying the problem.
Validation validate(const Problem& problem, const Plan& plan, bool check_capacity);

/// Computes arena_size from offsets (max offset + size), overflow-checked.
std::size_t arena_size_of(const Problem& problem, const std::vector<std::size_t>& offsets);

}  // namespace modelmem::plan
