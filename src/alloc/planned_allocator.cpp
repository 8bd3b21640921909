#include "modelmem/alloc/planned_allocator.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "modelmem/core/error.hpp"
#include "modelmem/plan/period.hpp"
#include "modelmem/plan/solver.hpp"
#include "planned_parts.hpp"
#include "step_detector.hpp"

namespace modelmem::alloc {

using detail::Arena, detail::kNoArena, detail::kNoSlot, detail::kNotLogged, detail::Live,
    detail::LogEntry, detail::StepPlan;
using Clock = std::chrono::steady_clock;
constexpr std::size_t kPage = 4096;

struct PlannedAllocator::Impl {
  explicit Impl(PlannedOptions o)
      : options(std::move(o)),
        detector({options.auto_steps ? options.history : 0, options.min_period,
                  options.first_detection, options.min_history}) {}

  PlannedOptions options;
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

  // A plan that ran past planned_solve_ms, finishing on a worker thread (plan_job.hpp), with
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
    options.device->deallocate(a.base, a.size);
    own.count_segment(PoolKind::kLarge, a.size, false);
    a.base = nullptr;
    a.size = 0;
  }

  // Makes the current arena at least `bytes` large. Returns false when the device refuses.
  bool ensure_arena(std::size_t bytes) {
    if (bytes == 0) return true;
    if (current_arena != kNoArena && arenas[current_arena].size >= bytes) return true;
    std::size_t size = checked_align_up(bytes, kPage, "planned arena size");
    void* base = nullptr;
    try {
      base = options.device->allocate(size);
    } catch (const OutOfMemory&) {
      return false;
    }
    // Before the first touch: pages touched small stay small until khugepaged collapses them.
    const bool huge = options.huge_pages && options.device->prefer_large_pages(base, size);
    if (options.prefault) {
      // One write per page: the kernel maps every page now rather than during a step.
      auto* bytes_ptr = static_cast<volatile unsigned char*>(base);
      for (std::size_t off = 0; off < size; off += kPage) bytes_ptr[off] = 0;
    }
    own.count_segment(PoolKind::kLarge, size, true);
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
  // usually taken at the step mark that asked for it.
  detail::PlanJob::Planner planner_of() const {
    auto own = options.planner;
    std::shared_ptr<plan::Solver> solver;
    if (!own) solver = plan::make_solver(options.solver);
    plan::SolveOptions so;
    so.time_limit = options.solve_time_limit * 0.8;
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
    if (j->wait_for(options.solve_time_limit - (Clock::now() - start))) {
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
    // give it back before the arena is taken, so the two never peak together.
    options.fallback->trim();
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

  void note_live(const void* ptr, const Live& l) {
    live.emplace(ptr, l);
    live_bytes += l.requested;
    if (l.requested >= options.min_size) big_live++;
    pstats.peak_live = std::max(pstats.peak_live, live_bytes);
  }
};

PlannedAllocator::PlannedAllocator(PlannedOptions options) {
  if (!options.fallback) throw InvalidInput("planned arena: no fallback allocator given");
  if (!options.device) throw InvalidInput("planned arena: no device given");
  if (options.alignment < 16 || (options.alignment & (options.alignment - 1)) != 0)
    throw InvalidInput("planned arena: alignment " + std::to_string(options.alignment) +
                       " is not a power of two >= 16");
  if (options.history < 2 * options.min_period || options.history < options.min_history ||
      options.first_detection > options.min_history)
    throw InvalidInput(
        "planned arena: history must hold at least two periods and min_history requests, "
        "and first_detection may not exceed min_history");
  if (!options.planner) plan::make_solver(options.solver);  // throws naming a wrong solver
  impl_ = std::make_unique<Impl>(std::move(options));
}

PlannedAllocator::~PlannedAllocator() {
  for (std::size_t i = 0; i < impl_->arenas.size(); ++i) impl_->release_arena(i);
}

void* PlannedAllocator::allocate(std::size_t size, Stream stream) {
  if (size == 0) throw InvalidInput("planned arena: allocation of 0 bytes");
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  const std::size_t rounded = m.round(size);
  Live l;
  l.requested = size;
  l.rounded = rounded;

  auto from_fallback = [&]() {
    void* p = m.options.fallback->allocate(size, stream);
    m.note_live(p, l);
    emit(EventKind::kAlloc, reinterpret_cast<std::uintptr_t>(p), size, stream);
    return p;
  };

  if (size < m.options.min_size) {
    m.pstats.unplanned++;
    return from_fallback();
  }
  if (m.options.auto_steps) {
    auto crossed = m.auto_boundary(rounded);
    if (crossed.ended) emit_mark("step_end");
    if (crossed.began) emit_mark("step_begin");
  }
  if (!m.in_step) {
    m.pstats.unplanned++;
    return from_fallback();
  }

  const std::size_t pos = m.log.size();
  m.log.push_back(LogEntry{rounded, m.clock++, -1});
  l.log_index = pos;
  l.step_id = m.step_id;
  if (m.plans.empty()) {
    m.pstats.unplanned++;
    return from_fallback();
  }
  std::size_t p = m.choose_plan(pos, rounded);
  if (p == kNoSlot) {
    m.pstats.misses++;
    m.step_mismatch = true;
    return from_fallback();
  }
  const std::size_t offset = m.plans[p].offsets[pos];
  if (offset == kNoSlot) {
    m.pstats.unplanned++;
    return from_fallback();
  }
  Arena* arena = m.current_arena == kNoArena ? nullptr : &m.arenas[m.current_arena];
  if (arena == nullptr || offset + rounded > arena->size || !m.slot_free(offset, rounded)) {
    // The plan assumed this range is free by now; it is not (another order or interleaving).
    m.pstats.misses++;
    m.pstats.occupied++;
    m.step_mismatch = true;
    return from_fallback();
  }
  void* ptr = arena->base + offset;
  m.arena_live.emplace(offset, offset + rounded);
  arena->live++;
  l.arena = m.current_arena;
  l.offset = offset;
  m.note_live(ptr, l);
  m.pstats.hits++;
  m.pstats.hit_bytes += size;
  m.own.count_block(pool_of_request(size), rounded, size, true);
  emit(EventKind::kAlloc, reinterpret_cast<std::uintptr_t>(ptr), size, stream);
  return ptr;
}

void PlannedAllocator::deallocate(void* ptr) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  auto it = m.live.find(ptr);
  if (it == m.live.end())
    throw InvalidInput("planned arena: free of a pointer it did not hand out (or freed twice)");
  Live l = it->second;
  if (l.arena == kNoArena) {
    m.options.fallback->deallocate(ptr);  // throws with our state unchanged
  }
  m.live.erase(it);
  m.live_bytes -= l.requested;
  if (l.requested >= m.options.min_size) m.big_live--;
  if (l.log_index != kNotLogged) {
    if (m.in_step && l.step_id == m.step_id) m.log[l.log_index].free_t = m.clock++;
  }
  if (l.arena != kNoArena) {
    Arena& a = m.arenas[l.arena];
    a.live--;
    if (l.arena == m.current_arena) {
      m.arena_live.erase(l.offset);
    } else if (a.live == 0) {
      m.release_arena(l.arena);
    }
    m.own.count_block(pool_of_request(l.requested), l.rounded, l.requested, false);
  }
  emit(EventKind::kFree, reinterpret_cast<std::uintptr_t>(ptr), l.requested);
}

Stats PlannedAllocator::stats() const {
  const Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  Stats s = m.options.fallback->stats();
  s.merge(m.own);
  return with_warnings(std::move(s));
}

void PlannedAllocator::reset_peak() {
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  m.options.fallback->reset_peak();
  m.own.reset_peaks();
  m.pstats.peak_live = m.live_bytes;
}

void PlannedAllocator::trim() {
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  m.options.fallback->trim();
}

std::string PlannedAllocator::describe() const {
  const Impl& m = *impl_;
  std::lock_guard lock(m.mutex);  // the first step mark turns auto_steps off
  std::ostringstream out;
  out << "planned(steps=" << (m.options.auto_steps ? "auto" : "marked")
      << ", warmup_steps=" << m.options.warmup_steps
      << ", mismatch_limit=" << m.options.mismatch_limit << ", max_plans=" << m.options.max_plans
      << ", min_size=" << m.options.min_size << ", alignment=" << m.options.alignment
      << ", huge_pages=" << (m.options.huge_pages ? "on" : "off")
      << ", solver=" << (m.options.planner ? std::string("custom") : m.options.solver)
      << ", device=" << m.options.device->name() << ", fallback=" << m.options.fallback->describe()
      << ")";
  return out.str();
}

void PlannedAllocator::begin_step() {
  emit_mark("step_begin");
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  if (m.options.auto_steps) m.follow_marks();
  m.finish_step();
  m.start_step();
}

void PlannedAllocator::end_step() {
  emit_mark("step_end");
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  if (m.options.auto_steps) m.follow_marks();
  m.finish_step();
}

PlannedStats PlannedAllocator::planned_stats() const {
  const Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  return m.pstats;
}

std::size_t PlannedAllocator::block_size(const void* ptr) const {
  const Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  auto it = m.live.find(ptr);
  return it == m.live.end() ? 0 : it->second.requested;
}

bool PlannedAllocator::in_arena(const void* ptr) const {
  const Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  auto p = static_cast<const std::byte*>(ptr);
  for (const Arena& a : m.arenas)
    if (a.base != nullptr && p >= a.base && p < a.base + a.size) return true;
  return false;
}

std::pair<const void*, std::size_t> PlannedAllocator::arena_range() const {
  const Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  if (m.current_arena == kNoArena) return {nullptr, 0};
  const Arena& a = m.arenas[m.current_arena];
  return {a.base, a.size};
}

const PlannedOptions& PlannedAllocator::options() const noexcept {
  return impl_->options;
}

}  // namespace modelmem::alloc
