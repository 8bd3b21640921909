// The true optimum of a tiny planning problem by exhaustive search, to check solvers against.
#pragma once

#include <cstddef>
#include <vector>

#include "modelmem/plan/problem.hpp"

namespace modelmem::plan::testing {

/// Whether buffers k.. get aligned offsets below `arena`, with no two that overlap in time
/// overlapping in space (buffers before k keep the offsets in `off`).
inline bool fits(const Problem& p, std::size_t arena, std::size_t k,
                 std::vector<std::size_t>& off) {
  if (k == p.buffers.size()) return true;
  const Buffer& b = p.buffers[k];
  for (std::size_t o = 0; o + b.size <= arena; o += b.alignment) {
    bool ok = true;
    for (std::size_t j = 0; j < k && ok; ++j) {
      const Buffer& c = p.buffers[j];
      if (b.overlaps_in_time(c) && o < off[j] + c.size && off[j] < o + b.size) ok = false;
    }
    if (!ok) continue;
    off[k] = o;
    if (fits(p, arena, k + 1, off)) return true;
  }
  return false;
}

/// The smallest arena every buffer fits in (from the lower bound up: exponential, tiny only).
inline std::size_t brute_force_optimum(const Problem& p) {
  std::vector<std::size_t> off(p.buffers.size());
  for (std::size_t arena = lower_bound(p);; ++arena)
    if (fits(p, arena, 0, off)) return arena;
}

}  // namespace modelmem::plan::testing
