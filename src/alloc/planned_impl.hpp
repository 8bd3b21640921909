// The planned arena's state (PlannedAllocator::Impl): its arenas, plans, the step being watched
// and the live blocks, with the functions that plan (on a worker thread: planned_parts.hpp) and
// follow steps. Private to src/alloc: planned_allocator.cpp serves requests with it,
// planned_invariants.cpp checks it.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "modelmem/alloc/planned_allocator.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/host.hpp"
#include "modelmem/plan/period.hpp"
#include "modelmem/plan/solver.hpp"
#include "planned_parts.hpp"
#include "step_detector.hpp"

namespace modelmem::alloc {

using detail::Arena, detail::kNoArena, detail::kNoSlot, detail::kNotLogged, detail::Live,
    detail::LogEntry, detail::StepPlan;

struct PlannedAllocator::Impl {
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kPage = 4096;

  explicit Impl(PlannedOptions o)
      : options(std::move(o)),
        detector({options.auto_steps ? options.history : 0, options.min_period,
                  options.first_detection, options.min_history}) {
    count_faults = options.device && options.device->host_accessible();
  }

  PlannedOptions options;
  const PlannedAllocator* owner = nullptr;  // reports the arenas as segments
  mutable std::mutex mutex;

  // Arenas: the current one is arenas_[current_arena]; older ones stay until their last block
  // is returned (a bigger plan replaced them while blocks were still live).
  std::vector<Arena> arenas;
  std::size_t current_arena = kNoArena;
  std::map<std::size_t, std::size_t> arena_live;  // offset -> end, current arena only

  std::vector<StepPlan> plans;
  std::uint64_t use_clock = 0;

  // The step being watched.
  bool in_step = false;
  // The process's page faults when the open step began (count_faults: the arena is host memory).
  bool count_faults = false;
  device::PageFaults step_faults;
  std::uint64_t step_id = 0;
  std::uint64_t steps_begun = 0;
  std::vector<LogEntry> log;
  plan::Time clock = 0;
  std::size_t current_plan = kNoSlot;
  bool step_mismatch = false;
  std::size_t consecutive_mismatches = 0;

  // Automatic steps.
  detail::StepDetector detector;
  std::size_t big_live = 0;  // live blocks of at least min_size
  bool plan_next_step = false;
  std::uint64_t next_try = 0;  // after a refused plan: the step from which to try again
  std::uint64_t backoff = 1;   // steps to wait after the next refusal

  // A plan that ran past planned_solve_ms, finishing on a worker thread (planned_parts.hpp), with
  // the step it plans; taken at the first step mark after it is ready.
  std::shared_ptr<detail::PlanJob> job;
  std::vector<LogEntry> job_log;
  std::vector<std::size_t> job_index;
  bool job_replan = false;
  Clock::time_point job_deferred_at;

  std::unordered_map<const void*, Live> live;
  std::size_t live_bytes = 0;
  PlannedStats pstats;
  Stats own;  // arena counters (allocated/reserved/segments of the arena part)

  std::size_t round(std::size_t size) const {
    return checked_align_up(size, options.alignment, "planned arena request");
  }

  // ---------------------------------------------------------------- arena memory

  void release_arena(std::size_t index) {
    Arena& a = arenas[index];
    if (a.base == nullptr) return;
    owner->emit(EventKind::kSegmentFree, reinterpret_cast<std::uintptr_t>(a.base), a.size);
    options.device->deallocate(a.base, a.size);
    own.count_segment(PoolKind::kLarge, a.size, false);
    a.base = nullptr;
    a.size = 0;
  }

  // Makes the current arena at least `bytes` large. Returns false when the device refuses.
  // Whether the current arena holds `bytes` already (ensure_arena takes nothing new).
  bool arena_holds(std::size_t bytes) const {
    return bytes == 0 || (current_arena != kNoArena && arenas[current_arena].size >= bytes);
  }

