// What a published pool shows (snapshot_of) and what identifies this process in `modelmem
// info` / `top` (its start time, name and command line), for the publisher (publisher.cpp).
#include <charconv>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "modelmem/alloc/allocator.hpp"
#include "modelmem/monitor/publisher.hpp"
#include "modelmem/monitor/reader.hpp"

namespace modelmem::monitor {
namespace {

std::uint64_t nonnegative(std::int64_t v) {
  return v < 0 ? 0 : static_cast<std::uint64_t>(v);
}

}  // namespace

PoolSnapshot snapshot_of(const alloc::Stats& stats, const PoolInfo& info) {
  PoolSnapshot s;
  s.name = info.name;
  s.device = info.device.empty() ? "?" : info.device;
  s.strategy = info.strategy;
  s.budget = info.budget;
  s.reserved = nonnegative(stats.reserved_bytes.all.current);
  s.allocated = nonnegative(stats.allocated_bytes.all.current);
  s.peak_allocated = nonnegative(stats.allocated_bytes.all.peak);
  s.peak_reserved = nonnegative(stats.reserved_bytes.all.peak);
  s.requested = nonnegative(stats.requested_bytes.all.current);
  s.largest_free_block = stats.largest_free_block;
  // FRAG: the share of the pool's reserved memory that is free but outside its largest free
  // block, i.e. lost to a request the size of everything free. A pool with 8 % free in many
  // small pieces shows 0.08 at most, not 1 - largest / free (0.95 there: large for a pool that
  // wastes little).
  const std::uint64_t free_bytes = s.reserved > s.allocated ? s.reserved - s.allocated : 0;
  s.fragmentation = s.reserved == 0 || free_bytes <= s.largest_free_block
                        ? 0.0
                        : static_cast<double>(free_bytes - s.largest_free_block) /
                              static_cast<double>(s.reserved);
  s.oom_count = nonnegative(stats.num_ooms);
  s.alloc_retries = nonnegative(stats.num_alloc_retries);
  s.warning_count = stats.warnings.size();
  if (!stats.warnings.empty()) s.warning = stats.warnings.front();
  s.alloc_count = nonnegative(stats.allocation.all.allocated);
  s.alloc_bytes_total = nonnegative(stats.allocated_bytes.all.allocated);
  s.free_bytes_total = nonnegative(stats.allocated_bytes.all.freed);
  s.segments = nonnegative(stats.segment.all.current);
  if (stats.planned) {
    s.plan_hits = stats.planned->hits;
    s.plan_misses = stats.planned->misses;
  }
  return s;
}

std::uint64_t process_start_ticks(std::int64_t pid) noexcept {
  try {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(in, line)) return 0;
    // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    std::size_t close = line.rfind(')');
    if (close == std::string::npos) return 0;
    std::istringstream rest(line.substr(close + 1));
    std::string field;
    // Fields 3.. follow; the start time is field 22.
    for (int i = 3; i <= 22; ++i) {
      if (!(rest >> field)) return 0;
    }
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
    return ec == std::errc() ? v : 0;
  } catch (...) {
    return 0;
  }
}

std::string this_process_command() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!all.empty() && all.back() == '\0') all.pop_back();
  for (char& c : all)
    if (c == '\0') c = ' ';
  return all;
}

std::string this_process_name() {
  std::ifstream in("/proc/self/comm");
  std::string name;
  std::getline(in, name);
  return name.empty() ? "?" : name;
}

}  // namespace modelmem::monitor
