// MindSpore's memory tracker blocks (memory_block.csv) as a trace (see from_tracker in trace.hpp;
// the file format in plan/mindspore_tracker.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "modelmem/core/checked.hpp"
#include "modelmem/trace/trace.hpp"

namespace modelmem::trace {

namespace {

constexpr std::uint64_t kNsPerTick = 1000;  // one tracker tick shown as 1 us

struct Point {
  std::int64_t stamp;
  bool alloc;
  std::size_t block;
};

}  // namespace

Trace from_tracker(const plan::TrackerFile& file) {
  Trace t;
  t.name = file.name;
  t.format = "mindspore";
  t.skipped_lines = file.skipped_lines;
  t.warnings = file.warnings;
  t.warnings.push_back(fmt::format(
      "{}: MindSpore's memory tracker counts its operations (allocations, frees, task launches), "
      "not time: one tick is shown as 1 us, and durations and rates count ticks",
      file.name));

  std::vector<Point> points;
  points.reserve(2 * file.blocks.size());
  std::uintptr_t top = 0;  // above every recorded block: where blocks without an address go
  for (std::size_t i = 0; i < file.blocks.size(); ++i) {
    const plan::TrackerBlock& b = file.blocks[i];
    points.push_back({b.start, true, i});
    if (b.end) points.push_back({*b.end, false, i});
    if (b.address) top = std::max(top, checked_add(*b.address, b.size, "block end address"));
  }
  // Stamp order; at one stamp the free first (the block is gone when the next one is made),
  // then file order.
  std::stable_sort(points.begin(), points.end(), [](const Point& x, const Point& y) {
    if (x.stamp != y.stamp) return x.stamp < y.stamp;
    return !x.alloc && y.alloc;
  });

  top = (top + 0xfffff) & ~std::uintptr_t{0xfffff};
  if (top == 0) top = std::uintptr_t{1} << 32;
  std::map<std::uintptr_t, std::size_t> live;  // address -> block
  std::vector<std::uintptr_t> address_of(file.blocks.size(), 0);
  std::size_t given = 0, without = 0;
  t.events.reserve(points.size());
  for (const Point& p : points) {
    const plan::TrackerBlock& b = file.blocks[p.block];
    TraceEvent e;
    e.time_ns = checked_mul(static_cast<std::uint64_t>(p.stamp), kNsPerTick, "time stamp");
    e.size = b.size;
    e.stream = static_cast<alloc::Stream>(b.stream);
    e.line = b.line;
    if (p.alloc) {
      std::uintptr_t a = b.address.value_or(0);
      if (a == 0 || live.count(a) > 0) {
        ++(a == 0 ? without : given);
        a = top;
        top = checked_add(top, (b.size + 0xfff) & ~std::size_t{0xfff}, "block address");
      }
      address_of[p.block] = a;
      live[a] = p.block;
      e.kind = alloc::EventKind::kAlloc;
      e.label = !b.node.empty() ? b.node : b.type;
    } else {
      e.kind = alloc::EventKind::kFree;
      live.erase(address_of[p.block]);
    }
    e.address = address_of[p.block];
    t.events.push_back(std::move(e));
  }
  if (given > 0)
    t.warnings.push_back(fmt::format(
        "{}: {} blocks at an address a live block still held were given addresses of their own",
        file.name, given));
  if (without > 0 && without < file.blocks.size())
    t.warnings.push_back(fmt::format("{}: {} blocks without a device_addr were given addresses",
                                     file.name, without));
  return t;
}

}  // namespace modelmem::trace
