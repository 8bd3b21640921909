// The greedy heuristics. Each tries a few orderings and tie-breaks and keeps the smallest arena:
// on hard instances the tie-break alone moves the arena by several percent, and trying a
// handful costs little. The effort is bounded by counting the placed buffers the placement
// scans look at, not by a clock, so results are deterministic and the same on every machine.
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <tuple>

#include "modelmem/core/error.hpp"
#include "modelmem/plan/heuristics.hpp"
#include "plan/buffer_placer.hpp"

namespace modelmem::plan {
namespace {

using Order = std::vector<std::size_t>;
using Clock = std::chrono::steady_clock;
constexpr Clock::time_point kNoDeadline = Clock::time_point::max();

// About 0.1 s of scanning on a slow core; the first ordering always runs whatever its cost.
constexpr std::size_t kWorkBudget = 60'000'000;

Time lifetime(const Buffer& b) {
  return b.end - b.start;
}

/// Buffers ordered by (key, index) where key(i) is a tuple: sorted as plain keys rather than by
/// comparing through the buffers (a million buffers: a tenth of a second, not a second), the
/// same order as a stable sort by key.
template <typename KeyFn>
Order keyed_order(std::size_t n, KeyFn key) {
  using Key = decltype(key(std::size_t{0}));
  std::vector<std::pair<Key, std::size_t>> keys(n);
  for (std::size_t i = 0; i < n; ++i) keys[i] = {key(i), i};
  std::sort(keys.begin(), keys.end());
  Order order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = keys[i].second;
  return order;
}

/// An ordering made when its turn comes: a deadline may end the list before the later ones are
/// sorted (four sorts of a million buffers cost seconds on a busy core).
using OrderMaker = std::function<Order()>;

struct Placement {
  Plan plan;
  Order order;
  GapChoice choice = GapChoice::kBest;
};

/// Runs place_in_order for each (choice, order) until the work budget is spent; keeps the best.
/// Every order with the best gap first, then with the first gap: on the real instances the
/// ordering moves the arena more than the gap choice does, so a budget that allows two runs
/// tries two orders. Past `stop_at` a run gives up, and the plans already made are kept (none:
/// TimeUp).
Placement best_placement(const Problem& problem, const std::vector<OrderMaker>& makers,
                         Clock::time_point deadline = kNoDeadline,
                         Clock::time_point stop_at = kNoDeadline,
                         std::size_t budget = kWorkBudget) {
  Placement best;
  bool have = false;
  std::size_t work = 0;
  if (stop_at != kNoDeadline && Clock::now() >= stop_at) throw detail::TimeUp{};
  std::vector<std::optional<Order>> orders(makers.size());
  const auto building = Clock::now();
  detail::Placer placer(problem);
  // Freeing the placer's index cannot be given up either, and must end by stop_at too: the
  // placements stop the index's build time before it. Measured at 10^6 buffers with the time
  // tree: 0.43 s to build, 0.13 s to free since its lists come from one pool (0.4 s before), so
  // the margin is about three times what freeing takes.
  const auto built = Clock::now() - building;
  if (stop_at != kNoDeadline) stop_at -= std::min(built, stop_at - building);
  auto time_up = [&] { return stop_at != kNoDeadline && Clock::now() >= stop_at; };
  if (time_up()) throw detail::TimeUp{};
  for (GapChoice choice : {GapChoice::kBest, GapChoice::kFirst}) {
    for (std::size_t k = 0; k < makers.size(); ++k) {
      std::size_t before = work;
      std::optional<Plan> plan;
      try {
        if (!orders[k]) orders[k] = makers[k]();
        if (time_up()) throw detail::TimeUp{};
        plan = placer.place(*orders[k], choice, work, stop_at);
      } catch (const detail::TimeUp&) {
        if (!have) throw;
        return best;
      }
      if (!have || plan->arena_size < best.plan.arena_size) {
        best = {std::move(*plan), *orders[k], choice};
        have = true;
      }
      // Stop when the next run would probably cross the budget (or the caller's deadline).
      if (work + (work - before) > budget) return best;
      if (deadline != kNoDeadline && Clock::now() >= deadline) return best;
    }
  }
  return best;
}

Plan naive_plan(const Problem& problem) {
  Plan plan;
  plan.offsets.reserve(problem.buffers.size());
  std::size_t top = 0;
  for (const Buffer& b : problem.buffers) {
    std::size_t at = detail::align_up(top, b);
    plan.offsets.push_back(at);
    if (__builtin_add_overflow(at, b.size, &top)) detail::throw_offset_overflow(b);
  }
  plan.arena_size = top;
  return plan;
}

std::vector<OrderMaker> greedy_size_orders(const Problem& problem) {
  const auto& bufs = problem.buffers;
  const std::size_t n = bufs.size();
  // Larger first; among equal sizes, longer-lived first (they constrain more of the schedule),
  // earlier start, shorter-lived, later end.
  auto by = [&bufs, n](auto tie) {
    return [&bufs, n, tie] {
      return keyed_order(n, [&](std::size_t i) {
        return std::pair<std::size_t, Time>(~bufs[i].size, tie(bufs[i]));
      });
    };
  };
  return {
      by([](const Buffer& b) { return -lifetime(b); }), by([](const Buffer& b) { return b.start; }),
      by([](const Buffer& b) { return lifetime(b); }), by([](const Buffer& b) { return -b.end; })};
}

Plan greedy_size_plan(const Problem& problem, Clock::time_point deadline,
                      Clock::time_point stop_at = kNoDeadline, std::size_t budget = kWorkBudget) {
  return best_placement(problem, greedy_size_orders(problem), deadline, stop_at, budget).plan;
}
Plan greedy_size_plan(const Problem& problem) {
  return greedy_size_plan(problem, kNoDeadline);
}

// Greedy by breadth (Pisarchyk and Lee, 2020): visit the schedule's steps from the largest live
// total down, and at each step place its not yet placed buffers. A buffer is therefore placed
// at the first visited step of its lifetime, so the visit reduces to an ordering of buffers by
// (rank of the widest step they cover, then a tie-break within the step).
/// Each buffer's rank: that of the widest step of its lifetime (n > 0).
std::vector<std::size_t> breadth_rank(const Problem& problem) {
  const auto& bufs = problem.buffers;
  const std::size_t n = bufs.size();
  const std::vector<Time> times = detail::time_points(problem);
  auto index_of = [&](Time t) { return detail::time_index(times, t); };
  // Elementary steps [times[j], times[j+1]) and the live total on each.
  const std::size_t m = times.size() - 1;
  std::vector<std::size_t> first(n), last(n);  // step range [first, last) of each buffer
  std::vector<std::size_t> breadth(m + 1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    first[i] = index_of(bufs[i].start);
    last[i] = index_of(bufs[i].end);
    breadth[first[i]] += bufs[i].size;
    breadth[last[i]] -= bufs[i].size;
  }
  for (std::size_t j = 1; j <= m; ++j) breadth[j] += breadth[j - 1];
  Order steps(m);
  std::iota(steps.begin(), steps.end(), 0);
  std::stable_sort(steps.begin(), steps.end(),
                   [&](std::size_t a, std::size_t b) { return breadth[a] > breadth[b]; });
  std::vector<std::size_t> visit_rank(m);
  for (std::size_t r = 0; r < m; ++r) visit_rank[steps[r]] = r;

  // A bottom-up segment tree for the minimum visit rank over a buffer's steps (2m words, where
  // a sparse table took m log m: 300 MB at a million buffers).
  std::vector<std::size_t> tree(2 * m);
  for (std::size_t j = 0; j < m; ++j) tree[m + j] = visit_rank[j];
  for (std::size_t j = m - 1; j >= 1; --j) tree[j] = std::min(tree[2 * j], tree[2 * j + 1]);
  std::vector<std::size_t> rank(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t best = m;
    for (std::size_t l = first[i] + m, r = last[i] + m; l < r; l /= 2, r /= 2) {
      if (l & 1) best = std::min(best, tree[l++]);
      if (r & 1) best = std::min(best, tree[--r]);
    }
    rank[i] = best;
  }

  return rank;
}

std::vector<OrderMaker> greedy_breadth_orders(const Problem& problem) {
  const auto& bufs = problem.buffers;
  const std::size_t n = bufs.size();
  if (n == 0) return {[] { return Order{}; }};
  // The ranks too are made when the first ordering's turn comes, once for both.
  auto shared = std::make_shared<std::vector<std::size_t>>();
  auto ranks = [&problem, shared]() -> const std::vector<std::size_t>& {
    if (shared->empty()) *shared = breadth_rank(problem);
    return *shared;
  };
  return {[&bufs, n, ranks] {
            const std::vector<std::size_t>& rank = ranks();
            return keyed_order(n, [&](std::size_t i) {
              return std::tuple<std::size_t, std::size_t, Time>(rank[i], ~bufs[i].size,
                                                                -lifetime(bufs[i]));
            });
          },
          [&bufs, n, ranks] {
            const std::vector<std::size_t>& rank = ranks();
            return keyed_order(n, [&](std::size_t i) {
              return std::tuple<std::size_t, Time, std::size_t>(rank[i], -lifetime(bufs[i]),
                                                                ~bufs[i].size);
            });
          }};
}

Plan greedy_breadth_plan(const Problem& problem, Clock::time_point deadline,
                         Clock::time_point stop_at = kNoDeadline,
                         std::size_t budget = kWorkBudget) {
  return best_placement(problem, greedy_breadth_orders(problem), deadline, stop_at, budget).plan;
}
Plan greedy_breadth_plan(const Problem& problem) {
  return greedy_breadth_plan(problem, kNoDeadline);
}

/// With `unplaced`: the first simulation is never given up; past `stop_at` it places the buffers
/// it has not reached above the others, last in, first out, and returns that plan at once.
Plan best_fit_plan(const Problem& problem, Clock::time_point deadline,
                   Clock::time_point stop_at = kNoDeadline, std::size_t* unplaced = nullptr) {
  const auto& bufs = problem.buffers;
  const std::size_t n = bufs.size();
  // Among buffers that start at the same step: larger first, longer-lived first, or the file's.
  // Each rank is made when its turn comes (a deadline may end the list first), sorted as plain
  // keys rather than through the buffers, and the end order is shared by every simulation.
  struct Key {
    std::size_t first;
    Time second;
    std::size_t index;
  };
  auto rank_of = [&](int which) {
    Order rank(n);
    if (which == 2) {
      std::iota(rank.begin(), rank.end(), 0);
      return rank;
    }
    std::vector<Key> keys(n);
    for (std::size_t i = 0; i < n; ++i) keys[i] = Key{bufs[i].size, bufs[i].end, i};
    if (which == 0) {
      std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
        if (a.first != b.first) return a.first > b.first;
        if (a.second != b.second) return a.second > b.second;
        return a.index < b.index;
      });
    } else {
      std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
        if (a.second != b.second) return a.second > b.second;
        if (a.first != b.first) return a.first > b.first;
        return a.index < b.index;
      });
    }
    for (std::size_t r = 0; r < n; ++r) rank[keys[r].index] = r;
    return rank;
  };
  const Order by_end = detail::end_order(problem);
  std::optional<Plan> best;
  for (int which = 0; which < 3; ++which) {
    if (best && stop_at != kNoDeadline && Clock::now() >= stop_at) return *best;
    const Order rank = rank_of(which);
    for (GapChoice choice : {GapChoice::kBest, GapChoice::kFirst}) {
      std::size_t cut = 0;
      std::optional<Plan> plan;
      try {
        plan = detail::simulate_heap(problem, rank, choice, stop_at, by_end,
                                     best       ? nullptr
                                     : unplaced ? &cut
                                                : nullptr);
      } catch (const detail::TimeUp&) {
        if (!best) throw;
        return *best;  // a later simulation past `stop_at`: the plans made are kept
      }
      if (cut) {
        *unplaced = cut;
        return *plan;
      }
      if (!best || plan->arena_size < best->arena_size) best = std::move(plan);
      if (deadline != kNoDeadline && Clock::now() >= deadline) return *best;
    }
  }
  return best ? *best : Plan{};
}
Plan best_fit_plan(const Problem& problem) {
  return best_fit_plan(problem, kNoDeadline);
}

