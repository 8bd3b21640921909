// The planned arena's requests, statistics and steps (its state and planning: planned_impl.hpp;
// its invariants: planned_invariants.cpp).
#include "modelmem/alloc/planned_allocator.hpp"

#include <chrono>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "modelmem/core/error.hpp"
#include "planned_impl.hpp"

namespace modelmem::alloc {

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
  impl_->owner = this;
  impl_->pstats.huge_pages_asked = impl_->options.huge_pages;
  impl_->pstats.warmup_steps = impl_->options.warmup_steps;
  impl_->pstats.min_size = impl_->options.min_size;
  impl_->pstats.solve_ms = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(impl_->options.solve_time_limit)
          .count());
}

PlannedAllocator::~PlannedAllocator() {
  for (std::size_t i = 0; i < impl_->arenas.size(); ++i) impl_->release_arena(i);
}

void* PlannedAllocator::do_allocate(std::size_t size, Stream stream) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  const std::size_t rounded = m.round(size);
  Live l;
  l.requested = size;
  l.rounded = rounded;
  l.stream = stream;

  auto from_fallback = [&]() {
    void* p = m.options.fallback->allocate(size, stream);
    m.note_live(p, l);
    return p;
  };

  if (size < m.options.min_size) {
    m.pstats.unplanned++;
    return from_fallback();
  }
  if (m.options.auto_steps) {
    auto crossed = m.auto_boundary(rounded);
    // Labelled apart from the program's own marks: a trace of this run then says that the
    // program marked no steps, and its replay (or analyze's advice) finds them itself, as this
    // run did, instead of following marks a run of the advice would never see.
    if (crossed.ended) emit_mark("step_end_auto");
    if (crossed.began) emit_mark("step_begin_auto");
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
  return ptr;
}

void PlannedAllocator::do_deallocate(void* ptr) {
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
}

Stats PlannedAllocator::do_stats() const {
  const Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  Stats s = m.options.fallback->stats();
  s.merge(m.own);
  s.planned = m.planned_stats();
  return s;
}

void PlannedAllocator::do_reset_peak() {
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  m.options.fallback->reset_peak();
  m.own.reset_peaks();
  m.pstats.peak_live = m.live_bytes;
}

void PlannedAllocator::do_trim() {
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  m.options.fallback->trim();
}

std::string PlannedAllocator::do_describe() const {
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

void PlannedAllocator::do_begin_step() {
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  if (m.options.auto_steps) m.follow_marks();
  m.finish_step();
  m.start_step();
}

void PlannedAllocator::do_end_step() {
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  if (m.options.auto_steps) m.follow_marks();
  m.finish_step();
}

PlannedStats PlannedAllocator::planned_stats() const {
  const Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  return m.planned_stats();
}

LiveBlock PlannedAllocator::do_block(const void* ptr) const {
  const Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  auto it = m.live.find(ptr);
  if (it == m.live.end()) return {};
  return LiveBlock{it->second.requested, it->second.stream, 0};
}

Allocator* PlannedAllocator::do_upstream() const noexcept {
  return impl_->options.fallback.get();
}

void PlannedAllocator::do_set_listener(Listener* listener) noexcept {
  attach_upstream(*impl_->options.fallback, listener);
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

std::string describe_step_faults(const PlannedStats& p) {
  if (p.served_steps == 0) return "";
  return std::to_string(p.faultless_steps) + " of " + std::to_string(p.served_steps) +
         " steps served by the plan had no page fault; " + std::to_string(p.served_step_minor) +
         " minor, " + std::to_string(p.served_step_major) + " major in them all, the most in one " +
         std::to_string(p.served_step_max) + " (the kernel's count for the process)";
}

std::string describe_no_plan(const PlannedStats& p) {
  const auto n = [](std::uint64_t v) { return std::to_string(v); };
  const std::uint64_t requests = p.hits + p.misses + p.unplanned;
  switch (p.waiting) {
    case PlanWait::kNone:
      return {};
    case PlanWait::kPlanning:
      return "a plan is still being made on the worker thread (it ran past planned_solve_ms, " +
             n(p.solve_ms) + " ms); the first step mark after it is ready takes it";
    case PlanWait::kRefused:
      return n(p.plans_refused) +
             " plan(s) refused: the arena and the blocks that outlive their step would hold "
             "more than the fallback alone; planned again when step " +
             n(p.next_try) + " ends (" + n(p.steps) + " ended so far)";
    case PlanWait::kNoPeriod:
      return "no repeating step found in " + n(requests) +
             " requests: automatic steps are found once the sizes requested repeat twice after "
             "the first step, and the next whole step is planned (a loop's first plan serves its "
             "4th or 5th step); mark the steps (modelmem_step_begin/end, Python's step()) to "
             "have the second step planned";
    case PlanWait::kFirstStep:
      return "a repeating step of " + n(p.period) +
             " requests was found; the first whole step, which is planned, has not ended yet";
    case PlanWait::kNoMark:
      return "no step marked (planned_steps:marked: the program marks its steps with "
             "modelmem_step_begin/end or Python's step(); " +
             n(requests) + " requests so far, all served by the fallback)";
    case PlanWait::kWarmup:
      return n(p.steps) + " of " + n(p.warmup_steps) +
             " warm-up step(s) ended (planned_warmup_steps): the step after the warm-up is "
             "planned when it ends";
    case PlanWait::kNothingToPlan:
      return "the steps so far held no request of at least planned_min_kb (" +
             n(p.min_size / 1024) + " KiB): nothing to plan";
    case PlanWait::kWatching:
      break;
  }
  return "the step being watched, which is planned, has not ended yet";
}

}  // namespace modelmem::alloc
