// The exact solver: splits the problem into time-independent parts, then either decides one
// capacity or minimises the arena by a series of capacity decisions (see minimise()).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "exact_search.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/plan/exact.hpp"

namespace modelmem::plan {
namespace {

using detail::ComponentSearch;
using detail::Outcome;
using detail::SearchBudget;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxExactBuffers = 20'000;

// The exact search's work a second (SolveOptions::work_budget, exact_work_for): measured here
// 4.6 to 6.7 x 10^7 on an idle core (random problems of 400 and 1,500 buffers, 2026-12-02); a
// loaded core gets less, so a work budget runs somewhat longer there than its time limit.
constexpr double kExactWorkPerSecond = 4e7;

// Groups buffers into parts whose lifetimes chain together: a time point that no buffer spans
// separates parts that can be planned independently (the arena is the largest of theirs).
std::vector<std::vector<std::size_t>> split_in_time(const Problem& problem, bool decompose) {
  std::vector<std::size_t> order(problem.buffers.size());
  std::iota(order.begin(), order.end(), 0);
  if (!decompose) {
    std::vector<std::vector<std::size_t>> whole;
    if (!order.empty()) whole.push_back(std::move(order));
    return whole;
  }
  std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return problem.buffers[x].start < problem.buffers[y].start;
  });
  std::vector<std::vector<std::size_t>> parts;
  Time reach = 0;
  for (std::size_t i : order) {
    const Buffer& b = problem.buffers[i];
    if (parts.empty() || b.start >= reach) {
      parts.emplace_back();
      reach = b.end;
    }
    parts.back().push_back(i);
    reach = std::max(reach, b.end);
  }
  return parts;
}

// Stacks every buffer on top of the previous one: always valid, used only as a last resort.
std::vector<std::size_t> stacked(const Problem& problem, const std::vector<std::size_t>& members) {
  std::vector<std::size_t> offsets;
  std::size_t top = 0;
  for (std::size_t i : members) {
    const Buffer& b = problem.buffers[i];
    std::size_t a = std::max<std::size_t>(b.alignment, 1);
    top = checked_add(top, (a - top % a) % a, "stacked arena");
    offsets.push_back(top);
    top = checked_add(top, b.size, "stacked arena");
  }
  return offsets;
}

std::size_t part_arena(const Problem& problem, const std::vector<std::size_t>& members,
                       const std::vector<std::size_t>& offsets) {
  std::size_t arena = 0;
  for (std::size_t k = 0; k < members.size(); ++k)
    arena = std::max(arena, offsets[k] + problem.buffers[members[k]].size);
  return arena;
}

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", x * 100.0);
  return buf;
}

class ExactSolver final : public Solver {
 public:
  explicit ExactSolver(ExactOptions options) : options_(options) {}
  std::string name() const override { return "exact"; }

  SolveResult solve(const Problem& problem, const SolveOptions& options) const override {
    if (!options.checked) check_problem(problem);
    const auto started = Clock::now();
    if (problem.buffers.size() > kMaxExactBuffers) {
      // Its set-up and first descent cost O(n x time sections) per attempt: far past any time
      // limit at this size. Said, not attempted; `best` decomposes such problems.
      SolveResult result;
      result.solver = "exact";
      result.lower_bound = lower_bound(problem);
      result.note = "too large for the exact search (" + std::to_string(problem.buffers.size()) +
                    " buffers, at most " + std::to_string(kMaxExactBuffers) +
                    "): best plans large problems by parts";
      return result;
    }
    Run run(problem, options, options_, started);
    SolveResult result = problem.capacity ? run.decide(*problem.capacity) : run.minimise();
    result.solver = "exact";
    result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
    return result;
  }

 private:
  // The state of one solve() call.
  class Run {
   public:
    Run(const Problem& problem, const SolveOptions& options, const ExactOptions& exact,
        Clock::time_point started)
        : problem_(problem),
          options_(options),
          started_(started),
          budget_(deadline_of(started, options.time_limit), exact.node_limit, options.work_budget,
                  [this] { report(); }) {
      for (auto& members : split_in_time(problem, exact.decompose)) {
        parts_.emplace_back(problem, std::move(members), exact.memoize);
        lower_bound_ = std::max(lower_bound_, parts_.back().lower_bound());
        unit_ = std::gcd(unit_, parts_.back().unit());
      }
      if (unit_ == 0) unit_ = 1;
      offsets_.resize(parts_.size());
      arena_.assign(parts_.size(), 0);
      have_.assign(parts_.size(), false);
    }

