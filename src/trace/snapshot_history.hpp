// A snapshot's recorded events, and the check of that history against itself (snapshot.cpp's
// reader builds the events; snapshot_history.cpp counts and names what cannot be true).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace modelmem::trace::detail {

enum class Action {
  kAlloc,
  kFreeRequested,
  kFreeCompleted,
  kFree,
  kSegAlloc,
  kSegFree,
  kMap,
  kUnmap,
  kOom,
  kMark
};

/// One entry of device_traces (or a step mark made from an annotation).
struct Entry {
  Action action = Action::kAlloc;
  std::uint64_t addr = 0;
  std::uint64_t size = 0;
  std::uint64_t stream = 0;
  std::optional<double> time_us;
  std::uint32_t device = 0;
  std::string label;  // site (alloc) or mark label
  /// Its index in device_traces[device], for the notes; kNoIndex for marks made here.
  std::uint64_t index = kNoIndex;
  static constexpr std::uint64_t kNoIndex = std::numeric_limits<std::uint64_t>::max();
};

/// A segment or block live at some time.
struct Live {
  std::uint64_t size = 0;
  std::uint32_t device = 0;
  std::uint64_t stream = 0;
  std::string site;
};

/// Counts what a snapshot's history holds that cannot be true, each kind named by its first
/// occurrence: times out of order, ranges wrapping past 2^64, double frees, blocks over a live
/// block, and most of many events at one time. `notes()` gives one line per kind found.
class HistoryCheck {
 public:
  explicit HistoryCheck(const std::string& name) : name_(name) {}

  /// True when address + size passes 2^64.
  static bool wraps(std::uint64_t address, std::uint64_t size);
  /// Counts a range that wraps (dropped by the caller), `where` naming it.
  void wrapped(const std::string& where, std::uint64_t address, std::uint64_t size);
  /// Counts a time read after a later one on the same device (`latest` is updated).
  void timed(const Entry& e, std::optional<double>& latest);
  /// Drops the wrapping ranges from a state built from the file, counting them.
  void drop_wrapping(std::map<std::uint64_t, Live>& state, const char* what);
  /// Walks the time-sorted entries from the blocks live before them: drops double frees and
  /// the blocks (with their frees) whose range wraps; counts blocks placed over a live one.
  void walk(const std::map<std::uint64_t, Live>& before, std::vector<Entry>& entries);
  /// Counts the longest run of events at one time (after sorting).
  void same_time(const std::vector<Entry>& entries);
  /// One line per kind of inconsistency found, in a fixed order.
  std::vector<std::string> notes() const;

 private:
  static std::string where(const Entry& e);

  const std::string& name_;
  std::size_t out_of_order_ = 0, wrapped_ = 0, double_frees_ = 0, overlaps_ = 0;
  std::size_t same_time_run_ = 0, events_ = 0;
  double same_time_at_ = 0;
  std::string first_out_of_order_, first_wrapped_, first_double_, first_overlap_;
};

}  // namespace modelmem::trace::detail
