// A snapshot's history checked against itself (snapshot_history.hpp): what cannot be true is
// counted and named, as the CSV reader names what it skipped, and never crashes or skews a figure.
#include "snapshot_history.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <unordered_set>

namespace modelmem::trace::detail {

// A run of at least this many events at one time, and more than half of all, is reported.
constexpr std::size_t kSameTimeRun = 1000;

bool HistoryCheck::wraps(std::uint64_t address, std::uint64_t size) {
  std::uint64_t end = 0;
  return __builtin_add_overflow(address, size, &end);
}

std::string HistoryCheck::where(const Entry& e) {
  if (e.index == Entry::kNoIndex) return fmt::format("a mark on device {}", e.device);
  return fmt::format("device_traces[{}][{}]", e.device, e.index);
}

void HistoryCheck::wrapped(const std::string& where, std::uint64_t address, std::uint64_t size) {
  if (wrapped_++ == 0) first_wrapped_ = fmt::format("{}: 0x{:x} + {} B", where, address, size);
}

void HistoryCheck::timed(const Entry& e, std::optional<double>& latest) {
  if (!e.time_us) return;
  const double t = *e.time_us;
  if (latest && t < *latest && out_of_order_++ == 0)
    first_out_of_order_ = fmt::format("{} at {} us, after {} us", where(e), t, *latest);
  latest = std::max(latest.value_or(t), t);
}

void HistoryCheck::drop_wrapping(std::map<std::uint64_t, Live>& state, const char* what) {
  for (auto it = state.begin(); it != state.end();) {
    if (!wraps(it->first, it->second.size)) {
      ++it;
      continue;
    }
    wrapped(what, it->first, it->second.size);
    it = state.erase(it);
  }
}

void HistoryCheck::walk(const std::map<std::uint64_t, Live>& before, std::vector<Entry>& entries) {
  std::map<std::uint64_t, std::uint64_t> live;  // address -> end
  for (const auto& [addr, l] : before)
    if (!wraps(addr, l.size)) live[addr] = addr + l.size;
  std::unordered_set<std::uint64_t> freed, dropped;
  std::vector<Entry> kept;
  kept.reserve(entries.size());
  for (Entry& e : entries) {
    const bool segment = e.action == Action::kSegAlloc || e.action == Action::kMap ||
                         e.action == Action::kSegFree || e.action == Action::kUnmap;
    if (segment && wraps(e.addr, e.size)) {
      wrapped(where(e), e.addr, e.size);
      continue;
    }
    if (e.action == Action::kAlloc) {
      if (wraps(e.addr, e.size)) {
        wrapped(where(e), e.addr, e.size);
        dropped.insert(e.addr);
        continue;
      }
      dropped.erase(e.addr);
      freed.erase(e.addr);
      const std::uint64_t end = e.addr + e.size;
      auto next = live.lower_bound(e.addr);
      auto hit = live.end();
      if (next != live.end() && next->first < end)
        hit = next;
      else if (next != live.begin() && std::prev(next)->second > e.addr)
        hit = std::prev(next);
      // The same address again is a missing free, which the trace's block matching counts.
      if (hit != live.end() && hit->first != e.addr && overlaps_++ == 0)
        first_overlap_ =
            fmt::format("{}: 0x{:x} + {} B over the live block 0x{:x} + {} B", where(e), e.addr,
                        e.size, hit->first, hit->second - hit->first);
      live[e.addr] = end;
    } else if (e.action == Action::kFree) {
      if (dropped.count(e.addr) > 0) continue;  // the free of a dropped block
      if (live.erase(e.addr) == 0 && freed.count(e.addr) > 0) {
        if (double_frees_++ == 0) first_double_ = fmt::format("{}: 0x{:x}", where(e), e.addr);
        continue;
      }
      freed.insert(e.addr);
    }
    kept.push_back(std::move(e));
  }
  entries = std::move(kept);
}

void HistoryCheck::same_time(const std::vector<Entry>& entries) {
  std::size_t run = 0;
  events_ = entries.size();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    run = i > 0 && entries[i].time_us == entries[i - 1].time_us ? run + 1 : 1;
    if (run > same_time_run_) {
      same_time_run_ = run;
      same_time_at_ = entries[i].time_us.value_or(0);
    }
  }
}

std::vector<std::string> HistoryCheck::notes() const {
  std::vector<std::string> out;
  if (out_of_order_ > 0)
    out.push_back(fmt::format("{}: {} event(s) out of time order (first {}): sorted by time", name_,
                              out_of_order_, first_out_of_order_));
  if (same_time_run_ >= kSameTimeRun && same_time_run_ * 2 > events_)
    out.push_back(
        fmt::format("{}: {} of {} events share one time ({} us): rates and durations are not real",
                    name_, same_time_run_, events_, same_time_at_));
  if (double_frees_ > 0)
    out.push_back(fmt::format("{}: {} double free(s) (first {}): dropped", name_, double_frees_,
                              first_double_));
  if (overlaps_ > 0)
    out.push_back(fmt::format(
        "{}: {} block(s) overlapping a live block (first {}): kept; the addresses in this "
        "snapshot are not consistent",
        name_, overlaps_, first_overlap_));
  if (wrapped_ > 0)
    out.push_back(fmt::format("{}: {} address(es) whose range wraps past 2^64 (first {}): dropped",
                              name_, wrapped_, first_wrapped_));
  return out;
}

}  // namespace modelmem::trace::detail
