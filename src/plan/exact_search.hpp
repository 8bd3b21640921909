// Internal: the branch-and-bound search behind the exact solver, on one time-connected part of a
// problem. Not a public header.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <unordered_map>
#include <vector>

#include "modelmem/plan/problem.hpp"

namespace modelmem::plan::detail {

/// Shared stop condition of one solve() call: a deadline, an optional node limit and an optional
/// work limit. Work is nodes weighted by the size of the part searched (a node's cost grows with
/// it), so that a work limit stands for about the same time on every problem. Each attempt may end
/// sooner, at its own time or at its own amount of work.
class SearchBudget {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::uint64_t kNoEnd = std::numeric_limits<std::uint64_t>::max();
  SearchBudget(Clock::time_point deadline, std::uint64_t node_limit, std::uint64_t work_limit,
               std::function<void()> heartbeat)
      : deadline_(deadline),
        node_limit_(node_limit),
        work_limit_(work_limit),
        heartbeat_(std::move(heartbeat)) {}

  /// Counts one node; false once the budget is spent (and from then on).
  bool tick() {
    if (stopped_) return false;
    ++nodes_;
    work_ += weight_;
    if (counted_out() || work_ >= attempt_work_end_) return stop();
    if ((nodes_ & 15u) == 0) {  // a node costs microseconds: the clock read is cheap here
      auto now = Clock::now();
      if (now >= deadline_ || now >= attempt_deadline_) return stop();
      if (heartbeat_ && now >= next_heartbeat_) {
        next_heartbeat_ = now + std::chrono::milliseconds(250);
        heartbeat_();
      }
    }
    return true;
  }
  bool stopped() const noexcept { return stopped_; }
  /// Starts an attempt on a part of `weight` buffers that may run until `until` (clipped to the
  /// overall deadline) and until the work done reaches `work_end`.
  void begin_attempt(Clock::time_point until, std::size_t weight, std::uint64_t work_end = kNoEnd) {
    attempt_deadline_ = until;
    attempt_work_end_ = work_end;
    weight_ = std::max<std::uint64_t>(weight, 1);
    stopped_ = counted_out();
  }
  bool out_of_time() const { return Clock::now() >= deadline_ || counted_out(); }
  /// The node limit or the work limit is reached (a note says "node limit" for both).
  bool counted_out() const {
    return (node_limit_ != 0 && nodes_ >= node_limit_) ||
           (work_limit_ != 0 && work_ >= work_limit_);
  }
  std::uint64_t nodes() const noexcept { return nodes_; }
  std::uint64_t work() const noexcept { return work_; }
  Clock::time_point deadline() const noexcept { return deadline_; }

 private:
  bool stop() {
    stopped_ = true;
    return false;
  }
  Clock::time_point deadline_;
  Clock::time_point attempt_deadline_ = Clock::time_point::max();
  Clock::time_point next_heartbeat_{};
  std::uint64_t node_limit_;
  std::uint64_t work_limit_;
  std::uint64_t attempt_work_end_ = kNoEnd;
  std::uint64_t weight_ = 1;
  std::uint64_t nodes_ = 0;
  std::uint64_t work_ = 0;
  bool stopped_ = false;
  std::function<void()> heartbeat_;
};

enum class Outcome { kFound, kInfeasible, kStopped };

/// One time-connected part of a problem (buffers given by index into Problem::buffers), with the
/// time axis compressed into sections between consecutive distinct start/end points.
class ComponentSearch {
 public:
  ComponentSearch(const Problem& problem, std::vector<std::size_t> members, bool memoize);

  /// Decides whether the part fits under `capacity`; on kFound, `offsets` (one per member, in
  /// member order) holds a plan within it.
  Outcome decide(std::size_t capacity, SearchBudget& budget, std::vector<std::size_t>& offsets);

  const std::vector<std::size_t>& members() const noexcept { return members_; }
  std::size_t lower_bound() const noexcept { return lower_bound_; }
  /// Every canonical arena is a multiple of this (gcd of sizes and alignments).
  std::size_t unit() const noexcept { return unit_; }

 private:
  struct FailKey {
    std::uint64_t a, b;
    bool operator==(const FailKey&) const = default;
  };
  struct FailKeyHash {
    std::size_t operator()(const FailKey& k) const noexcept {
      return static_cast<std::size_t>(k.a ^ (k.b * 0x9e3779b97f4a7c15ULL));
    }
  };

  bool search(int depth, int first, int last);
  bool halted();
  void set_branching_order(int restart);
  bool explore(int depth, int first, int last);
  bool tighten_floors();
  bool propagate_compulsory_parts();
  std::size_t align_up(std::size_t value, std::size_t alignment) const;
  void remember_failure(const FailKey& key);
  void place(int b, std::size_t offset);
  void unplace(int b);
  bool can_raise(int first, int last, std::size_t level) const;
  void raise(int first, int last, std::size_t level);
  void undo_floors(std::size_t mark);
  std::size_t next_aligned_level(int first, int last, std::size_t level, std::size_t ceiling) const;
  void set_floor(int s, std::size_t value);

  std::vector<std::size_t> members_;
  int n_ = 0;
  int sections_ = 0;
  std::vector<std::size_t> size_, align_;
  std::vector<int> lo_, hi_;                 // section span [lo, hi)
  std::vector<std::vector<int>> starts_at_;  // by first section, in branching order
  std::vector<std::uint64_t> group_;         // identical buffers share a group key
  std::vector<std::uint64_t> zobrist_;
  std::size_t lower_bound_ = 0;
  std::size_t unit_ = 1;
  bool any_alignment_ = false;
  bool memoize_ = true;
  bool restarts_ = true;
  bool zero_slack_only_ = false;  // tight means no slack, or slack below the least waste
  bool fewest_first_ = false;
  int tight_order_ = 0;  // covering buffers: section order, larger, longer, or larger area first //
                         // tight section: the one with fewest candidates, or the leftmost
  std::uint64_t restart_nodes_ = 0, restart_limit_ = 0;

  // Search state.
  std::size_t capacity_ = 0;
  SearchBudget* budget_ = nullptr;
  std::vector<std::size_t> floor_, remaining_, offset_, effective_, candidate_;
  std::vector<char> placed_;
  std::vector<int> placed_stack_;
  std::vector<std::vector<int>> overlaps_;  // buffers live at the same time as each one
  int placed_count_ = 0;
  std::vector<std::pair<int, std::size_t>> trail_;
  std::deque<std::vector<int>> candidates_;  // per depth, reused
  std::uint64_t placed_hash_ = 0, floor_hash_ = 0;
  // Failed states: key -> the largest capacity at which the state was proven to fail (it then
  // fails at every smaller capacity too).
  std::unordered_map<FailKey, std::size_t, FailKeyHash> failed_;
};

}  // namespace modelmem::plan::detail
