// The large-instance phase of `best`: exact decomposition into parts, the parts planned on
// several threads, the exact search spent on the parts that set the arena, and a lower bound
// from a relaxation solved exactly. See large.hpp.
#include "plan/large.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "modelmem/core/error.hpp"
#include "modelmem/plan/exact.hpp"
#include "modelmem/plan/heuristics.hpp"
#include "plan/buffer_placer.hpp"

namespace modelmem::plan::detail {
namespace {

using Clock = std::chrono::steady_clock;

/// Least common multiple of the alignments, or 0 when it passes 2^40 (no sensible base then).
std::size_t alignment_lcm(const Problem& problem, const std::vector<std::size_t>& members) {
  std::size_t l = 1;
  for (std::size_t i : members) {
    std::size_t a = std::max<std::size_t>(problem.buffers[i].alignment, 1);
    l = l / std::gcd(l, a) * a;
    if (l > (std::size_t{1} << 40)) return 0;
  }
  return l;
}

std::size_t round_up(std::size_t value, std::size_t multiple) {
  std::size_t r = value % multiple;
  return r == 0 ? value : checked_add(value, multiple - r, "stacked buffers");
}

Problem sub_problem(const Problem& problem, const std::vector<std::size_t>& members) {
  Problem p;
  p.name = problem.name;
  p.buffers.reserve(members.size());
  for (std::size_t i : members) p.buffers.push_back(problem.buffers[i]);
  return p;
}

}  // namespace

Decomposition decompose(const Problem& problem, std::size_t max_depth) {
  struct Group {
    std::vector<std::size_t> members;
    std::size_t base = 0, stacked = 0, depth = 0;
  };
  Decomposition d;
  std::vector<Group> todo(1);
  todo[0].members.resize(problem.buffers.size());
  std::iota(todo[0].members.begin(), todo[0].members.end(), 0);
  const auto& bufs = problem.buffers;
  while (!todo.empty()) {
    Group g = std::move(todo.back());
    todo.pop_back();
    if (g.members.empty()) continue;
    auto leaf = [&] { d.leaves.push_back({std::move(g.members), g.base, g.stacked}); };
    if (g.depth >= max_depth || g.members.size() == 1) {
      leaf();
      continue;
    }
    Time t0 = bufs[g.members[0]].start, t1 = bufs[g.members[0]].end;
    for (std::size_t i : g.members) {
      t0 = std::min(t0, bufs[i].start);
      t1 = std::max(t1, bufs[i].end);
    }
    std::vector<std::size_t> spanning, rest;
    for (std::size_t i : g.members)
      (bufs[i].start == t0 && bufs[i].end == t1 ? spanning : rest).push_back(i);
    if (!spanning.empty()) {
      const std::size_t l = alignment_lcm(problem, rest);
      if (l == 0) {
        leaf();
        continue;
      }
      // Larger alignments first: less padding between the stacked buffers.
      std::stable_sort(spanning.begin(), spanning.end(), [&](std::size_t x, std::size_t y) {
        return bufs[x].alignment > bufs[y].alignment;
      });
      std::size_t top = g.base, bytes = 0;
      for (std::size_t i : spanning) {
        top = align_up(top, bufs[i]);
        d.fixed.emplace_back(i, top);
        top = checked_add(top, bufs[i].size, "stacked buffers");
        bytes += bufs[i].size;
        if (bufs[i].size % l != 0) d.bound_valid = false;
      }
      if (!rest.empty())
        todo.push_back({std::move(rest), round_up(top, l), g.stacked + bytes, g.depth + 1});
      continue;
    }
    // Split where no buffer spans the time point.
    std::vector<std::size_t> order = g.members;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t x, std::size_t y) { return bufs[x].start < bufs[y].start; });
    std::vector<std::vector<std::size_t>> parts;
    Time reach = t0;
    for (std::size_t i : order) {
      if (parts.empty() || bufs[i].start >= reach) parts.emplace_back();
      parts.back().push_back(i);
      reach = std::max(reach, bufs[i].end);
    }
    if (parts.size() == 1) {
      leaf();
      continue;
    }
    // Pushed in reverse so that the leaves come out in time order.
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
      std::sort(it->begin(), it->end());
      todo.push_back({std::move(*it), g.base, g.stacked, g.depth + 1});
    }
  }
  return d;
}

