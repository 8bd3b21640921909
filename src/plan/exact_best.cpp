// The default solver: every heuristic of the registry (cheap, milliseconds), then the exact
// search seeded with the best heuristic plan for the rest of the time limit. Problems of more
// than kLargeProblem buffers take the large-instance phase instead (plan/large.hpp): the exact
// decomposition, every part planned on its own on the threads given, the exact search on the
// parts that set the arena, and a lower bound from a relaxation solved exactly.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>

#include "modelmem/plan/exact.hpp"
#include "plan/buffer_placer.hpp"
#include "plan/large.hpp"
#include "plan/refine.hpp"

namespace modelmem::plan {
namespace {

using Clock = std::chrono::steady_clock;

bool is_heuristic(const std::string& name) {
  return name != "exact" && name != "best";
}

// Past this many buffers the exact search over the whole problem costs more memory and time
// than it can use (it lists every pair of buffers live together); the parts get it instead.
constexpr std::size_t kLargeProblem = 5000;

// The neighbourhood search (plan/refine.hpp) runs on problems up to this size: its index costs
// about 100 bytes per buffer and each chain a copy of the plan.
constexpr std::size_t kRefineMax = 300'000;

/// Work units (buffers visited) of the neighbourhood search per chain for a time limit: about
/// what a loaded core gets through in that time, so that the search usually ends on its budget
/// (the same plan on every machine) rather than on the clock.
std::size_t refine_budget(double seconds) {
  return static_cast<std::size_t>(std::min(seconds, 1e6) * 2e7);
}

/// Work units (placed buffers looked at) for the greedy placements' orderings in the large phase:
/// about what a loaded core scans in 40 % of the limit (5 x 10^7 a second measured on
/// PanGu-2.6B's placements), so a longer limit tries more orderings, the same ones on every
/// machine. Never below the registry's default.
std::size_t placement_budget(double seconds) {
  return std::max<std::size_t>(static_cast<std::size_t>(std::min(seconds, 1e6) * 0.4 * 5e7),
                               60'000'000);
}

std::string percent(std::size_t a, std::size_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", b ? (double(a) / double(b) - 1) * 100.0 : 0.0);
  return buf;
}

std::string fmt_ratio(std::size_t a, std::size_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", b ? double(a) / double(b) : 0.0);
  return buf;
}

class BestSolver final : public Solver {
 public:
  std::string name() const override { return "best"; }

  SolveResult solve(const Problem& problem, const SolveOptions& options) const override {
    if (!options.checked) check_problem(problem);
    if (problem.buffers.size() > kLargeProblem) return solve_large(problem, options);
    const auto started = Clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - started).count(); };

    // Heuristics run without the capacity so that their plans can seed the search even when
    // they do not fit.
    Problem open = problem;
    open.capacity.reset();
    std::optional<Plan> seed;
    std::string seed_name;
    auto consider = [&](const Plan& plan, const std::string& name) {
      if (seed && seed->arena_size <= plan.arena_size) return;
      seed.emplace(plan);
      seed_name = name;
    };
    if (options.initial && options.initial->offsets.size() == problem.buffers.size() &&
        validate(open, *options.initial))
      consider(*options.initial, "initial");
    for (const std::string& name : solver_names()) {
      if (!is_heuristic(name)) continue;
      SolveResult h = make_solver(name)->solve(open, options);
      if (h.plan) consider(*h.plan, name);
    }
    const std::size_t bound = lower_bound(problem);
    // The window around the peak planned exactly, the rest greedily in its order (a quarter of
    // the limit at most): on training graphs it reaches the bound where every greedy order
    // stops short and the whole search would take long. Not with a capacity: deciding whether
    // the buffers fit is the search's own question, and the windows only delay it (MiniMalloc's
    // A-K at 2^20: 3.9 s with them, 2.6 s without).
    std::string window_note;
    if (seed && seed->arena_size > bound && !problem.capacity) {
      const auto until = started + std::chrono::duration_cast<Clock::duration>(std::min(
                                       options.time_limit / 4, std::chrono::duration<double>(1e6)));
      const std::uint64_t work = options.work_budget
                                     ? options.work_budget / 4
                                     : exact_work_for(std::min(options.time_limit / 4,
                                                               std::chrono::duration<double>(1e6)));
      if (auto w = detail::plan_from_peak_window(open, bound, seed->arena_size, until, work)) {
        consider(w->plan, "best");
        window_note =
            "the " + std::to_string(w->window_buffers) + " buffers around the peak planned exactly";
      }
    }

