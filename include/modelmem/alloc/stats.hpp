// The statistics every strategy keeps, in PyTorch's vocabulary (`allocated_bytes.all.current`,
// `reserved_bytes.large.peak`, `num_alloc_retries`, ...), and the helpers that keep them exact:
// count a block handed out or returned, a segment obtained or given back, reset every peak,
// merge two strategies' statistics. Every strategy keeps its numbers with these helpers and
// nothing else. Plain values: a Stats is a snapshot, copied out under the allocator's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace modelmem::alloc {

/// One statistic, as PyTorch reports it.
struct Counter {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t allocated = 0;  ///< total ever added
  std::int64_t freed = 0;      ///< total ever removed

  void add(std::int64_t n) noexcept {
    current += n;
    allocated += n;
    if (current > peak) peak = current;
  }
  void sub(std::int64_t n) noexcept {
    current -= n;
    freed += n;
  }
  void reset_peak() noexcept { peak = current; }
};

enum class PoolKind : int { kAll = 0, kSmall = 1, kLarge = 2 };

/// PyTorch's cut between the small and the large pool (requests of at most 1 MiB are small);
/// strategies without pools of their own use it to split their statistics the same way.
inline constexpr std::size_t kSmallRequestBytes = std::size_t{1} << 20;
inline PoolKind pool_of_request(std::size_t bytes) noexcept {
  return bytes <= kSmallRequestBytes ? PoolKind::kSmall : PoolKind::kLarge;
}

/// A counter for all pools together and for the small and large pools separately.
struct CounterSet {
  Counter all, small, large;
  Counter& operator[](PoolKind k) noexcept {
    return k == PoolKind::kSmall ? small : k == PoolKind::kLarge ? large : all;
  }
  const Counter& operator[](PoolKind k) const noexcept {
    return k == PoolKind::kSmall ? small : k == PoolKind::kLarge ? large : all;
  }
  /// Adds to the total and to one pool's counter (kSmall or kLarge).
  void add(PoolKind k, std::int64_t n) noexcept {
    all.add(n);
    (*this)[k].add(n);
  }
  void sub(PoolKind k, std::int64_t n) noexcept {
    all.sub(n);
    (*this)[k].sub(n);
  }
  /// add() for a positive `delta`, sub() for a negative one.
  void move(PoolKind k, std::int64_t delta) noexcept {
    if (delta >= 0)
      add(k, delta);
    else
      sub(k, -delta);
  }
  void reset_peak() noexcept {
    all.reset_peak();
    small.reset_peak();
    large.reset_peak();
  }
  /// Adds another set's values field by field (peaks too: the peak of a sum is at most the sum
  /// of the peaks, the bound a strategy made of two parts reports).
  void merge(const CounterSet& other) noexcept {
    for (PoolKind k : {PoolKind::kAll, PoolKind::kSmall, PoolKind::kLarge}) {
      Counter& into = (*this)[k];
      const Counter& from = other[k];
      into.current += from.current;
      into.peak += from.peak;
      into.allocated += from.allocated;
      into.freed += from.freed;
    }
  }
};

/// What the planned arena waits for while no plan serves its steps (PlannedStats::waiting), in
/// the order of its path to a first plan; describe_no_plan() says it in words.
enum class PlanWait : std::uint8_t {
  kNone,           ///< a plan is held
  kNoMark,         ///< planned_steps:marked, and no step marked yet
  kNoPeriod,       ///< automatic steps: no repeating step found yet
  kWarmup,         ///< marked steps: within the warm-up steps
  kFirstStep,      ///< automatic steps: the period is found, the first whole step not ended
  kWatching,       ///< the step being watched (planned when it ends) has not ended
  kNothingToPlan,  ///< the steps so far held no request of at least min_size
  kPlanning,       ///< the plan runs past solve_time_limit on the worker thread
  kRefused,        ///< the plans made were refused (plans_refused); tried again at next_try
};