void parallel_for(std::size_t count, unsigned threads,
                  const std::function<void(std::size_t)>& task) {
  const std::size_t workers = std::min<std::size_t>(std::max(threads, 1u), count);
  if (workers <= 1) {
    for (std::size_t i = 0; i < count; ++i) task(i);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < count;) {
      try {
        task(i);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        next = count;  // stop handing out tasks
      }
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

std::optional<LargeResult> plan_by_parts(const Problem& problem, const Decomposition& parts,
                                         Clock::time_point deadline, unsigned threads,
                                         std::size_t exact_max) {
  const std::size_t k = parts.leaves.size();
  std::vector<Problem> sub(k);
  std::vector<std::optional<Plan>> plans(k);
  std::vector<std::size_t> bound(k, 0);
  // Leaves with the same buffers (repeated steps) are planned once: rep[i] is the first leaf
  // equal to leaf i (same sizes, alignments and lifetimes up to a shift in time, same order).
  std::vector<std::size_t> rep(k);
  {
    using Key = std::vector<std::array<std::uint64_t, 4>>;
    std::map<Key, std::size_t> seen;
    for (std::size_t i = 0; i < k; ++i) {
      const auto& members = parts.leaves[i].members;
      Time t0 = problem.buffers[members[0]].start;
      for (std::size_t m : members) t0 = std::min(t0, problem.buffers[m].start);
      Key key;
      key.reserve(members.size());
      for (std::size_t m : members) {
        const Buffer& b = problem.buffers[m];
        key.push_back({static_cast<std::uint64_t>(b.start - t0),
                       static_cast<std::uint64_t>(b.end - t0), b.size, b.alignment});
      }
      rep[i] = seen.emplace(std::move(key), i).first->second;
    }
  }
  // Heuristics first, every distinct leaf (deterministic: the same plans on any number of
  // threads): the registry's for leaves the exact search may take next, all of them and the
  // local search for larger ones.
  parallel_for(k, threads, [&](std::size_t i) {
    if (rep[i] != i || Clock::now() >= deadline) return;
    sub[i] = sub_problem(problem, parts.leaves[i].members);
    bound[i] = lower_bound(sub[i]);
    if (sub[i].buffers.size() > exact_max) {
      plans[i] = best_heuristic_plan_until(sub[i], kDefaultSearchEffort, deadline);
      return;
    }
    for (const std::string& name : heuristic_names()) {
      Plan plan = heuristic_plan(name, sub[i], deadline);
      if (!plans[i] || plan.arena_size < plans[i]->arena_size) plans[i] = std::move(plan);
    }
  });
  for (std::size_t i = 0; i < k; ++i)
    if (!plans[rep[i]]) return std::nullopt;
  auto share = [&] {  // copies take their representative's plan and bound
    for (std::size_t i = 0; i < k; ++i) {
      if (rep[i] == i) continue;
      plans[i] = plans[rep[i]];
      bound[i] = bound[rep[i]];
    }
  };
  share();

  auto top_of = [&](std::size_t i) { return parts.leaves[i].base + plans[i]->arena_size; };
  std::size_t fixed_top = 0;
  for (auto [i, offset] : parts.fixed)
    fixed_top = std::max(fixed_top, offset + problem.buffers[i].size);
  auto arena = [&] {
    std::size_t a = fixed_top;
    for (std::size_t i = 0; i < k; ++i) a = std::max(a, top_of(i));
    return a;
  };

  LargeResult result;
  result.leaves = k;
  for (std::size_t i = 0; i < k; ++i) result.distinct += rep[i] == i;
  // Then the exact search on the leaves that set the arena, while they can still improve and
  // time remains: each round gives the rest of the time to the critical leaves.
  // A leaf is done when the search proved its arena optimal, or failed to improve it in three
  // slices. Each slice: the time left shared among the distinct leaves that may still have to
  // come down (above the best lower bound known), the critical ones searched side by side.
  std::vector<bool> done(k, false);
  std::vector<int> failed(k, 0);
  auto searchable = [&](std::size_t i) {
    return !done[i] && plans[i]->arena_size > bound[i] && sub[i].buffers.size() <= exact_max;
  };
  std::size_t known_bound = lower_bound(problem);
  while (Clock::now() < deadline) {
    const std::size_t a = arena();
    if (parts.bound_valid)
      for (std::size_t i = 0; i < k; ++i)
        known_bound = std::max(known_bound, parts.leaves[i].stacked + bound[i]);
    std::vector<std::size_t> critical, pending;
    bool blocked = false;
    for (std::size_t j = 0; j < k; ++j) {
      const std::size_t i = rep[j];
      const bool is_new = std::find(pending.begin(), pending.end(), i) == pending.end();
      if (top_of(j) == a && !searchable(i)) blocked = true;
      if (!searchable(i) || !is_new) continue;
      if (top_of(j) > known_bound) pending.push_back(i);
      if (top_of(j) == a) critical.push_back(i);
    }
    if (blocked || critical.empty()) break;
    using Seconds = std::chrono::duration<double>;
    const double lanes = double(std::min<std::size_t>(std::max(threads, 1u), pending.size()));
    const Seconds slice = Seconds(deadline - Clock::now()) * lanes / double(pending.size());
    parallel_for(critical.size(), threads, [&](std::size_t c) {
      const std::size_t i = critical[c];
      SolveOptions options;
      options.time_limit = std::min(slice, Seconds(deadline - Clock::now()));
      options.initial = plans[i];
      if (options.time_limit.count() <= 0) return;
      // First a decision at the arena that would bring the part down to the best bound known
      // (much faster than minimising when it holds); then minimisation.
      const std::size_t base = parts.leaves[i].base;
      const std::size_t target =
          std::max(bound[i], known_bound > base ? known_bound - base : std::size_t{0});
      if (failed[i] == 0 && target < plans[i]->arena_size) {
        Problem decide = sub[i];
        decide.capacity = target;
        SolveResult r = make_exact_solver()->solve(decide, options);
        if (r.plan) {
          plans[i] = std::move(r.plan);
          return;
        }
        if (r.proven_infeasible) bound[i] = std::max(bound[i], target + 1);
        ++failed[i];
        return;
      }
      SolveResult r = make_exact_solver()->solve(sub[i], options);
      bound[i] = std::max(bound[i], r.lower_bound);
      if (r.plan && r.plan->arena_size < plans[i]->arena_size) {
        plans[i] = std::move(r.plan);
      } else if (++failed[i] >= 3) {
        done[i] = true;
      }
      if (r.proven_optimal) done[i] = true;
    });
    result.searched += critical.size();
    share();
  }

  // A stronger bound for the critical leaves too large for the exact search: their buffers near
  // the peak, solved exactly (a tenth of what is left each).
  if (parts.bound_valid) {
    std::vector<std::size_t> open;
    const std::size_t a = arena();
    for (std::size_t j = 0; j < k; ++j) {
      const std::size_t i = rep[j];
      if (top_of(j) == a && plans[i]->arena_size > bound[i] && !done[i] &&
          std::find(open.begin(), open.end(), i) == open.end())
        open.push_back(i);
    }
    parallel_for(open.size(), threads, [&](std::size_t c) {
      const std::size_t i = open[c];
      const auto until = Clock::now() + (deadline - Clock::now()) / 10;
      bound[i] = std::max(bound[i], window_lower_bound(sub[i], until));
    });
    share();
  }

  result.plan.offsets.assign(problem.buffers.size(), 0);
  for (auto [i, offset] : parts.fixed) result.plan.offsets[i] = offset;
  for (std::size_t i = 0; i < k; ++i) {
    const auto& leaf = parts.leaves[i];
    for (std::size_t j = 0; j < leaf.members.size(); ++j)
      result.plan.offsets[leaf.members[j]] =
          checked_add(leaf.base, plans[i]->offsets[j], "planned offset");
  }
  result.plan.arena_size = arena_size_of(problem, result.plan.offsets);
  result.lower_bound = lower_bound(problem);
  if (parts.bound_valid)
    for (std::size_t i = 0; i < k; ++i)
      result.lower_bound = std::max(result.lower_bound, parts.leaves[i].stacked + bound[i]);
  return result;
}

std::optional<PeakWindowResult> plan_from_peak_window(const Problem& problem, std::size_t capacity,
                                                      std::size_t below, Clock::time_point deadline,
                                                      std::uint64_t work_budget,
                                                      std::size_t max_buffers) {
  const auto& bufs = problem.buffers;
  const std::size_t n = bufs.size();
  if (n < 2 || Clock::now() >= deadline) return std::nullopt;
  // The live bytes on each elementary step, and the (first) step where they peak.
  const std::vector<Time> times = time_points(problem);
  std::vector<std::size_t> load(times.size(), 0);
  for (const Buffer& b : bufs) {
    load[time_index(times, b.start)] += b.size;
    load[time_index(times, b.end)] -= b.size;
  }
  std::size_t top = 0, at = 0;
  for (std::size_t k = 0; k < load.size(); ++k) {
    if (k) load[k] += load[k - 1];
    if (load[k] > top) {
      top = load[k];
      at = k;
    }
  }
  if (top == 0 || top > capacity) return std::nullopt;
  // Greedy-size's first order (larger first, then longer-lived) for the buffers outside.
  std::vector<std::size_t> by_size(n);
  std::iota(by_size.begin(), by_size.end(), std::size_t{0});
  std::stable_sort(by_size.begin(), by_size.end(), [&](std::size_t x, std::size_t y) {
    if (bufs[x].size != bufs[y].size) return bufs[x].size > bufs[y].size;
    return bufs[x].end - bufs[x].start > bufs[y].end - bufs[y].start;
  });
  std::optional<Placer> placer;
  std::optional<PeakWindowResult> best;
  std::size_t previous = 0;
  std::vector<char> inside(n, 0);
  for (std::size_t w = 1;; w *= 2) {
    const auto now = Clock::now();
    if (now >= deadline) break;
    // Steps [first, last): w on each side of the peak.
    const std::size_t first = at >= w - 1 ? at - (w - 1) : 0;
    const std::size_t last = std::min(at + w, times.size() - 1);
    const Time from = times[first], to = times[last];
    std::vector<std::size_t> members;
    for (std::size_t i = 0; i < n && members.size() <= max_buffers; ++i)
      if (bufs[i].start < to && bufs[i].end > from) members.push_back(i);
    if (members.size() > max_buffers) break;
    const bool whole = first == 0 && last == times.size() - 1;
    if (members.size() == previous && !whole) continue;  // no buffer more than the last window
    previous = members.size();
    Problem window;
    window.name = problem.name;
    window.capacity = capacity;
    window.buffers.reserve(members.size());
    for (std::size_t i : members) {
      Buffer b = bufs[i];
      b.start = std::max(b.start, from);
      b.end = std::min(b.end, to);
      window.buffers.push_back(std::move(b));
    }
    // Half the work (the plan is the same on any machine; the windows that plan easily use
    // little of it), the time left as a safety net. A larger window is harder: when this one
    // has no plan, neither will the next.
    SolveOptions options;
    options.time_limit = std::chrono::duration<double>(deadline - now);
    options.work_budget = std::max<std::uint64_t>(work_budget / 2, 1);
    const SolveResult r = make_exact_solver()->solve(window, options);
    if (!r.plan) break;
    // The window's buffers first, from the bottom of its plan up, then the others larger first;
    // each into the lowest (or the tightest) gap its whole life leaves.
    std::vector<std::size_t> rank(members.size());
    std::iota(rank.begin(), rank.end(), std::size_t{0});
    std::stable_sort(rank.begin(), rank.end(), [&](std::size_t x, std::size_t y) {
      return r.plan->offsets[x] < r.plan->offsets[y];
    });
    std::vector<std::size_t> order;
    order.reserve(n);
    for (std::size_t j : rank) {
      order.push_back(members[j]);
      inside[members[j]] = 1;
    }
    for (std::size_t i : by_size)
      if (!inside[i]) order.push_back(i);
    for (std::size_t i : members) inside[i] = 0;
    if (!placer) placer.emplace(problem);
    for (GapChoice choice : {GapChoice::kFirst, GapChoice::kBest}) {
      std::size_t work = 0;
      try {
        Plan plan = placer->place(order, choice, work, deadline);
        if (plan.arena_size < below && (!best || plan.arena_size < best->plan.arena_size))
          best = PeakWindowResult{std::move(plan), members.size()};
      } catch (const TimeUp&) {
        return best;
      }
      if (best && best->plan.arena_size <= top) return best;  // at the bound
    }
    if (whole) break;
  }
  return best;
}

std::size_t window_lower_bound(const Problem& problem, Clock::time_point deadline,
                               std::size_t max_buffers) {
  const Peak pk = peak(problem);
  if (pk.live.empty() || pk.live.size() >= max_buffers || Clock::now() >= deadline) return pk.bytes;
  // The widest window around the peak step whose buffers number at most max_buffers.
  auto members_of = [&](Time w) {
    std::vector<std::size_t> m;
    for (std::size_t i = 0; i < problem.buffers.size(); ++i) {
      const Buffer& b = problem.buffers[i];
      if (b.start <= pk.step + w && b.end > pk.step - w) m.push_back(i);
      if (m.size() > max_buffers) break;
    }
    return m;
  };
  std::vector<std::size_t> best = pk.live;
  for (Time w = 1; w < (Time{1} << 40); w *= 2) {
    std::vector<std::size_t> m = members_of(w);
    if (m.size() > max_buffers) break;
    best = std::move(m);
    if (best.size() == problem.buffers.size()) break;
  }
  if (best.size() == pk.live.size()) return pk.bytes;  // nothing but the peak: no more to prove
  SolveOptions options;
  options.time_limit = std::chrono::duration<double>(deadline - Clock::now());
  if (options.time_limit.count() <= 0) return pk.bytes;
  SolveResult r = make_exact_solver()->solve(sub_problem(problem, best), options);
  return std::max(pk.bytes, r.lower_bound);
}

}  // namespace modelmem::plan::detail
