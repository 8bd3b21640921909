// analyze(), chapter 1: the summary. One pass over the events counts them, tracks live and
// reserved bytes after each event (for the later chapters), the size histogram and the rates;
// then a best-fit pool replays the blocks to size a static pool.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <map>
#include <unordered_set>

#include "analysis_internal.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/core/free_list.hpp"

namespace modelmem::trace {

using alloc::EventKind;

std::size_t simulate_best_fit_pool(const Trace& trace, const Blocks& blocks,
                                   std::size_t alignment) {
  core::FreeList free;  // the shared best-fit coalescing free list
  std::vector<std::pair<std::size_t, std::size_t>> placed(blocks.blocks.size(), {0, 0});
  std::size_t top = 0;
  std::size_t high = 0;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    std::size_t b = blocks.block_of_event[i];
    if (b == kNever) continue;
    const TraceEvent& e = trace.events[i];
    if (e.kind == EventKind::kAlloc) {
      std::size_t size = checked_align_up(blocks.blocks[b].size, alignment, "block size");
      std::size_t offset;
      if (auto fit = free.allocate(size)) {
        offset = *fit;
      } else if (auto last = free.last(); last && last->end() == top) {
        // Grow the free block at the top instead of leaving it behind.
        offset = last->offset;
        free.erase(offset);
        top = offset + size;
      } else {
        offset = top;
        top = checked_add(top, size, "pool size");
      }
      high = std::max(high, top);
      placed[b] = {offset, size};
    } else if (e.kind == EventKind::kFree) {
      if (blocks.blocks[b].free_index != i) continue;
      free.release(placed[b].first, placed[b].second);
    }
  }
  return high;
}

namespace detail {

std::string percent(double fraction) {
  return fmt::format("{:.1f}%", 100.0 * fraction);
}

void summarize(State& state, Analysis& a) {
  const auto& events = state.trace.events;
  const Blocks& blocks = state.blocks;
  state.live_after = live_bytes_after(state.trace, blocks);
  std::map<std::size_t, std::size_t> size_counts;
  std::unordered_set<std::uint64_t> threads;
  std::size_t reserved = 0;
  std::size_t peak_reserved = 0;
  std::uint64_t first_time = events.empty() ? 0 : events.front().time_ns;
  std::uint64_t last_time = first_time;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    first_time = std::min(first_time, e.time_ns);
    last_time = std::max(last_time, e.time_ns);
    switch (e.kind) {
      case EventKind::kAlloc:
        ++a.allocs;
        threads.insert(e.thread);
        ++size_counts[e.size];
        a.bytes_allocated = checked_add(a.bytes_allocated, e.size, "bytes allocated");
        if (state.live_after[i] > a.peak_live) {
          a.peak_live = state.live_after[i];
          a.peak_live_event = i;
          a.peak_live_time_ns = e.time_ns;
        }
        break;
      case EventKind::kFree:
        ++a.frees;
        threads.insert(e.thread);
        break;
      case EventKind::kMark:
        ++a.marks;
        break;
      case EventKind::kOom:
        ++a.ooms;
        break;
      case EventKind::kSegmentAlloc:
      case EventKind::kMap:
        ++a.device_events;
        reserved += e.size;
        if (reserved > peak_reserved) {
          peak_reserved = reserved;
          state.peak_reserved_event = i;
        }
        break;
      case EventKind::kSegmentFree:
      case EventKind::kUnmap:
        ++a.device_events;
        reserved = reserved >= e.size ? reserved - e.size : 0;
        break;
    }
  }
  a.start_time_ns = first_time;
  // Times in the analysis count from the trace's first event (a recorder stamps the machine's
  // monotonic clock, which starts at boot).
  a.peak_live_time_ns = a.peak_live_time_ns >= first_time ? a.peak_live_time_ns - first_time : 0;
  a.threads = threads.size();
  a.distinct_sizes = size_counts.size();
  for (const auto& [size, count] : size_counts) {
    std::size_t low = size == 0 ? 0 : std::bit_floor(size);
    if (a.histogram.empty() || a.histogram.back().low != low)
      a.histogram.push_back(SizeBin{low, low == 0 ? 1 : low * 2, 0, 0});
    a.histogram.back().count += count;
    a.histogram.back().bytes += size * count;
  }
  for (const Block& b : blocks.blocks)
    if (b.free_index == kNever) {
      ++a.never_freed;
      a.never_freed_bytes += b.size;
    }
  a.duration_s = static_cast<double>(last_time - first_time) * 1e-9;
  if (a.duration_s > 0) {
    a.allocs_per_s = static_cast<double>(a.allocs) / a.duration_s;
    a.bytes_per_s = static_cast<double>(a.bytes_allocated) / a.duration_s;
  }
  if (a.device_events > 0) a.peak_reserved = peak_reserved;
  a.best_fit_pool = simulate_best_fit_pool(state.trace, blocks);
}

}  // namespace detail
}  // namespace modelmem::trace