  bool ensure_arena(std::size_t bytes) {
    if (arena_holds(bytes)) return true;
    std::size_t size = checked_align_up(bytes, kPage, "planned arena size");
    void* base = nullptr;
    try {
      base = options.device->allocate(size);
    } catch (const OutOfMemory&) {
      return false;
    }
    // Before the first touch: pages touched small stay small until khugepaged collapses them.
    const bool huge = options.huge_pages && options.device->prefer_large_pages(base, size);
    if (options.prefault && options.device->host_accessible()) {
      // One write per page: the kernel maps every page now rather than during a step.
      auto* bytes_ptr = static_cast<volatile unsigned char*>(base);
      for (std::size_t off = 0; off < size; off += kPage) bytes_ptr[off] = 0;
    }
    own.count_segment(PoolKind::kLarge, size, true);
    owner->emit(EventKind::kSegmentAlloc, reinterpret_cast<std::uintptr_t>(base), size);
    pstats.arena_allocations++;
    if (current_arena != kNoArena && arenas[current_arena].live == 0) release_arena(current_arena);
    // Reuse a released entry so the vector does not grow with every re-plan.
    std::size_t index = arenas.size();
    for (std::size_t i = 0; i < arenas.size(); ++i) {
      if (arenas[i].base == nullptr) {
        index = i;
        break;
      }
    }
    if (index == arenas.size()) arenas.emplace_back();
    arenas[index] = Arena{static_cast<std::byte*>(base), size, 0};
    current_arena = index;
    arena_live.clear();
    pstats.arena_size = size;
    pstats.arena_huge_pages = huge;
    return true;
  }

  // ---------------------------------------------------------------- planning

  // The solver (or the caller's planner) as the worker runs it: a valid plan or none. The
  // solver's own search stops at 80% of planned_solve_ms, so that a plan found in time is
  // usually taken at the step mark that asked for it. Where a step mark waits for its plan
  // (planned_defer:False, as replays and sizing run), that 80% is counted in search work
  // instead (plan::exact_work_for), so that the plan, and every figure a replay prints, is the
  // same at any load; the clock then stops the search only at twenty times the limit.
  detail::PlanJob::Planner planner_of() const {
    auto own = options.planner;
    std::shared_ptr<plan::Solver> solver;
    if (!own) solver = plan::make_solver(options.solver);
    plan::SolveOptions so;
    so.time_limit = options.solve_time_limit * 0.8;
    if (!options.defer_plans) {
      so.work_budget = plan::exact_work_for(so.time_limit);
      so.time_limit *= 20;
    }
    return [own, solver, so](const plan::Problem& problem) -> std::optional<plan::Plan> {
      std::optional<plan::Plan> result;
      if (own) {
        result = own(problem);
      } else if (auto solved = solver->solve(problem, so); solved.plan) {
        result = std::move(*solved.plan);
      }
      if (result && !plan::validate(problem, *result)) result.reset();  // discarded
      return result;
    };
  }

  // Plans the step in `log`. The step mark waits at most planned_solve_ms for the plan; past
  // that the worker goes on and the plan is taken at a later step mark (collect_job).
  void make_plan_from_log(bool is_replan) {
    if (job) return;  // one plan at a time: the deferred one first
    const auto start = Clock::now();
    std::vector<std::size_t> index_of;  // problem buffer -> log position
    plan::Problem problem = detail::problem_of_step(log, options.alignment, index_of);
    if (problem.buffers.empty()) {
      install(plan::Plan{}, log, index_of, is_replan);
      return;
    }
    auto j = detail::PlanJob::start(std::move(problem), planner_of());
    if (!options.defer_plans) j->wait();
    if (j->ready() || j->wait_for(options.solve_time_limit - (Clock::now() - start))) {
      if (auto result = j->take()) install(std::move(*result), log, index_of, is_replan);
      return;
    }
    job = std::move(j);
    job_log = log;
    job_index = std::move(index_of);
    job_replan = is_replan;
    job_deferred_at = Clock::now();
    pstats.plans_deferred++;
  }

