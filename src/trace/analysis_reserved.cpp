// analyze(), chapter 3: where reserved memory goes at its peak. The reserved ranges (segments
// and mapped pages, merged) and the blocks live at the moment reserved bytes peak; every free
// byte of a range is put in exactly one cause, so that reserved = live + unused and unused =
// empty ranges + oversize + fragmented hold exactly.
#include <map>

#include "analysis_internal.hpp"

namespace modelmem::trace::detail {

namespace {

using alloc::EventKind;

// Reserved address ranges, kept merged: segments and mapped pages as the allocator reported them.
class RangeSet {
 public:
  void add(std::uintptr_t begin, std::uintptr_t end) {
    if (begin >= end) return;
    remove(begin, end);
    auto next = ranges_.lower_bound(begin);
    if (next != ranges_.begin()) {
      auto prev = std::prev(next);
      if (prev->second == begin) {
        begin = prev->first;
        ranges_.erase(prev);
      }
    }
    if (next != ranges_.end() && next->first == end) {
      end = next->second;
      ranges_.erase(next);
    }
    ranges_[begin] = end;
  }
  void remove(std::uintptr_t begin, std::uintptr_t end) {
    if (begin >= end) return;
    auto it = ranges_.lower_bound(begin);
    if (it != ranges_.begin() && std::prev(it)->second > begin) --it;
    while (it != ranges_.end() && it->first < end) {
      auto [b, e] = *it;
      it = ranges_.erase(it);
      if (b < begin) ranges_[b] = begin;
      if (e > end) {
        ranges_[end] = e;
        break;
      }
    }
  }
  const std::map<std::uintptr_t, std::uintptr_t>& ranges() const { return ranges_; }

 private:
  std::map<std::uintptr_t, std::uintptr_t> ranges_;
};

}  // namespace

void break_down_reserved(const State& state, Analysis& a) {
  const std::size_t peak_event = state.peak_reserved_event;
  if (peak_event == kNever) return;
  const auto& events = state.trace.events;
  const Blocks& blocks = state.blocks;
  RangeSet ranges;
  std::map<std::uintptr_t, std::size_t> live_blocks;  // address -> size
  for (std::size_t i = 0; i <= peak_event; ++i) {
    const TraceEvent& e = events[i];
    switch (e.kind) {
      case EventKind::kSegmentAlloc:
      case EventKind::kMap:
        ranges.add(e.address, e.address + e.size);
        break;
      case EventKind::kSegmentFree:
      case EventKind::kUnmap:
        ranges.remove(e.address, e.address + e.size);
        break;
      case EventKind::kAlloc: {
        std::size_t b = blocks.block_of_event[i];
        if (b != kNever &&
            (blocks.blocks[b].free_index == kNever || blocks.blocks[b].free_index > peak_event))
          live_blocks[e.address] = e.size;
        break;
      }
      default:
        break;
    }
  }
  ReservedBreakdown r;
  r.live_total = state.live_after[peak_event];
  for (const auto& [begin, end] : ranges.ranges()) {
    ++r.ranges;
    const std::size_t size = end - begin;
    std::size_t count = 0, largest_block = 0, free_bytes = 0;
    std::uintptr_t cursor = begin;  // end of the live bytes seen so far in this range
    for (auto it = live_blocks.lower_bound(begin); it != live_blocks.end() && it->first < end;
         ++it) {
      ++count;
      largest_block = std::max(largest_block, it->second);
      if (it->first > cursor) {
        free_bytes += it->first - cursor;
        r.largest_free_gap = std::max<std::size_t>(r.largest_free_gap, it->first - cursor);
      }
      cursor =
          std::max<std::uintptr_t>(cursor, std::min<std::uintptr_t>(end, it->first + it->second));
    }
    if (end > cursor) {
      free_bytes += end - cursor;
      r.largest_free_gap = std::max<std::size_t>(r.largest_free_gap, end - cursor);
    }
    r.reserved += size;
    r.unused += free_bytes;
    if (count == 0) {
      r.in_empty_ranges += size;
      bool reused = false;
      for (std::size_t i = peak_event + 1; i < events.size() && !reused; ++i)
        reused = events[i].kind == EventKind::kAlloc && events[i].address >= begin &&
                 events[i].address < end;
      if (!reused) r.dead_cached += size;
    } else if (count == 1 && 2 * largest_block < size) {
      r.oversize += free_bytes;
    } else {
      r.fragmented += free_bytes;
    }
  }
  r.live = r.reserved - r.unused;
  a.reserved = r;
}

}  // namespace modelmem::trace::detail
