// The one free-space structure of modelmem: the free parts of one address range, kept as
// disjoint [offset, offset + size) ranges, indexed twice, by offset (to merge neighbours when a
// range is given back) and by (size, offset) (best fit in O(log n), the lowest offset among
// equal sizes so that space fills from the bottom). It serves the static pool, the heap
// simulation of the planner and the best-fit simulation of trace analysis.
//
// Invariants: ranges are non-empty and pairwise disjoint; no two ranges touch (release merges
// them); both indexes hold the same ranges; bytes() is the sum of their sizes.
// Nodes taken out of the indexes are kept and reused, so a steady pattern of take and release
// never calls the C heap. Not thread-safe: the owner locks.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace modelmem::core {

class FreeList {
 public:
  struct Range {
    std::size_t offset = 0;
    std::size_t size = 0;
    std::size_t end() const noexcept { return offset + size; }
  };
  using ByOffset = std::map<std::size_t, std::size_t>;           ///< offset -> size
  using BySize = std::set<std::pair<std::size_t, std::size_t>>;  ///< (size, offset)

  /// Gives [offset, offset + size) back, merged with the free ranges it touches. The range
  /// must overlap no free range and offset + size must not overflow; size 0 is ignored.
  void release(std::size_t offset, std::size_t size);
  /// The smallest free range of at least `size` bytes (lowest offset among equals), if any.
  std::optional<Range> best_fit(std::size_t size) const;
  /// Best fit of `size` bytes taken from the start of the range found; its offset, if any.
  std::optional<std::size_t> allocate(std::size_t size);
  /// Takes [at, at + size) out of the free range `range` (which must be one of this list's
  /// ranges and contain it); what is left on either side stays free.
  void take(Range range, std::size_t at, std::size_t size);
  /// Removes the free range starting at `offset` entirely (it must exist).
  void erase(std::size_t offset);

  /// The free range with the highest offset, if any.
  std::optional<Range> last() const;
  /// The size of the largest free range (0 when none).
  std::size_t largest() const noexcept { return by_size_.empty() ? 0 : by_size_.rbegin()->first; }
  /// Free bytes in all ranges together.
  std::size_t bytes() const noexcept { return bytes_; }
  /// Number of free ranges.
  std::size_t count() const noexcept { return by_offset_.size(); }
  bool empty() const noexcept { return by_offset_.empty(); }

  /// The ranges in offset order, and by (size, offset) from the first of at least `size`
  /// bytes: for callers whose fit needs more than a size (alignment inside the range).
  const ByOffset& by_offset() const noexcept { return by_offset_; }
  BySize::const_iterator first_of_size(std::size_t size) const {
    return by_size_.lower_bound({size, 0});
  }
  BySize::const_iterator size_end() const noexcept { return by_size_.end(); }

 private:
  void insert(std::size_t offset, std::size_t size);  // no merging
  void remove(ByOffset::iterator it);

  ByOffset by_offset_;
  BySize by_size_;
  std::vector<ByOffset::node_type> spare_offset_;
  std::vector<BySize::node_type> spare_size_;
  std::size_t bytes_ = 0;
};

}  // namespace modelmem::core
