// `modelmem replay`: a trace's allocations run through an allocator (trace/replay.hpp).
#include "modelmem/trace/replay.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "modelmem/core/error.hpp"

namespace modelmem::trace {

namespace {

using alloc::EventKind;

void touch(void* p, std::size_t size) {
  auto* bytes = static_cast<volatile unsigned char*>(p);
  for (std::size_t off = 0; off < size; off += 4096) bytes[off] = 1;
  bytes[size - 1] = 1;
}

}  // namespace

void check_repeat(std::size_t repeat, std::size_t blocks) {
  if (repeat == 0 || repeat > ReplayOptions::kMaxRepeat)
    throw InvalidInput(fmt::format("repeat {} is out of range: from 1 to {} replays", repeat,
                                   ReplayOptions::kMaxRepeat));
  if (blocks > 0 && repeat > ReplayOptions::kMaxReplayedBlocks / blocks)
    throw InvalidInput(fmt::format(
        "repeat {} of a trace of {} blocks replays more than {} blocks: at most {} replays of "
        "this trace",
        repeat, blocks, ReplayOptions::kMaxReplayedBlocks,
        std::max<std::size_t>(1, ReplayOptions::kMaxReplayedBlocks / blocks)));
}

ReplayResult replay(const Trace& trace, alloc::Allocator& allocator, const ReplayOptions& options) {
  const Blocks blocks = match_blocks(trace);
  check_repeat(options.repeat, blocks.blocks.size());
  ReplayResult r;
  r.description = allocator.describe();
  std::vector<void*> pointer(blocks.blocks.size(), nullptr);
  std::vector<std::uint64_t> alloc_ns(blocks.blocks.size(), 0);
  std::vector<double> pair_ns;
  pair_ns.reserve(blocks.blocks.size() * options.repeat);
  std::size_t live = 0;
  std::size_t failed_frees = 0;
  std::vector<std::size_t> closed_by(trace.events.size(), kNever);
  for (std::size_t k = 0; k < blocks.blocks.size(); ++k) {
    std::size_t f = blocks.blocks[k].free_index;
    if (f != kNever && trace.events[f].kind == EventKind::kAlloc) closed_by[f] = k;
  }
  for (std::size_t rep = 0; rep < options.repeat; ++rep) {
    for (std::size_t i = 0; i < trace.events.size(); ++i) {
      const TraceEvent& e = trace.events[i];
      if (e.kind == EventKind::kMark) {
        if (e.label == "step_begin") allocator.begin_step();
        if (e.label == "step_end") allocator.end_step();
        continue;
      }
      if (e.kind != EventKind::kAlloc && e.kind != EventKind::kFree) continue;
      std::size_t b = blocks.block_of_event[i];
      if (e.kind == EventKind::kFree && b == kNever) {
        if (rep == 0) ++r.skipped_frees;
        continue;
      }
      // An alloc may first close a block whose free was lost (see match_blocks).
      if (e.kind == EventKind::kAlloc) {
        if (std::size_t k = closed_by[i]; k != kNever && pointer[k] != nullptr) {
          std::uint64_t t0 = alloc::now_ns();
          allocator.deallocate(pointer[k]);
          pair_ns.push_back(static_cast<double>(alloc_ns[k] + alloc::now_ns() - t0));
          pointer[k] = nullptr;
          live -= blocks.blocks[k].size;
          ++r.frees;
        }
        const std::size_t size = blocks.blocks[b].size;
        void* p = nullptr;
        std::uint64_t t0 = alloc::now_ns();
        try {
          p = allocator.allocate(size, e.stream);
        } catch (const OutOfMemory&) {
          ++r.ooms;
          continue;
        }
        alloc_ns[b] = alloc::now_ns() - t0;
        ++r.allocs;
        pointer[b] = p;
        if (options.touch) touch(p, size);
        live += size;
        if (live > r.peak_live) {
          r.peak_live = live;
          r.fragmentation_at_peak = allocator.stats().fragmentation();
        }
        continue;
      }
      if (pointer[b] == nullptr) {  // its allocation failed
        ++failed_frees;
        continue;
      }
      std::uint64_t t0 = alloc::now_ns();
      allocator.deallocate(pointer[b]);
      pair_ns.push_back(static_cast<double>(alloc_ns[b] + alloc::now_ns() - t0));
      pointer[b] = nullptr;
      live -= blocks.blocks[b].size;
      ++r.frees;
    }
    // Blocks the trace never frees: return them so the next replay starts clean.
    for (std::size_t b = 0; b < pointer.size(); ++b)
      if (pointer[b] != nullptr) {
        allocator.deallocate(pointer[b]);
        pointer[b] = nullptr;
        live -= blocks.blocks[b].size;
      }
  }
  alloc::Stats s = allocator.stats();
  r.peak_allocated = static_cast<std::size_t>(s.allocated_bytes.all.peak);
  r.peak_reserved = static_cast<std::size_t>(s.reserved_bytes.all.peak);
  r.device_calls = s.num_device_alloc + s.num_device_free;
  if (!pair_ns.empty()) {
    double sum = 0;
    for (double v : pair_ns) sum += v;
    r.mean_ns = sum / static_cast<double>(pair_ns.size());
    std::size_t k = (pair_ns.size() * 99) / 100;
    if (k >= pair_ns.size()) k = pair_ns.size() - 1;
    std::nth_element(pair_ns.begin(), pair_ns.begin() + static_cast<std::ptrdiff_t>(k),
                     pair_ns.end());
    r.p99_ns = pair_ns[k];
  }
  if (r.skipped_frees > 0)
    r.notes.push_back(fmt::format("{} free(s) of blocks the trace never allocated were skipped",
                                  r.skipped_frees));
  if (failed_frees > 0)
    r.notes.push_back(
        fmt::format("{} free(s) of blocks whose allocation failed were skipped", failed_frees));
  return r;
}

}  // namespace modelmem::trace
