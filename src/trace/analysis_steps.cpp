// analyze(), chapter 2: the repeating step. The alloc/free sequence's period, the step windows
// (from marks, else from the period), steps grouped by identical allocation sequences, each
// group's scale against the kind of step allocating least, and one step of each group planned.
#include <map>
#include <unordered_map>

#include <cmath>

#include "analysis_internal.hpp"
#include "modelmem/plan/solver.hpp"

namespace modelmem::trace {

using alloc::EventKind;

std::size_t plan_arena(const plan::Problem& problem, const std::string& solver, double time_limit_s,
                       std::string* solver_used) {
  if (problem.buffers.empty()) {
    if (solver_used != nullptr) *solver_used = solver;
    return 0;
  }
  std::vector<std::string> names;
  if (!solver.empty()) {
    names.push_back(solver);
  } else {
    for (const std::string& n : plan::solver_names())
      if (n != "exact" && n != "best" && n != "naive") names.push_back(n);
  }
  plan::SolveOptions options;
  options.time_limit = std::chrono::duration<double>(time_limit_s);
  std::size_t best = 0;
  std::string best_name;
  for (const std::string& n : names) {
    plan::SolveResult r = plan::solve(problem, n, options);
    if (r.plan && (best == 0 || r.plan->arena_size < best)) {
      best = r.plan->arena_size;
      best_name = n;
    }
  }
  if (solver_used != nullptr) *solver_used = best_name;
  return best;
}

namespace {

bool is_alloc_or_free(EventKind k) {
  return k == EventKind::kAlloc || k == EventKind::kFree;
}

// The size a free event returns (its block's), 0 when it matches no block.
std::size_t freed_size(const Blocks& blocks, std::size_t event) {
  std::size_t b = blocks.block_of_event[event];
  return b == kNever ? 0 : blocks.blocks[b].size;
}

}  // namespace

StepWindows find_step_windows(const Trace& trace, const Blocks& blocks) {
  const auto& events = trace.events;
  std::vector<std::uint64_t> tokens;
  std::vector<std::size_t> event_of_rank;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    if (!is_alloc_or_free(e.kind)) continue;
    const bool is_free = e.kind == EventKind::kFree;
    tokens.push_back(plan::period_token({is_free, is_free ? freed_size(blocks, i) : e.size}));
    event_of_rank.push_back(i);
  }
  StepWindows out;
  out.period = plan::detect_period(std::span<const std::uint64_t>(tokens));
  if (out.period.found) out.period_start_event = event_of_rank[out.period.start];
  out.windows = marked_steps(trace);
  out.from_marks = !out.windows.empty();
  if (out.windows.empty() && out.period.found) {
    for (std::size_t k = 0; k < out.period.repeats; ++k) {
      std::size_t r0 = out.period.start + k * out.period.length;
      std::size_t r1 = r0 + out.period.length;
      out.windows.push_back(
          {event_of_rank[r0], r1 < event_of_rank.size() ? event_of_rank[r1] : events.size()});
    }
  }
  return out;
}