// Local search over the placement order: a buffer that reaches the top of the arena is moved
// to a random earlier position, so it is placed before the buffers that pushed it up; the move
// is kept when the arena does not grow (sideways moves let the search cross plateaus). The
// random source has a fixed seed: the same problem always gives the same plan.
void improve_by_reordering(const Problem& problem, Placement& best, std::size_t budget,
                           Clock::time_point deadline = kNoDeadline) {
  const std::size_t n = problem.buffers.size();
  if (n < 2) return;
  std::mt19937_64 rng(0x5eed);
  Order order = best.order;
  std::vector<std::size_t> position(n), top;
  const std::size_t lb = lower_bound(problem);
  // Small problems converge long before the budget: stop after many moves without progress.
  const std::size_t patience = 20 * n + 100;
  std::size_t work = 0, stale = 0;
  detail::Placer placer(problem);
  while (work < budget && best.plan.arena_size > lb && stale < patience) {
    if (deadline != kNoDeadline && Clock::now() >= deadline) return;
    ++stale;
    top.clear();
    for (std::size_t i = 0; i < n; ++i)
      if (best.plan.offsets[i] + problem.buffers[i].size == best.plan.arena_size) top.push_back(i);
    for (std::size_t p = 0; p < n; ++p) position[order[p]] = p;
    std::size_t victim = top[rng() % top.size()];
    std::size_t from = position[victim];
    if (from == 0) {
      // Already first: perturb elsewhere so the next attempt differs.
      std::swap(order[1 + rng() % (n - 1)], order[rng() % n]);
    } else {
      std::size_t to = rng() % from;
      std::rotate(order.begin() + to, order.begin() + from, order.begin() + from + 1);
    }
    Plan plan = placer.place(order, best.choice, work);
    if (plan.arena_size <= best.plan.arena_size) {
      if (plan.arena_size < best.plan.arena_size) stale = 0;
      best.plan = std::move(plan);
      best.order = order;
    } else {
      order = best.order;
    }
  }
}