    SolveResult decide(std::size_t capacity) {
      SolveResult r;
      r.lower_bound = lower_bound_;
      if (lower_bound_ > capacity) {
        r.proven_infeasible = true;
        r.note = "lower bound " + std::to_string(lower_bound_) + " exceeds the capacity";
        return r;
      }
      switch (attempt(capacity, budget_.deadline())) {
        case Outcome::kFound:
          r.plan = assemble();
          r.proven_optimal = r.plan->arena_size == lower_bound_;
          break;
        case Outcome::kInfeasible:
          r.proven_infeasible = true;
          r.note = "proven: no plan fits in " + std::to_string(capacity) + " bytes";
          break;
        case Outcome::kStopped:
          r.note = budget_.counted_out() ? "node limit reached before a plan was found"
                                         : "time limit reached before a plan was found";
          break;
      }
      return r;
    }

    // Tightens the capacity from the best known arena down toward the proven lower bound. Each
    // step decides one capacity within a time slice: a plan found lowers `hi_`, a failure proven
    // raises `lo`, and a slice running out marks that capacity as hard, so the next probe goes
    // halfway up toward `hi_`; once every capacity below `hi_` is hard, the slices double.
    SolveResult minimise() {
      SolveResult r;
      seed();
      std::size_t lo = lower_bound_;
      const Clock::time_point deadline = budget_.deadline();
      const double total = std::chrono::duration<double>(deadline - started_).count();
      double slice = std::max(0.05, total / 40.0);
      // With a work budget the slices are counted in work, from the same fortieth.
      const bool counted = options_.work_budget != 0;
      std::uint64_t work_slice = std::max<std::uint64_t>(options_.work_budget / 40, 1);
      bool first = true;
      std::size_t hard = 0;  // highest capacity whose last slice ran out (0: none)
      while (lo < hi_ && !budget_.out_of_time()) {
        std::size_t base = lo;
        if (hard != 0 && hard + unit_ > base) base = hard + unit_;
        if (base >= hi_) {
          slice *= 2;
          work_slice *= 2;
          hard = 0;
          base = lo;
        }
        std::size_t cap = base;
        if (!first) {
          std::size_t steps = (hi_ - 1 - base) / unit_;
          cap = base + steps / 2 * unit_;
        }
        first = false;
        Clock::time_point until = deadline;
        std::uint64_t work_end = SearchBudget::kNoEnd;
        if (counted)
          work_end = budget_.work() + work_slice;
        else
          until = std::min(deadline, Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(slice)));
        switch (attempt(cap, until, work_end)) {
          case Outcome::kFound:
            break;  // attempt() lowered hi_
          case Outcome::kInfeasible:
            lo = cap + unit_;
            break;
          case Outcome::kStopped:
            hard = cap;
            break;
        }
        report();
      }
      report();  // the best arena found, also when the first plans needed no search
      r.plan = assemble();
      r.lower_bound = std::min(lo, hi_);
      r.proven_optimal = lo >= hi_;
      if (!r.proven_optimal) {
        double gap = static_cast<double>(hi_ - lo) / static_cast<double>(hi_);
        r.note = std::string(budget_.counted_out() ? "node" : "time") +
                 " limit reached; proven lower bound " + std::to_string(lo) + ", gap " +
                 percent(gap);
      }
      return r;
    }

   private:
    static Clock::time_point deadline_of(Clock::time_point start,
                                         std::chrono::duration<double> limit) {
      if (limit.count() <= 0) return start;
      if (limit.count() > 1e7) return Clock::time_point::max();
      return start + std::chrono::duration_cast<Clock::duration>(limit);
    }

    void report() {
      if (!options_.progress) return;
      double elapsed = std::chrono::duration<double>(Clock::now() - started_).count();
      options_.progress(hi_, elapsed);
    }