/// What the planned arena did (Stats::planned), for reports (MODELMEM_REPORT), the monitor
/// and tests.
struct PlannedStats {
  std::uint64_t steps = 0;             ///< steps completed
  std::uint64_t plans_made = 0;        ///< step plans computed (first plans and re-plans)
  std::uint64_t plans_kept = 0;        ///< plans held now
  std::uint64_t hits = 0;              ///< requests served from the arena
  std::uint64_t misses = 0;            ///< requests in a planned step that did not match
  std::uint64_t occupied = 0;          ///< of the misses: the slot overlapped a live block
  std::uint64_t unplanned = 0;         ///< requests outside any plan by design (no step, warm-up,
                                       ///< blocks that outlive their step)
  std::uint64_t mismatched_steps = 0;  ///< steps with at least one miss, or fewer requests
  // Page faults the kernel counted for the process (all threads) from the start to the end of
  // each step the plan served whole (no miss), on a device the CPU touches (host memory); 0
  // elsewhere (device memory, the sizing layer's simulated devices).
  std::uint64_t served_steps = 0;       ///< steps a plan served whole, faults counted
  std::uint64_t faultless_steps = 0;    ///< of them: steps with no page fault at all
  std::uint64_t served_step_minor = 0;  ///< minor faults in those steps, summed
  std::uint64_t served_step_major = 0;  ///< major faults in those steps, summed
  std::uint64_t served_step_max = 0;    ///< the most faults (minor + major) in one of them
  std::uint64_t replans = 0;            ///< plans made because of mismatching steps
  std::uint64_t period = 0;             ///< detected period in requests (auto_steps), 0 if none
  std::size_t arena_size = 0;           ///< bytes of the current arena
  std::size_t arena_allocations = 0;    ///< arenas obtained from the device so far
  bool arena_huge_pages = false;        ///< the device took the large-page hint for the arena
  std::size_t hit_bytes = 0;            ///< bytes served from the arena (total)
  std::size_t peak_live = 0;            ///< peak bytes live (arena and fallback, requested sizes)
  std::uint64_t plans_refused = 0;      ///< plans not taken: arena + blocks outliving the step
                                        ///< would hold more than the fallback alone did
  std::uint64_t plans_deferred = 0;     ///< plans that ran past solve_time_limit at their step
                                        ///< mark and were finished on the worker thread
  std::uint64_t deferred_ms = 0;        ///< total time from those step marks to the step mark
                                        ///< that took their plan
  std::uintptr_t arena_address = 0;     ///< the current arena's first byte, 0 before a plan
  bool huge_pages_asked = false;        ///< planned_huge_pages was on
  PlanWait waiting = PlanWait::kNone;   ///< why no plan serves the steps (kNone: one does)
  std::uint64_t next_try = 0;           ///< kRefused: the step at whose end it plans again
  // The options the words of describe_no_plan() name.
  std::uint64_t warmup_steps = 0;  ///< planned_warmup_steps
  std::size_t min_size = 0;        ///< planned_min_kb, in bytes
  std::uint64_t solve_ms = 0;      ///< planned_solve_ms
};

/// Why no plan serves the steps, in words, for the reports (MODELMEM_REPORT's `no plan` line,
/// Python's report()): what the arena waits for and what would change it. "" while a plan is
/// held. Built only when asked: the statistics themselves stay plain numbers.
std::string describe_no_plan(const PlannedStats& stats);

/// The page faults of the steps a plan served whole, in words, for the same reports ("N of M
/// steps served by the plan had no page fault; ..."); "" before any such step was counted.
std::string describe_step_faults(const PlannedStats& stats);

/// Statistics with PyTorch's names where they match (torch.cuda.memory_stats()).
struct Stats {
  CounterSet allocated_bytes;       ///< bytes in blocks handed to callers (after rounding)
  CounterSet reserved_bytes;        ///< bytes obtained from the device
  CounterSet active_bytes;          ///< allocated, plus freed blocks not yet reusable (streams)
  CounterSet inactive_split_bytes;  ///< free bytes inside split segments
  CounterSet requested_bytes;       ///< bytes callers asked for (before rounding)
  CounterSet allocation;            ///< number of blocks handed out
  CounterSet segment;               ///< number of device segments
  CounterSet active;                ///< number of active blocks
  CounterSet inactive_split;        ///< number of free blocks inside split segments
  std::int64_t num_alloc_retries = 0;
  std::int64_t num_ooms = 0;
  std::int64_t num_device_alloc = 0;
  std::int64_t num_device_free = 0;
  std::size_t largest_free_block = 0;  ///< largest block servable without asking the device
  std::vector<std::string> warnings;   ///< e.g. the expandable-segments fallback notice
  /// The planned arena's own numbers, wherever it sits in the stack (behind a quota, as a
  /// router's main stack); empty for stacks without one.
  std::optional<PlannedStats> planned;

