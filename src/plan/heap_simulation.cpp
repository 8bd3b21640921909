// Heap simulation for the best-fit heuristic: the schedule is replayed, each buffer allocated
// from a free list when it starts and returned when it ends, as a run-time allocator would.
//
// Free space is a set of disjoint blocks indexed twice, by address (to merge neighbours on
// free) and by length (to find the best fit in O(log n)). The block above the highest live
// buffer is unbounded: its length is "to the end of the address space", so best fit takes it
// only when no bounded gap fits, which is exactly when the arena grows.
#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "modelmem/core/error.hpp"
#include "plan/placement.hpp"

namespace modelmem::plan::detail {
namespace {

constexpr std::size_t kTop = std::numeric_limits<std::size_t>::max();

class FreeList {
 public:
  FreeList() { add(0, kTop); }

  std::size_t allocate(const Buffer& b, GapChoice choice) {
    if (choice == GapChoice::kBest) {
      for (auto it = by_length_.lower_bound({b.size, 0}); it != by_length_.end(); ++it) {
        if (auto at = fit(it->second, it->second + it->first, b)) return take(it->second, *at, b);
      }
    } else {
      for (auto& [addr, end] : by_addr_) {
        if (auto at = fit(addr, end, b)) return take(addr, *at, b);
      }
    }
    throw_offset_overflow(b);  // only when the unbounded block cannot hold it either
  }

  void release(std::size_t addr, std::size_t size) {
    std::size_t end = addr + size;
    auto next = by_addr_.lower_bound(addr);
    if (next != by_addr_.end() && next->first == end) {
      end = next->second;
      remove(next);
    }
    auto prev = by_addr_.lower_bound(addr);
    if (prev != by_addr_.begin()) {
      --prev;
      if (prev->second == addr) {
        addr = prev->first;
        remove(prev);
      }
    }
    add(addr, end);
  }

 private:
  static std::optional<std::size_t> fit(std::size_t addr, std::size_t end, const Buffer& b) {
    if (end - addr < b.size) return std::nullopt;
    std::size_t at;
    if (!try_align_up(addr, b, at) || at > end || end - at < b.size) return std::nullopt;
    return at;
  }

  std::size_t take(std::size_t addr, std::size_t at, const Buffer& b) {
    auto it = by_addr_.find(addr);
    std::size_t end = it->second;
    remove(it);
    if (at > addr) add(addr, at);
    if (end - at > b.size) add(at + b.size, end);
    return at;
  }

  void add(std::size_t addr, std::size_t end) {
    by_addr_.emplace(addr, end);
    by_length_.emplace(end - addr, addr);
  }
  void remove(std::map<std::size_t, std::size_t>::iterator it) {
    by_length_.erase({it->second - it->first, it->first});
    by_addr_.erase(it);
  }

  std::map<std::size_t, std::size_t> by_addr_;               // address -> end
  std::set<std::pair<std::size_t, std::size_t>> by_length_;  // (length, address)
};

}  // namespace

Plan simulate_heap(const Problem& problem, std::span<const std::size_t> rank, GapChoice choice) {
  const auto& bufs = problem.buffers;
  const std::size_t n = bufs.size();
  std::vector<std::size_t> starts(n), ends(n);
  std::iota(starts.begin(), starts.end(), 0);
  std::iota(ends.begin(), ends.end(), 0);
  std::sort(starts.begin(), starts.end(), [&](std::size_t a, std::size_t b) {
    if (bufs[a].start != bufs[b].start) return bufs[a].start < bufs[b].start;
    return rank[a] < rank[b];
  });
  std::sort(ends.begin(), ends.end(),
            [&](std::size_t a, std::size_t b) { return bufs[a].end < bufs[b].end; });

  Plan plan;
  plan.offsets.assign(n, 0);
  FreeList free;
  std::size_t next_end = 0;
  for (std::size_t i : starts) {
    // [start, end) lifetimes: a buffer ending at this step is free for one starting at it.
    while (next_end < n && bufs[ends[next_end]].end <= bufs[i].start) {
      std::size_t j = ends[next_end++];
      free.release(plan.offsets[j], bufs[j].size);
    }
    std::size_t at = free.allocate(bufs[i], choice);
    plan.offsets[i] = at;
    std::size_t end_addr;
    if (__builtin_add_overflow(at, bufs[i].size, &end_addr)) throw_offset_overflow(bufs[i]);
    plan.arena_size = std::max(plan.arena_size, end_addr);
  }
  return plan;
}

}  // namespace modelmem::plan::detail