    // First plans: the search's own first descent (a skyline greedy) under a loose capacity,
    // or the caller's initial plan where it is better.
    void seed() {
      for (std::size_t p = 0; p < parts_.size(); ++p) {
        auto& part = parts_[p];
        std::vector<std::size_t> fallback = stacked(problem_, part.members());
        std::size_t loose = part_arena(problem_, part.members(), fallback);
        budget_.begin_attempt(budget_.deadline(), part.members().size());
        std::vector<std::size_t> found;
        if (part.decide(loose, budget_, found) == Outcome::kFound) {
          offsets_[p] = std::move(found);
        } else {
          offsets_[p] = std::move(fallback);
        }
        arena_[p] = part_arena(problem_, part.members(), offsets_[p]);
        have_[p] = true;
      }
      std::vector<Plan> known;
      Problem open = problem_;
      open.capacity.reset();
      if (options_.initial && options_.initial->offsets.size() == problem_.buffers.size() &&
          validate(open, *options_.initial))
        known.push_back(*options_.initial);
      // The registry's heuristics take milliseconds and keep exact never worse than them.
      for (const std::string& name : solver_names()) {
        if (name == "exact" || name == "best") continue;
        SolveResult h = make_solver(name)->solve(open, options_);
        if (h.plan) known.push_back(std::move(*h.plan));
      }
      for (const Plan& plan : known) {
        for (std::size_t p = 0; p < parts_.size(); ++p) {
          std::vector<std::size_t> mine;
          for (std::size_t i : parts_[p].members()) mine.push_back(plan.offsets[i]);
          std::size_t a = part_arena(problem_, parts_[p].members(), mine);
          if (a < arena_[p]) {
            offsets_[p] = std::move(mine);
            arena_[p] = a;
          }
        }
      }
      hi_ = 0;
      for (std::size_t a : arena_) hi_ = std::max(hi_, a);
    }

    // Decides `capacity` for every part not yet within it, largest arena first.
    Outcome attempt(std::size_t capacity, Clock::time_point until,
                    std::uint64_t work_end = SearchBudget::kNoEnd) {
      std::vector<std::size_t> order(parts_.size());
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(),
                [&](std::size_t x, std::size_t y) { return arena_[x] > arena_[y]; });
      for (std::size_t p : order) {
        if (have_[p] && arena_[p] <= capacity) continue;
        budget_.begin_attempt(until, parts_[p].members().size(), work_end);
        std::vector<std::size_t> found;
        Outcome o = parts_[p].decide(capacity, budget_, found);
        if (o != Outcome::kFound) return o;
        offsets_[p] = std::move(found);
        arena_[p] = part_arena(problem_, parts_[p].members(), offsets_[p]);
        have_[p] = true;
      }
      hi_ = 0;
      for (std::size_t a : arena_) hi_ = std::max(hi_, a);
      return Outcome::kFound;
    }

    Plan assemble() const {
      Plan plan;
      plan.offsets.assign(problem_.buffers.size(), 0);
      for (std::size_t p = 0; p < parts_.size(); ++p) {
        const auto& members = parts_[p].members();
        for (std::size_t k = 0; k < members.size(); ++k) plan.offsets[members[k]] = offsets_[p][k];
      }
      plan.arena_size = arena_size_of(problem_, plan.offsets);
      return plan;
    }

    const Problem& problem_;
    const SolveOptions& options_;
    Clock::time_point started_;
    SearchBudget budget_;
    std::vector<ComponentSearch> parts_;
    std::vector<std::vector<std::size_t>> offsets_;
    std::vector<std::size_t> arena_;
    std::vector<bool> have_;
    std::size_t lower_bound_ = 0;
    std::size_t unit_ = 0;
    std::size_t hi_ = 0;
  };

  ExactOptions options_;
};

}  // namespace

std::uint64_t exact_work_for(std::chrono::duration<double> limit) {
  const double seconds = std::clamp(limit.count(), 0.0, 1e6);
  return std::max<std::uint64_t>(static_cast<std::uint64_t>(seconds * kExactWorkPerSecond), 1);
}

std::unique_ptr<Solver> make_exact_solver(ExactOptions options) {
  return std::make_unique<ExactSolver>(options);
}

}  // namespace modelmem::plan