  // At a step mark: a deferred plan that is ready now is taken. A forked child has no worker
  // thread: it drops the job and plans its own steps.
  void collect_job() {
    if (!job) return;
    if (job->pid() != static_cast<int>(::getpid())) {
      job.reset();
      return;
    }
    if (!job->ready()) return;
    std::shared_ptr<detail::PlanJob> j = std::move(job);
    job.reset();
    pstats.deferred_ms += static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - job_deferred_at)
            .count());
    if (auto result = j->take()) install(std::move(*result), job_log, job_index, job_replan);
    job_log.clear();
    job_index.clear();
  }

  void install(plan::Plan result, const std::vector<LogEntry>& step,
               const std::vector<std::size_t>& index_of, bool is_replan) {
    StepPlan sp;
    sp.sizes.reserve(step.size());
    for (const LogEntry& e : step) sp.sizes.push_back(e.size);
    sp.offsets.assign(step.size(), kNoSlot);
    for (std::size_t k = 0; k < index_of.size(); ++k) sp.offsets[index_of[k]] = result.offsets[k];
    sp.arena_size = result.arena_size;
    if (!worth_it(sp.arena_size, step)) return;
    // What the fallback cached for the steps served so far is the arena's job from now on:
    // give it back before a larger arena is taken, so the two never peak together. An arena that
    // holds the plan already takes nothing new: the fallback keeps its cache for the steps the
    // plan does not serve (a serving loop's prefill between decode steps; trimming it at every
    // re-plan made each prefill fault its segments in again).
    if (!arena_holds(sp.arena_size)) options.fallback->trim();
    if (!ensure_arena(sp.arena_size)) return;
    sp.last_used = ++use_clock;
    // The same sequence replaces its old plan; otherwise the least recently used plan goes.
    for (auto& p : plans) {
      if (p.sizes == sp.sizes) {
        p = std::move(sp);
        count_plan(is_replan);
        return;
      }
    }
    if (plans.size() >= std::max<std::size_t>(1, options.max_plans)) {
      auto lru = std::min_element(plans.begin(), plans.end(), [](const auto& a, const auto& b) {
        return a.last_used < b.last_used;
      });
      plans.erase(lru);
    }
    plans.push_back(std::move(sp));
    count_plan(is_replan);
  }

  // Whether a plan with an arena of `arena` bytes holds no more than the fallback alone, for a
  // step some of whose blocks outlive it (they stay with the fallback, beside the arena): the
  // arena plus those blocks against the most the step ever had live at once, or what the
  // fallback holds now when that is more (a caching fallback keeps what it took). A refused
  // plan is tried again after 1, 2, 4, ... steps (the solver's time is not spent every step).
  bool worth_it(std::size_t arena, const std::vector<LogEntry>& step) {
    std::size_t outliving = 0;
    const std::size_t p = detail::step_peak(step, outliving);
    const auto held = static_cast<std::size_t>(
        std::max<std::int64_t>(0, options.fallback->stats().reserved_bytes.all.current));
    // An eighth over the step's peak: neither a plan nor a fallback reaches it exactly.
    const std::size_t alone = std::max(p + p / 8, held);
    if (outliving == 0 || arena + outliving <= alone) {
      backoff = 1;
      return true;
    }
    pstats.plans_refused++;
    next_try = pstats.steps + backoff;
    backoff = std::min<std::uint64_t>(backoff * 2, 1024);
    return false;
  }

  void count_plan(bool is_replan) {
    pstats.plans_made++;
    if (is_replan) pstats.replans++;
    pstats.plans_kept = plans.size();
  }

  // ---------------------------------------------------------------- steps

  void start_step() {
    in_step = true;
    step_id++;
    steps_begun++;
    log.clear();
    clock = 0;
    current_plan = kNoSlot;
    step_mismatch = false;
    if (count_faults) step_faults = device::process_page_faults();
  }

  // A step the plan served whole: the page faults the kernel counted while it ran.
  void count_step_faults() {
    const device::PageFaults now = device::process_page_faults();
    const std::uint64_t minor = now.minor - std::min(now.minor, step_faults.minor);
    const std::uint64_t major = now.major - std::min(now.major, step_faults.major);
    pstats.served_steps++;
    if (minor + major == 0) pstats.faultless_steps++;
    pstats.served_step_minor += minor;
    pstats.served_step_major += major;
    pstats.served_step_max = std::max(pstats.served_step_max, minor + major);
  }

  void finish_step() {
    collect_job();
    if (!in_step) return;
    in_step = false;
    pstats.steps++;
    if (current_plan != kNoSlot && log.size() < plans[current_plan].sizes.size())
      step_mismatch = true;  // truncated step
    const bool planned_step = current_plan != kNoSlot || !plans.empty();
    if (step_mismatch && planned_step) pstats.mismatched_steps++;
    if (count_faults && current_plan != kNoSlot && !step_mismatch) count_step_faults();
    current_plan = kNoSlot;
    if (log.empty()) return;
    if (plan_next_step) {
      plan_next_step = false;
      make_plan_from_log(true);
      return;
    }
    if (plans.empty()) {
      if ((options.auto_steps || steps_begun > options.warmup_steps) && pstats.steps >= next_try)
        make_plan_from_log(false);
      return;
    }
    if (step_mismatch) {
      if (++consecutive_mismatches >= std::max<std::size_t>(1, options.mismatch_limit)) {
        consecutive_mismatches = 0;
        if (options.auto_steps) {
          // The pattern changed and the step boundaries may be wrong with it: find the period
          // again and plan the first step cut by it.
          detector.restart();
          pstats.period = 0;
          plan_next_step = true;
        } else {
          make_plan_from_log(true);
        }
      }
    } else {
      consecutive_mismatches = 0;
    }
  }

  // Picks the plan for position `pos` with rounded size `size`: the current one if it still
  // matches, else another whose sizes agree with everything requested in this step so far.
  std::size_t choose_plan(std::size_t pos, std::size_t size) {
    auto matches_now = [&](std::size_t p) {
      return pos < plans[p].sizes.size() && plans[p].sizes[pos] == size;
    };
    if (current_plan != kNoSlot && matches_now(current_plan)) return current_plan;
    std::size_t best = kNoSlot;
    for (std::size_t p = 0; p < plans.size(); ++p) {
      if (p == current_plan || !matches_now(p)) continue;
      bool prefix = true;
      for (std::size_t i = 0; i < pos && prefix; ++i) prefix = plans[p].sizes[i] == log[i].size;
      if (!prefix) continue;
      if (best == kNoSlot || plans[p].last_used > plans[best].last_used) best = p;
    }
    if (best != kNoSlot) {
      current_plan = best;
      plans[best].last_used = ++use_clock;
    }
    return best;
  }

  bool slot_free(std::size_t offset, std::size_t size) const {
    auto it = arena_live.lower_bound(offset);
    if (it != arena_live.end() && it->first < offset + size) return false;
    if (it != arena_live.begin()) {
      --it;
      if (it->second > offset) return false;
    }
    return true;
  }

  // Automatic steps: called before each request >= min_size is handled. Says which step marks
  // the request crossed.
  struct Crossed {
    bool ended = false;
    bool began = false;
  };
  Crossed boundary() {
    Crossed c;
    c.ended = in_step;
    finish_step();
    if (detector.period() != 0) {  // finish_step may have dropped the period
      start_step();
      c.began = true;
    }
    return c;
  }

  Crossed auto_boundary(std::size_t rounded) {
    const detail::StepDetector::Seen seen = detector.observe(rounded, big_live);
    if (seen.replaced) {
      drop_plans();                 // plans of the wrong steps: the next step is planned afresh
      next_try = pstats.steps + 2;  // the step open now was cut by the old period
    }
    pstats.period = detector.period();
    return seen.boundary ? boundary() : Crossed{};
  }

  // Automatic steps, and the program marks a step: its marks are the steps from now on. The open
  // step and the plans of detected steps are dropped and the warm-up starts over, so marked
  // steps are learnt exactly as with planned_steps:marked.
  void follow_marks() {
    options.auto_steps = in_step = plan_next_step = false;
    log.clear();
    current_plan = kNoSlot;
    drop_plans();
    pstats.period = steps_begun = next_try = 0;
    backoff = 1;
    detector.restart();
  }

  void drop_plans() {
    plans.clear();
    pstats.plans_kept = 0;
    consecutive_mismatches = 0;
  }

  // What the arena waits for while no plan is held (PlannedStats::waiting), in the order of its
  // path to a first plan: a step to watch (marked or found), the warm-up, the first whole step,
  // the plan made (maybe still on the worker thread), taken or refused.
  PlanWait waiting() const {
    if (!plans.empty()) return PlanWait::kNone;
    if (job) return PlanWait::kPlanning;
    if (pstats.plans_refused > 0) return PlanWait::kRefused;
    if (options.auto_steps) {
      if (detector.period() == 0) return PlanWait::kNoPeriod;
      if (pstats.steps == 0) return PlanWait::kFirstStep;
    } else {
      if (steps_begun == 0) return PlanWait::kNoMark;
      if (steps_begun <= options.warmup_steps && pstats.steps <= options.warmup_steps)
        return PlanWait::kWarmup;
    }
    if (pstats.steps > 0 && pstats.plans_made == 0 && !in_step) return PlanWait::kNothingToPlan;
    return PlanWait::kWatching;
  }

  PlannedStats planned_stats() const {
    PlannedStats p = pstats;
    p.waiting = waiting();
    p.next_try = next_try;
    p.arena_address = current_arena == kNoArena
                          ? 0
                          : reinterpret_cast<std::uintptr_t>(arenas[current_arena].base);
    return p;
  }

  void note_live(const void* ptr, const Live& l) {
    live.emplace(ptr, l);
    live_bytes += l.requested;
    if (l.requested >= options.min_size) big_live++;
    pstats.peak_live = std::max(pstats.peak_live, live_bytes);
  }
};

}  // namespace modelmem::alloc
