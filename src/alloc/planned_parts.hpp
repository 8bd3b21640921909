// Parts of the planned arena (planned_allocator.cpp): its records, and a step plan computed on
// a worker thread, so that a step mark waits for it at most planned_solve_ms and the rest of the
// planning is deferred to later step marks (the arena takes the plan at the first step mark
// after it is ready).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "modelmem/alloc/types.hpp"
#include "modelmem/plan/problem.hpp"

namespace modelmem::alloc::detail {

constexpr std::size_t kNoSlot = std::numeric_limits<std::size_t>::max();
constexpr std::size_t kNotLogged = std::numeric_limits<std::size_t>::max();
constexpr std::size_t kNoArena = std::numeric_limits<std::size_t>::max();

// One planned step: the request sizes in order and, for each, its arena offset (kNoSlot for
// blocks that outlived the step when it was recorded: those always go to the fallback).
struct StepPlan {
  std::vector<std::size_t> sizes;
  std::vector<std::size_t> offsets;
  std::size_t arena_size = 0;
  std::uint64_t last_used = 0;
};

// What happened to one request of the step being watched; the plan of a step is made from this.
struct LogEntry {
  std::size_t size = 0;  // rounded
  plan::Time alloc_t = 0;
  plan::Time free_t = -1;  // -1: still live
};

struct Arena {
  std::byte* base = nullptr;
  std::size_t size = 0;
  std::size_t live = 0;  // blocks handed out and not yet returned
};

struct Live {
  std::size_t requested = 0;
  std::size_t rounded = 0;
  Stream stream = 0;
  std::size_t log_index = kNotLogged;  // entry in the log of step `step_id`
  std::uint64_t step_id = 0;
  std::size_t arena = kNoArena;  // index into arenas_
  std::size_t offset = 0;
};

/// The planning problem of a step: its blocks freed within it (those that outlive it stay with
/// the fallback). `index_of` gets each buffer's position in `log`.
plan::Problem problem_of_step(const std::vector<LogEntry>& log, std::size_t alignment,
                              std::vector<std::size_t>& index_of);

/// The most bytes the step had live at once; `outliving` gets the bytes of blocks that outlive
/// it.
std::size_t step_peak(const std::vector<LogEntry>& log, std::size_t& outliving);

class PlanJob {
 public:
  using Planner = std::function<std::optional<plan::Plan>(const plan::Problem&)>;

  /// Starts `planner` on `problem` on a detached thread (which first calls the hook set by
  /// set_planner_thread_hook). The job owns everything the thread uses, so the thread may
  /// outlive the allocator that started it.
  static std::shared_ptr<PlanJob> start(plan::Problem problem, Planner planner);

  /// Waits up to `budget` for the plan; true when it is ready.
  bool wait_for(std::chrono::duration<double> budget);
  /// Waits until the plan is ready, however long that takes.
  void wait();
  bool ready();
  /// The plan (nullopt: the planner failed or found none). Only after ready().
  std::optional<plan::Plan> take();
  const plan::Problem& problem() const noexcept { return problem_; }
  /// The process that started the job: a forked child has no worker thread.
  int pid() const noexcept { return pid_; }

 private:
  plan::Problem problem_;
  Planner planner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::optional<plan::Plan> result_;
  int pid_ = 0;
};

}  // namespace modelmem::alloc::detail
