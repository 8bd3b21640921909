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
  /// Touch every page of the arena once when it is allocated, so serving from it never faults.
  /// Host memory only: on a device whose memory the CPU cannot write (Device::host_accessible:
  /// CUDA, Ascend, the sizing layer's address space) the arena is not touched.
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
  /// false: a step mark waits for its plan however long the solver takes, and the solver's
  /// search limit (solve_time_limit's 80%) is counted in search work, not on the clock
  /// (plan::SolveOptions::work_budget), so what is served never depends on the machine's speed
  /// or load. Replays and sizing set it (config::for_replay): a program spends far longer per step
  /// than a replay, so there a deferred plan is ready at the next step mark anyway.
  bool defer_plans = true;
  /// Replaces the solver when set (tests, callers with their own planner). Must return a plan
  /// valid for the problem; an invalid plan is discarded.
  std::function<plan::Plan(const plan::Problem&)> planner;
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

  /// Also in stats().planned, wherever the arena sits in a stack.
  PlannedStats planned_stats() const;
  /// True when `ptr` lies inside an arena of this allocator (live or not).
  bool in_arena(const void* ptr) const;
  /// The current arena's address range ({nullptr, 0} before the first plan).
  std::pair<const void*, std::size_t> arena_range() const;
  const PlannedOptions& options() const noexcept;

 private:
  void* do_allocate(std::size_t size, Stream stream) override;
  void do_deallocate(void* ptr) override;
  Stats do_stats() const override;
  void do_reset_peak() override;
  void do_trim() override;
  std::string do_describe() const override;
  /// A step begins (ends the open one, if any); the first one turns auto_steps off.
  void do_begin_step() override;
  /// The open step ends; it may be planned now.
  void do_end_step() override;
  LiveBlock do_block(const void* ptr) const override;
  Allocator* do_upstream() const noexcept override;
  std::string do_check_invariants() const override;
  std::string do_check_local() const override;
  std::size_t do_invariant_size() const override;
  void do_set_listener(Listener* listener) noexcept override;

  friend struct InvariantProbe;  // src/alloc/invariant_probe.hpp: tests break a state
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace modelmem::alloc