    SolveResult result;
    result.lower_bound = bound;
    if (seed && seed->arena_size == bound) {  // a heuristic reached the bound: nothing to search
      result.plan = seed;
      result.proven_optimal = true;
      result.solver = seed_name;
      if (seed_name == "best") result.note = window_note;
      if (problem.capacity && bound > *problem.capacity) {
        result.plan.reset();
        result.proven_optimal = false;
        result.proven_infeasible = true;
        result.note = "lower bound " + std::to_string(bound) + " exceeds the capacity";
      }
    } else if (problem.capacity && seed && seed->arena_size <= *problem.capacity) {
      result.plan = seed;  // fits already: a decision needs no search
      result.solver = seed_name;
      if (seed_name == "best") result.note = window_note;
    } else {
      SolveOptions rest = options;
      rest.time_limit = std::max(options.time_limit - std::chrono::duration<double>(elapsed()),
                                 std::chrono::duration<double>(0));
      rest.initial = seed;
      result = make_exact_solver()->solve(problem, rest);
      result.solver = "exact";
      if (result.plan && seed && !problem.capacity && seed->arena_size <= result.plan->arena_size)
        result.solver = seed_name;  // the search kept the seed: credit the heuristic
      if (result.solver == "best" && !window_note.empty())
        result.note = window_note + (result.note.empty() ? "" : "; " + result.note);
    }
    result.seconds = elapsed();
    return result;
  }