  /// Calls `f(CounterSet&)` for each of the nine counter sets above.
  template <typename F>
  void for_each_counter(F&& f) {
    for (CounterSet* c : {&allocated_bytes, &reserved_bytes, &active_bytes, &inactive_split_bytes,
                          &requested_bytes, &allocation, &segment, &active, &inactive_split})
      f(*c);
  }

  /// Every counter's peak becomes its current value (Allocator::reset_peak).
  void reset_peaks() noexcept {
    for_each_counter([](CounterSet& c) { c.reset_peak(); });
  }

  /// Adds the statistics of another part of the same strategy (the planned arena's own
  /// counters to its fallback's): counter sets, device calls, retries and out-of-memory
  /// counts are summed, the largest free block is the larger one, warnings are appended.
  void merge(const Stats& other) {
    CounterSet* into[] = {&allocated_bytes, &reserved_bytes, &active_bytes, &inactive_split_bytes,
                          &requested_bytes, &allocation,     &segment,      &active,
                          &inactive_split};
    const CounterSet* from[] = {&other.allocated_bytes, &other.reserved_bytes,
                                &other.active_bytes,    &other.inactive_split_bytes,
                                &other.requested_bytes, &other.allocation,
                                &other.segment,         &other.active,
                                &other.inactive_split};
    for (std::size_t i = 0; i < 9; ++i) into[i]->merge(*from[i]);
    num_alloc_retries += other.num_alloc_retries;
    num_ooms += other.num_ooms;
    num_device_alloc += other.num_device_alloc;
    num_device_free += other.num_device_free;
    if (other.largest_free_block > largest_free_block)
      largest_free_block = other.largest_free_block;
    warnings.insert(warnings.end(), other.warnings.begin(), other.warnings.end());
    if (!planned) planned = other.planned;
  }

  /// The caller's side of a block handed out or taken back: allocated_bytes by `bytes`,
  /// requested_bytes by `requested`, the allocation count by one.
  void count_handed_out(PoolKind k, std::size_t bytes, std::size_t requested,
                        bool handed_out) noexcept {
    const auto b = static_cast<std::int64_t>(bytes);
    const auto r = static_cast<std::int64_t>(requested);
    allocated_bytes.move(k, handed_out ? b : -b);
    requested_bytes.move(k, handed_out ? r : -r);
    allocation.move(k, handed_out ? 1 : -1);
  }

  /// A block becomes active (handed out) or stops being active (reusable again; for a block
  /// still used by other streams, later than its free): active_bytes by `bytes`, active by one.
  void count_active(PoolKind k, std::size_t bytes, bool activated) noexcept {
    const auto b = static_cast<std::int64_t>(bytes);
    active_bytes.move(k, activated ? b : -b);
    active.move(k, activated ? 1 : -1);
  }

  /// A block handed to a caller (`handed_out`) or taken back, in pool `k`: moves
  /// allocated_bytes and active_bytes by `bytes`, requested_bytes by `requested`, and the
  /// allocation and active counts by one. Strategies whose blocks are not split inside
  /// segments (static, system, direct, planned) count every block this way.
  void count_block(PoolKind k, std::size_t bytes, std::size_t requested, bool handed_out) noexcept {
    count_handed_out(k, bytes, requested, handed_out);
    count_active(k, bytes, handed_out);
  }

  /// A segment of `bytes` obtained from the device (`obtained`) or returned to it, in pool `k`:
  /// moves reserved_bytes by `bytes` and the segment count by one, and counts one device call.
  void count_segment(PoolKind k, std::size_t bytes, bool obtained) noexcept {
    const auto b = static_cast<std::int64_t>(bytes);
    if (obtained) {
      reserved_bytes.add(k, b);
      segment.add(k, 1);
      ++num_device_alloc;
    } else {
      reserved_bytes.sub(k, b);
      segment.sub(k, 1);
      ++num_device_free;
    }
  }

  /// 1 - largest_free_block / (reserved - allocated): 0 when all free memory is one block.
  double fragmentation() const noexcept {
    auto free_bytes = reserved_bytes.all.current - allocated_bytes.all.current;
    if (free_bytes <= 0) return 0.0;
    return 1.0 - static_cast<double>(largest_free_block) / static_cast<double>(free_bytes);
  }
};

}  // namespace modelmem::alloc