class HeuristicSolver final : public Solver {
 public:
  HeuristicSolver(std::string name, Plan (*plan)(const Problem&))
      : name_(std::move(name)), plan_(plan) {}
  std::string name() const override { return name_; }

  SolveResult solve(const Problem& problem, const SolveOptions&) const override {
    check_problem(problem);
    auto t0 = std::chrono::steady_clock::now();
    SolveResult result;
    result.solver = name_;
    result.lower_bound = lower_bound(problem);
    if (problem.capacity && result.lower_bound > *problem.capacity) {
      result.proven_infeasible = true;
      result.note = "lower bound " + std::to_string(result.lower_bound) + " exceeds capacity " +
                    std::to_string(*problem.capacity);
    } else {
      Plan plan = plan_(problem);
      if (problem.capacity && plan.arena_size > *problem.capacity) {
        result.note = "arena " + std::to_string(plan.arena_size) + " exceeds capacity " +
                      std::to_string(*problem.capacity);
      } else {
        result.proven_optimal = plan.arena_size == result.lower_bound;
        result.plan = std::move(plan);
      }
    }
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return result;
  }

 private:
  std::string name_;
  Plan (*plan_)(const Problem&);
};

}  // namespace

std::unique_ptr<Solver> make_naive_solver() {
  return std::make_unique<HeuristicSolver>("naive", &naive_plan);
}
std::unique_ptr<Solver> make_greedy_size_solver() {
  return std::make_unique<HeuristicSolver>(
      "greedy-size", static_cast<Plan (*)(const Problem&)>(&greedy_size_plan));
}
std::unique_ptr<Solver> make_greedy_breadth_solver() {
  return std::make_unique<HeuristicSolver>(
      "greedy-breadth", static_cast<Plan (*)(const Problem&)>(&greedy_breadth_plan));
}
std::unique_ptr<Solver> make_best_fit_solver() {
  return std::make_unique<HeuristicSolver>("best-fit",
                                           static_cast<Plan (*)(const Problem&)>(&best_fit_plan));
}