 private:
  SolveResult solve_large(const Problem& problem, const SolveOptions& options) const {
    const auto started = Clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - started).count(); };
    const auto deadline = started + std::chrono::duration_cast<Clock::duration>(std::min(
                                        options.time_limit, std::chrono::duration<double>(1e7)));
    const unsigned threads = std::max(options.threads, 1u);
    // Within the limit, before the search (run_solve has it already).
    const std::size_t peak_bound =
        options.peak_live_bound ? options.peak_live_bound : lower_bound(problem);
    // The heuristics and the neighbourhood search never look at the capacity: they take the
    // problem itself (a copy of a million buffers costs a noticeable part of a short limit).
    const Problem& open = problem;

    // 1. Every heuristic on the whole problem, side by side, the slowest first; ties go to the
    // registry's order. Orderings after each one's first are tried in the first 40% of the time.
    const std::vector<std::string>& names = detail::heuristic_names();
    std::vector<std::optional<Plan>> plans(names.size());
    const auto first_phase =
        started + std::chrono::duration_cast<Clock::duration>(
                      std::min(options.time_limit, std::chrono::duration<double>(1e7)) * 0.4);
    // naive, greedy-size, greedy-breadth, best-fit, run fastest first (naive, best-fit,
    // greedy-size, greedy-breadth) on any number of threads, so that a short time limit still
    // gets the quick ones' plans. Any order gives the same plans.
    const std::size_t run_order[] = {0, 3, 1, 2};
    // Each gives up at the deadline (naive never needs to): the plans that finished are kept.
    // best-fit's first heap simulation is never given up: past the deadline it places the
    // buffers it has not reached above the others, last in, first out (linear time), so a real
    // plan always comes back on time.
    // A greedy placement on a large problem costs about three times best-fit's simulation (at
    // 10^6 buffers its index alone takes 0.4 s to build, as long or longer to free, and neither
    // can be given up): the greedy ones wait for best-fit and are not begun when less time than
    // that is left, so that the limit holds on any number of threads.
    std::size_t unplaced = 0;
    std::atomic<bool> best_fit_done{false};
    std::atomic<double> best_fit_seconds{0};
    struct Announce {  // best-fit's time, told to the waiting greedy ones however it ends
      Announce(std::atomic<bool>& d, std::atomic<double>& s) : done(d), seconds(s) {}
      Announce(const Announce&) = delete;
      Announce& operator=(const Announce&) = delete;
      std::atomic<bool>& done;
      std::atomic<double>& seconds;
      Clock::time_point from = Clock::now();
      ~Announce() {
        seconds = std::chrono::duration<double>(Clock::now() - from).count();
        done = true;
        done.notify_all();
      }
    };
    detail::parallel_for(names.size(), threads, [&](std::size_t t) {
      const std::size_t i = run_order[t % 4];
      const bool greedy = names[i] != "naive" && names[i] != "best-fit";
      if (greedy) {
        best_fit_done.wait(false);
        const auto cost = std::chrono::duration<double>(3 * best_fit_seconds.load());
        if (Clock::now() + std::chrono::duration_cast<Clock::duration>(cost) > deadline) return;
      }
      std::optional<Announce> announce;
      if (names[i] == "best-fit") announce.emplace(best_fit_done, best_fit_seconds);
      try {
        plans[i] = detail::heuristic_plan(names[i], open, first_phase, deadline,
                                          placement_budget(options.time_limit.count()),
                                          names[i] == "best-fit" ? &unplaced : nullptr);
      } catch (const detail::TimeUp&) {
      }
    });
    std::optional<Plan> best;
    std::string best_name;
    if (options.initial && options.initial->offsets.size() == problem.buffers.size() &&
        validate(problem, *options.initial, false)) {
      best = options.initial;
      best_name = "initial";
    }
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (plans[i] && (!best || plans[i]->arena_size < best->arena_size)) {
        best = std::move(plans[i]);
        best_name = names[i];
      }
    }
    std::string cut_note;
    if (unplaced && best_name == "best-fit")
      cut_note = "time limit reached in best-fit's first plan: " + std::to_string(unplaced) +
                 " of " + std::to_string(problem.buffers.size()) +
                 " buffers placed last in, first out above the others instead of simulated";
    const double heuristic_seconds = elapsed();
    std::size_t bound = peak_bound;
    std::string note;

    // 2. The parts: planned when the heuristics' cost (with a margin: large parts also get the
    // local search) fits in the time left; the exact search on the critical ones after that,
    // in half the time left when the neighbourhood search may follow.
    const bool refine = problem.buffers.size() <= kRefineMax;
    if (best->arena_size > bound && Clock::now() < deadline) {
      detail::Decomposition parts = detail::decompose(problem);
      const auto now = Clock::now();
      const double left = std::chrono::duration<double>(deadline - now).count();
      const auto parts_deadline = refine ? now + (deadline - now) / 2 : deadline;
      // One part too large for the exact search: the parts phase would only repeat the
      // heuristics on it; the neighbourhood search gets the time instead.
      const bool one_large_part = parts.leaves.size() == 1 && parts.leaves[0].members.size() > 4000;
      if (1.5 * heuristic_seconds < left && !(refine && one_large_part)) {
        if (auto large = detail::plan_by_parts(problem, parts, parts_deadline, threads)) {
          bound = std::max(bound, large->lower_bound);
          note = std::to_string(large->leaves) + " parts (" + std::to_string(large->distinct) +
                 " distinct), " + std::to_string(large->searched) + " searched exactly";
          if (large->plan.arena_size < best->arena_size) {
            best = std::move(large->plan);
            best_name = "best";
          }
        }
      }
    }
    // 3a. The window around the peak planned exactly at the bound, the rest around it (half
    // the time left at most: on the real training graphs it closes the gap where the
    // neighbourhood search after it, in 2,600 moves, improved one).
    if (refine && best->arena_size > bound && Clock::now() < deadline) {
      const auto until = Clock::now() + (deadline - Clock::now()) / 2;
      const std::uint64_t work = options.work_budget
                                     ? options.work_budget / 2
                                     : exact_work_for(std::min(options.time_limit / 2,
                                                               std::chrono::duration<double>(1e6)));
      if (auto w = detail::plan_from_peak_window(open, bound, best->arena_size, until, work)) {
        best = std::move(w->plan);
        best_name = "best";
        note += std::string(note.empty() ? "" : "; ") + "the " + std::to_string(w->window_buffers) +
                " buffers around the peak planned exactly";
      }
    }
    // 3. The neighbourhood search on the best plan so far, leaving a tenth of the time limit
    // for the bound. Its work is bounded too, so that a fast machine gives the same plan.
    if (refine && best->arena_size > bound && Clock::now() < deadline) {
      detail::RefineOptions ro;
      ro.threads = threads;
      ro.target = bound;
      ro.deadline =
          deadline - std::chrono::duration_cast<Clock::duration>(
                         std::min(options.time_limit, std::chrono::duration<double>(1e7)) / 10);
      ro.work_budget = refine_budget(options.time_limit.count());
      detail::RefineResult r = detail::refine_plan(open, *best, ro);
      if (r.plan.arena_size < best->arena_size) {
        best = std::move(r.plan);
        best_name = "best";
      }
      note += std::string(note.empty() ? "" : "; ") +
              "neighbourhood search: " + std::to_string(r.moves) + " moves, " +
              std::to_string(r.improved) + " improving";
    }
    // 4. A relaxation near the peak solved exactly, with what time is left (at most a tenth).
    if (best->arena_size > bound && Clock::now() < deadline) {
      auto until = std::min(deadline, Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                         options.time_limit / 10));
      bound = std::max(bound, detail::window_lower_bound(problem, until));
    }

    SolveResult result;
    result.lower_bound = std::min(bound, best->arena_size);
    result.proven_optimal = best->arena_size <= bound;
    result.solver = best_name;
    if (bound > peak_bound)
      note += std::string(note.empty() ? "" : "; ") + "lower bound " + std::to_string(bound) +
              " (" + fmt_ratio(bound, peak_bound) + " x the peak-live bound)";
    if (!result.proven_optimal)
      note += std::string(note.empty() ? "" : "; ") + "gap " +
              percent(best->arena_size, result.lower_bound);
    if (problem.capacity && best->arena_size > *problem.capacity) {
      result.proven_infeasible = bound > *problem.capacity;
      note = "arena " + std::to_string(best->arena_size) + " exceeds the capacity " +
             std::to_string(*problem.capacity) + (note.empty() ? "" : "; " + note);
    } else {
      result.plan = std::move(best);
    }
    if (!cut_note.empty()) note = cut_note + (note.empty() ? "" : "; " + note);
    result.note = note;
    result.seconds = elapsed();
    return result;
  }
};

}  // namespace

std::unique_ptr<Solver> make_best_solver() {
  return std::make_unique<BestSolver>();
}

}  // namespace modelmem::plan
