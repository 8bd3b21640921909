// The planned arena: a strategy for workloads that repeat themselves (one inference after
// another). It watches one step (marked by begin_step()/end_step(), or found automatically from
// the repeating sequence of request sizes), plans that step's blocks statically into one arena,
// allocates the arena once (pre-faulted) and then serves each request of later steps by its
// position and size in the step. Everything that does not fit the plan (a new size, another
// order, extra requests, blocks that outlive their step) goes to a fallback allocator.
//
// Safety does not depend on the plan being followed: before a planned slot is handed out, the
// arena checks that no live arena block overlaps the slot's address range, and falls back when
// one does. So arena memory is never handed out twice, whatever the order or thread interleaving.
//
// Thread-safe (one mutex; the fallback is called under it). allocate/deallocate are O(log n) in
// the number of live arena blocks; a step mark may wait for the planner, at most
// solve_time_limit (the rest of the planning is deferred to later step marks).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "modelmem/alloc/allocator.hpp"
#include "modelmem/device/device.hpp"
#include "modelmem/plan/problem.hpp"

namespace modelmem::alloc {

struct PlannedOptions {
  /// Serves everything the plan does not (required). Must be thread-safe.
  std::shared_ptr<Allocator> fallback;
  /// Where the arena comes from (required).
  device::DevicePtr device;
  /// Requests below this go to the fallback and are not part of any step.
  std::size_t min_size = 0;
  /// Alignment of every arena block (power of two, >= 16). Sizes are rounded up to it.
  std::size_t alignment = 256;
  /// Marked steps served entirely by the fallback before the first one is planned (the first
  /// inference of a framework often allocates differently).
  std::size_t warmup_steps = 1;
  /// Consecutive mismatching steps after which the latest one is planned (re-plan / new shape).
  std::size_t mismatch_limit = 2;
  /// Plans kept at once (one per input shape); the least recently used one is dropped.
  std::size_t max_plans = 4;
  /// Find step boundaries from the repeating pattern of request sizes (plan::detect_period)
  /// until the program marks a step: its first begin_step() or end_step() turns this off, drops
  /// the plans of detected steps and learns the marked steps as if it had been false (warm-up
  /// included).
  bool auto_steps = false;
  /// Shortest period accepted by the automatic detection (in requests).
  std::size_t min_period = 4;
  /// Requests remembered for the automatic detection (bounds the longest period found: half).
  std::size_t history = 8192;
  /// Requests seen before the first detection, so that short programs (a loop of 20 requests a
  /// step, run 10 times) are planned too.
  std::size_t first_detection = 64;
  /// Requests after which a period found earlier is checked once more: a short history cannot
  /// always tell a step from one layer repeated inside it. A different period found then
  /// replaces the first one and its plans.
  std::size_t min_history = 1024;
  /// Touch every page of the arena once when it is allocated (host memory only), so serving
  /// from it never faults.
  bool prefault = true;
  /// Ask the device to back the arena with large pages (host: transparent huge pages), before
  /// it is touched. The arena is touched whole anyway, so this costs at most the unused tail of
  /// its last 2 MiB page, and it spares the TLB: faster inference with large arenas (ResNet-50
  /// batch 8, an 86 MiB arena: docs/benchmarks.md, planned-arena).
  bool huge_pages = true;
  /// Solver used for a step plan (a name of plan::make_solver) and its time budget. "best"
  /// returns the best heuristic plan when the exact search runs out of time. The plan is made
  /// on a worker thread: the step mark that asks for it waits at most solve_time_limit; past
  /// that the step stays with the fallback and the plan is taken at the first step mark after
  /// it is ready (PlannedStats::plans_deferred). The solver's own search gets 80% of the limit.
  std::string solver = "best";
  std::chrono::duration<double> solve_time_limit = std::chrono::milliseconds(500);
  /// Replaces the solver when set (tests, callers with their own planner). Must return a plan
  /// valid for the problem; an invalid plan is discarded.
  std::function<plan::Plan(const plan::Problem&)> planner;
};

/// What the planned arena did, for reports (MODELMEM_REPORT) and tests.
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
  std::uint64_t replans = 0;           ///< plans made because of mismatching steps
  std::uint64_t period = 0;            ///< detected period in requests (auto_steps), 0 if none
  std::size_t arena_size = 0;          ///< bytes of the current arena
  std::size_t arena_allocations = 0;   ///< arenas obtained from the device so far
  bool arena_huge_pages = false;       ///< the device took the large-page hint for the arena
  std::size_t hit_bytes = 0;           ///< bytes served from the arena (total)
  std::size_t peak_live = 0;           ///< peak bytes live (arena and fallback, requested sizes)
  std::uint64_t plans_refused = 0;     ///< plans not taken: arena + blocks outliving the step
                                       ///< would hold more than the fallback alone did
  std::uint64_t plans_deferred = 0;    ///< plans that ran past solve_time_limit at their step
                                       ///< mark and were finished on the worker thread
  std::uint64_t deferred_ms = 0;       ///< total time from those step marks to the step mark
                                       ///< that took their plan
};

/// Called first on every planning worker thread (the LD_PRELOAD library marks the thread as its
/// own there, so the solver's memory does not come from the arena it plans). nullptr: none.
void set_planner_thread_hook(void (*hook)()) noexcept;

class PlannedAllocator : public Allocator {
 public:
  /// Throws InvalidInput when fallback or device is missing, alignment is not a power of two,
  /// or the solver is unknown.
  explicit PlannedAllocator(PlannedOptions options);
  ~PlannedAllocator() override;

  void* allocate(std::size_t size, Stream stream = 0) override;
  void deallocate(void* ptr) override;
  Stats stats() const override;
  void reset_peak() override;
  void trim() override;
  std::string describe() const override;
  /// A step begins (ends the open one, if any). Ignored when auto_steps is set.
  void begin_step() override;
  /// The open step ends; it may be planned now. Ignored when auto_steps is set.
  void end_step() override;

  PlannedStats planned_stats() const;
  /// Requested size of a live block handed out by this allocator, 0 if it is not one.
  std::size_t block_size(const void* ptr) const;
  /// True when `ptr` lies inside an arena of this allocator (live or not).
  bool in_arena(const void* ptr) const;
  /// The current arena's address range ({nullptr, 0} before the first plan).
  std::pair<const void*, std::size_t> arena_range() const;
  const PlannedOptions& options() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace modelmem::alloc