Plan best_heuristic_plan(const Problem& problem, std::size_t search_effort) {
  return detail::best_heuristic_plan_until(problem, search_effort, kNoDeadline);
}

namespace detail {

Plan best_heuristic_plan_until(const Problem& problem, std::size_t search_effort,
                               Clock::time_point deadline) {
  Plan heap = best_fit_plan(problem, deadline);
  Placement best = best_placement(problem, greedy_size_orders(problem), deadline);
  Placement breadth = best_placement(problem, greedy_breadth_orders(problem), deadline);
  if (breadth.plan.arena_size < best.plan.arena_size) best = std::move(breadth);
  improve_by_reordering(problem, best, search_effort, deadline);
  return heap.arena_size < best.plan.arena_size ? heap : best.plan;
}

Plan heuristic_plan(const std::string& name, const Problem& problem, Clock::time_point deadline,
                    Clock::time_point stop_at, std::size_t work_budget, std::size_t* unplaced) {
  if (name == "naive") return naive_plan(problem);
  if (name == "best-fit" && unplaced) return best_fit_plan(problem, deadline, stop_at, unplaced);
  if (stop_at != kNoDeadline && Clock::now() >= stop_at) throw TimeUp{};
  const std::size_t budget = work_budget ? work_budget : kWorkBudget;
  if (name == "greedy-size") return greedy_size_plan(problem, deadline, stop_at, budget);
  if (name == "greedy-breadth") return greedy_breadth_plan(problem, deadline, stop_at, budget);
  if (name == "best-fit") return best_fit_plan(problem, deadline, stop_at);
  throw InvalidInput("unknown heuristic '" + name + "'");
}

const std::vector<std::string>& heuristic_names() {
  static const std::vector<std::string> names = {"naive", "greedy-size", "greedy-breadth",
                                                 "best-fit"};
  return names;
}

}  // namespace detail

}  // namespace modelmem::plan