namespace detail {
namespace {

std::uint64_t step_signature(const Trace& trace, const Blocks& blocks, Window w) {
  std::uint64_t h = 1469598103934665603ULL;
  for (std::size_t i = w.begin; i < w.end; ++i) {
    const TraceEvent& e = trace.events[i];
    if (!is_alloc_or_free(e.kind)) continue;
    const bool is_free = e.kind == EventKind::kFree;
    std::size_t size = is_free ? freed_size(blocks, i) : e.size;
    h = (h ^ (size * 2 + (is_free ? 1 : 0))) * 1099511628211ULL;
  }
  return h;
}

// Scale of each kind of step against the one allocating least: the size ratio most blocks
// agree on (pairs of sizes vote with the smaller of their counts). Sizes that grow linearly
// with a dimension all vote for that dimension's ratio; ratios are rounded to 1/8.
void scale_groups(const State& state, Analysis& a) {
  const auto& events = state.trace.events;
  std::vector<std::map<std::size_t, std::size_t>> size_counts_of_group(a.groups.size());
  for (std::size_t g = 0; g < a.groups.size(); ++g) {
    const Window w = a.steps[a.groups[g].steps.back()].window;
    for (std::size_t i = w.begin; i < w.end; ++i)
      if (events[i].kind == EventKind::kAlloc) ++size_counts_of_group[g][events[i].size];
  }
  // Sizes allocated equally often in every kind of step (workspaces, constants) say nothing
  // about the dimension: they do not vote.
  if (size_counts_of_group.size() >= 2) {
    std::vector<std::size_t> invariant;
    for (const auto& [size, count] : size_counts_of_group[0]) {
      bool everywhere = true;
      for (const auto& counts : size_counts_of_group) {
        auto it = counts.find(size);
        everywhere = everywhere && it != counts.end() && it->second == count;
      }
      if (everywhere) invariant.push_back(size);
    }
    for (auto& counts : size_counts_of_group)
      for (std::size_t size : invariant) counts.erase(size);
  }
  std::size_t reference = 0;
  for (std::size_t g = 1; g < a.groups.size(); ++g)
    if (a.steps[a.groups[g].steps.back()].bytes_allocated <
        a.steps[a.groups[reference].steps.back()].bytes_allocated)
      reference = g;
  for (std::size_t g = 0; g < a.groups.size(); ++g) {
    std::map<long, std::size_t> votes;  // ratio * 8 -> votes
    for (const auto& [r_size, r_count] : size_counts_of_group[reference])
      for (const auto& [g_size, g_count] : size_counts_of_group[g])
        votes[std::lround(8.0 * static_cast<double>(g_size) / static_cast<double>(r_size))] +=
            std::min(r_count, g_count);
    long best_ratio = 8;
    std::size_t best_votes = 0;
    for (const auto& [ratio, count] : votes)
      if (count > best_votes && ratio > 0) {
        best_votes = count;
        best_ratio = ratio;
      }
    a.groups[g].scale = g == reference ? 1.0 : static_cast<double>(best_ratio) / 8.0;
  }
}

}  // namespace

void find_steps(State& state, Analysis& a, const AnalyzeOptions& options) {
  const Trace& trace = state.trace;
  const auto& events = trace.events;
  const Blocks& blocks = state.blocks;
  StepWindows found = find_step_windows(trace, blocks);
  a.period = found.period;
  a.period_start_event = found.period_start_event;
  a.steps_from_marks = found.from_marks;
  const std::vector<Window>& windows = found.windows;
  std::unordered_map<std::uint64_t, std::size_t> group_of_signature;
  for (const Window& w : windows) {
    StepStats s;
    s.window = w;
    std::map<std::size_t, std::size_t> counts;
    for (std::size_t i = w.begin; i < w.end; ++i) {
      const TraceEvent& e = events[i];
      if (e.kind == EventKind::kAlloc) {
        ++s.allocs;
        s.bytes_allocated += e.size;
        ++counts[e.size];
      }
      if (is_alloc_or_free(e.kind)) s.peak_live = std::max(s.peak_live, state.live_after[i]);
    }
    s.live_in = w.begin > 0 ? state.live_after[w.begin - 1] : 0;
    s.peak_live = std::max(s.peak_live, s.live_in);
    std::size_t best_count = 0;
    for (const auto& [size, count] : counts)
      if (count > best_count || (count == best_count && size > s.common_size)) {
        best_count = count;
        s.common_size = size;
      }
    if (s.allocs == 0) continue;  // an empty step says nothing about the program
    auto [it, inserted] =
        group_of_signature.try_emplace(step_signature(trace, blocks, w), a.groups.size());
    if (inserted) a.groups.emplace_back();
    s.group = it->second;
    a.groups[s.group].steps.push_back(a.steps.size());
    a.steps.push_back(s);
  }
  scale_groups(state, a);
  for (StepGroup& group : a.groups) {
    // The last step of a group: the warm-up (allocator caches, lazy init) is behind it.
    const StepStats& rep = a.steps[group.steps.back()];
    plan::Problem problem = to_problem(trace, blocks, rep.window);
    group.lower_bound = plan::lower_bound(problem);
    group.planned = plan_arena(problem, options.solver, options.time_limit_s, &a.solver);
    for (std::size_t k : group.steps) {
      group.peak_live = std::max(group.peak_live, a.steps[k].peak_live);
      group.live_in = std::max(group.live_in, a.steps[k].live_in);
    }
  }
}

}  // namespace detail
}  // namespace modelmem::trace
