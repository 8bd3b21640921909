// Greedy placement of buffers one at a time, the engine of greedy-size and greedy-breadth.
//
// The placed buffers are kept sorted by offset in parallel arrays, so finding the gaps left by
// the buffers that overlap a newcomer in time is one linear scan over contiguous memory: the
// running maximum of the ends of the time-overlapping buffers seen so far is the bottom of the
// next gap. A tree over time would visit fewer buffers but would have to sort them by offset on
// every query; at the sizes met in practice (up to ~10^4 buffers) the scan is faster.
#include <algorithm>
#include <limits>

#include "modelmem/error.hpp"
#include "plan/placement.hpp"

namespace modelmem::plan::detail {

void throw_offset_overflow() {
  throw InvalidInput("buffer offset overflows 64 bits");
}

namespace {

class OffsetOrderedSet {
 public:
  explicit OffsetOrderedSet(std::size_t n) {
    offset_.reserve(n);
    end_addr_.reserve(n);
    start_.reserve(n);
    end_.reserve(n);
  }

  /// Lowest offset for `b` by `choice`; `work` counts the placed buffers looked at.
  std::size_t find(const Buffer& b, GapChoice choice, std::size_t& work) const {
    const std::size_t n = offset_.size();
    work += n;
    std::size_t floor = 0;  // max end address of time-overlapping buffers below the scan point
    std::size_t best = kNone;
    std::size_t best_gap = kNone;
    for (std::size_t i = 0; i < n; ++i) {
      if (!(start_[i] < b.end && b.start < end_[i])) continue;
      const std::size_t lo = offset_[i];
      if (lo > floor && lo - floor >= b.size) {
        const std::size_t at = align_up(floor, b.alignment);
        if (at <= lo && lo - at >= b.size) {
          const std::size_t gap = lo - floor;
          if (choice == GapChoice::kFirst) return at;
          if (gap < best_gap) {
            best_gap = gap;
            best = at;
            if (gap == b.size) return best;  // cannot do better than an exact fit
          }
        }
      }
      floor = std::max(floor, end_addr_[i]);
    }
    if (best != kNone) return best;
    return align_up(floor, b.alignment);
  }

  void insert(const Buffer& b, std::size_t offset, std::size_t end_addr) {
    auto pos = std::upper_bound(offset_.begin(), offset_.end(), offset) - offset_.begin();
    offset_.insert(offset_.begin() + pos, offset);
    end_addr_.insert(end_addr_.begin() + pos, end_addr);
    start_.insert(start_.begin() + pos, b.start);
    end_.insert(end_.begin() + pos, b.end);
  }

 private:
  static constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
  std::vector<std::size_t> offset_, end_addr_;
  std::vector<Time> start_, end_;
};

}  // namespace

Plan place_in_order_counted(const Problem& problem, std::span<const std::size_t> order,
                            GapChoice choice, std::size_t& work) {
  const auto& bufs = problem.buffers;
  if (order.size() != bufs.size())
    throw InvalidInput("placement order has " + std::to_string(order.size()) + " entries for " +
                       std::to_string(bufs.size()) + " buffers");
  Plan plan;
  plan.offsets.assign(bufs.size(), std::numeric_limits<std::size_t>::max());
  std::vector<bool> seen(bufs.size(), false);
  OffsetOrderedSet placed(bufs.size());
  for (std::size_t idx : order) {
    if (idx >= bufs.size() || seen[idx])
      throw InvalidInput("placement order is not a permutation of the buffers");
    seen[idx] = true;
    const Buffer& b = bufs[idx];
    std::size_t offset = placed.find(b, choice, work);
    std::size_t end_addr;
    if (__builtin_add_overflow(offset, b.size, &end_addr)) throw_offset_overflow();
    placed.insert(b, offset, end_addr);
    plan.offsets[idx] = offset;
    plan.arena_size = std::max(plan.arena_size, end_addr);
  }
  return plan;
}

}  // namespace modelmem::plan::detail

namespace modelmem::plan {

Plan place_in_order(const Problem& problem, std::span<const std::size_t> order, GapChoice choice) {
  std::size_t work = 0;
  return detail::place_in_order_counted(problem, order, choice, work);
}

}  // namespace modelmem::plan
