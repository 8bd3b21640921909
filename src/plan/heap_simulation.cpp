// Heap simulation for the best-fit heuristic: the schedule is replayed, each buffer allocated
// from a free list when it starts and returned when it ends, as a run-time allocator would.
//
// Free space is the shared coalescing free list (core/free_list.hpp), indexed by address and by
// length. The block above the highest live buffer is unbounded: its length is "to the end of the
// address space", so best fit takes it only when no bounded gap fits, which is exactly when the
// arena grows.
#include <algorithm>
#include <limits>
#include <optional>

#include "modelmem/core/free_list.hpp"
#include "plan/buffer_placer.hpp"
#include "plan/time_sort.hpp"

namespace modelmem::plan::detail {
namespace {

constexpr std::size_t kTop = std::numeric_limits<std::size_t>::max();

// The heap's free space: best fit (or first fit) with the buffer's alignment inside the gap.
class HeapFreeList {
 public:
  HeapFreeList() { free_.release(0, kTop); }

  std::size_t allocate(const Buffer& b, GapChoice choice) {
    if (choice == GapChoice::kBest) {
      for (auto it = free_.first_of_size(b.size); it != free_.size_end(); ++it) {
        const core::FreeList::Range r{it->second, it->first};
        if (auto at = fit(r, b)) return take(r, *at, b);
      }
    } else {
      for (auto& [addr, size] : free_.by_offset()) {
        const core::FreeList::Range r{addr, size};
        if (auto at = fit(r, b)) return take(r, *at, b);
      }
    }
    throw_offset_overflow(b);  // only when the unbounded block cannot hold it either
  }

  void release(std::size_t addr, std::size_t size) { free_.release(addr, size); }

 private:
  static std::optional<std::size_t> fit(core::FreeList::Range r, const Buffer& b) {
    if (r.size < b.size) return std::nullopt;
    std::size_t at;
    if (!try_align_up(r.offset, b, at) || at > r.end() || r.end() - at < b.size)
      return std::nullopt;
    return at;
  }

  std::size_t take(core::FreeList::Range r, std::size_t at, const Buffer& b) {
    free_.take(r, at, b.size);
    return at;
  }

  core::FreeList free_;
};

/// The rest of a heap simulation cut short, in linear time: the buffers of `rest` (in schedule
/// order; `ends` is the end order from where the simulation stopped) are allocated as on a
/// stack above everything placed so far, each at the top, and the top comes down when the
/// buffers at it have ended (last in, first out, as a step's activations are freed). Valid
/// whatever the order of frees, and never above stacking them all.
void finish_as_stack(const Problem& problem, std::span<const std::size_t> rest,
                     std::span<const std::size_t> ends, Plan& plan) {
  const auto& bufs = problem.buffers;
  std::vector<char> state(bufs.size(), 0);  // 1: one of `rest` not yet ended, 2: ended
  for (std::size_t j : rest) state[j] = 1;
  const std::size_t base = plan.arena_size;
  std::size_t top = base;
  std::vector<std::size_t> stack;
  std::size_t next_end = 0;
  for (std::size_t i : rest) {
    while (next_end < ends.size() && bufs[ends[next_end]].end <= bufs[i].start) {
      const std::size_t j = ends[next_end++];
      if (state[j] != 1) continue;  // simulated before the cut: its space is not reused
      state[j] = 2;
      while (!stack.empty() && state[stack.back()] == 2) {
        top = plan.offsets[stack.back()];
        stack.pop_back();
      }
      if (stack.empty()) top = base;
    }
    const std::size_t at = align_up(top, bufs[i]);
    plan.offsets[i] = at;
    if (__builtin_add_overflow(at, bufs[i].size, &top)) throw_offset_overflow(bufs[i]);
    stack.push_back(i);
    plan.arena_size = std::max(plan.arena_size, top);
  }
}

}  // namespace

std::vector<std::size_t> end_order(const Problem& problem) {
  return stable_order_by(problem.buffers.size(),
                         [&](std::size_t i) { return problem.buffers[i].end; });
}

Plan simulate_heap(const Problem& problem, std::span<const std::size_t> rank, GapChoice choice,
                   Deadline stop_at, std::span<const std::size_t> by_end, std::size_t* unplaced) {
  const auto& bufs = problem.buffers;
  const std::size_t n = bufs.size();
  // Schedule order: by start, ties by rank (the buffers in rank order, stably sorted by start).
  std::vector<std::size_t> of_rank(n);
  for (std::size_t i = 0; i < n; ++i) of_rank[rank[i]] = i;
  const std::vector<std::size_t> start_order = stable_order_by(
      std::span<const std::size_t>(of_rank), [&](std::size_t i) { return bufs[i].start; });
  const std::span<const std::size_t> starts = start_order;
  std::vector<std::size_t> own_ends;
  if (by_end.size() != n) {
    own_ends = end_order(problem);
    by_end = own_ends;
  }
  const std::span<const std::size_t> ends = by_end;

  Plan plan;
  plan.offsets.assign(n, 0);
  HeapFreeList free;
  std::size_t next_end = 0;
  std::size_t count = 0;
  if (unplaced) *unplaced = 0;
  for (std::size_t i : starts) {
    if (stop_at != Deadline::max() && ++count % 4096 == 0 &&
        std::chrono::steady_clock::now() >= stop_at) {
      if (!unplaced) throw TimeUp{};
      *unplaced = n - (count - 1);
      finish_as_stack(problem, starts.subspan(count - 1), ends.subspan(next_end), plan);
      return plan;
    }
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
