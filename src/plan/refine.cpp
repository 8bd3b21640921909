// The large-neighbourhood search of `best` (see refine.hpp).
//
// Why: the greedy heuristics place every buffer once, in one global order. On training graphs
// (MindSpore's PanGu-alpha) the arena is set at a few steps where huge short-lived buffers meet
// hundreds of long-lived ones; a global order that is right there is wrong elsewhere, and a
// local search over the global order pays a whole placement (every buffer) per move. Here a
// move re-plans only a neighbourhood: the buffers near the top of the arena around one buffer
// that reaches it, with everything else fixed, so a move costs the buffers it touches and the
// search makes thousands of moves a second.
//
// A move: pick a buffer whose top is the arena; take the buffers that overlap its lifetime (or
// a wider window) and, of those, the K with the highest tops; place them again one by one, in
// one of several orders (larger first, longer-lived first, noisy sizes, random), each into the
// best (or first) gap left by the buffers that overlap it in time, or on top. Kept when the
// arena does not grow and no more buffers reach it (sideways moves cross plateaus), else
// undone. Every plan visited is valid by construction.
#include "plan/refine.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "plan/buffer_placer.hpp"
#include "plan/large.hpp"

namespace modelmem::plan::detail {
namespace {

using Clock = std::chrono::steady_clock;
using Step = std::uint32_t;

/// Which buffers overlap a range of time steps: a segment tree over the schedule's elementary
/// steps holding each buffer at the O(log m) nodes covering its lifetime (a stabbing query),
/// plus the buffers sorted by first step (those starting inside the range). Static: a move
/// changes offsets, never lifetimes.
class TimeIndex {
 public:
  explicit TimeIndex(const Problem& problem) {
    const auto& bufs = problem.buffers;
    const std::size_t n = bufs.size();
    const std::vector<Time> times = time_points(problem);
    auto index_of = [&](Time t) { return static_cast<Step>(time_index(times, t)); };
    lo_.resize(n);
    hi_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      lo_[i] = index_of(bufs[i].start);
      hi_[i] = index_of(bufs[i].end);
    }
    steps_ = times.empty() ? 1 : static_cast<Step>(times.size());
    leaves_ = 1;
    while (leaves_ < steps_) leaves_ *= 2;
    // Two passes (count, fill) into one flat array: node lists without a vector per node.
    first_.assign(2 * leaves_ + 1, 0);
    for_each_node(n, [&](std::size_t node, std::size_t) { ++first_[node + 1]; });
    for (std::size_t k = 1; k < first_.size(); ++k) first_[k] += first_[k - 1];
    items_.resize(first_.back());
    std::vector<std::size_t> fill(first_.begin(), first_.end() - 1);
    for_each_node(n, [&](std::size_t node, std::size_t i) {
      items_[fill[node]++] = static_cast<std::uint32_t>(i);
    });
    by_start_.resize(n);
    std::iota(by_start_.begin(), by_start_.end(), 0u);
    std::stable_sort(by_start_.begin(), by_start_.end(),
                     [&](std::uint32_t x, std::uint32_t y) { return lo_[x] < lo_[y]; });
    start_of_.resize(n);
    for (std::size_t k = 0; k < n; ++k) start_of_[k] = lo_[by_start_[k]];
    // The live bytes on each elementary step (static: lifetimes and sizes never change).
    load_.assign(steps_ + 1, 0);
    for (std::size_t i = 0; i < n; ++i) {
      load_[lo_[i]] += bufs[i].size;
      load_[hi_[i]] -= bufs[i].size;
    }
    for (std::size_t k = 1; k < load_.size(); ++k) load_[k] += load_[k - 1];
  }

  /// The live bytes on elementary step k.
  std::size_t load(Step k) const { return load_[k]; }

  Step lo(std::size_t i) const { return lo_[i]; }
  Step hi(std::size_t i) const { return hi_[i]; }
  Step steps() const { return steps_; }

  /// Calls f(j) once for every buffer j whose lifetime meets the steps [a, b) (a < b).
  template <class F>
  void each(Step a, Step b, F&& f) const {
    for (std::size_t node = leaves_ + a; node >= 1; node /= 2)
      for (std::size_t k = first_[node]; k < first_[node + 1]; ++k) f(items_[k]);
    auto from = std::upper_bound(start_of_.begin(), start_of_.end(), a) - start_of_.begin();
    for (auto k = static_cast<std::size_t>(from); k < start_of_.size() && start_of_[k] < b; ++k)
      f(by_start_[k]);
  }

 private:
  template <class F>
  void for_each_node(std::size_t n, F&& f) const {
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t l = leaves_ + lo_[i], r = leaves_ + hi_[i]; l < r; l /= 2, r /= 2) {
        if (l & 1) f(l++, i);
        if (r & 1) f(--r, i);
      }
  }

  std::vector<Step> lo_, hi_;
  Step steps_ = 1;
  std::size_t leaves_ = 1;
  std::vector<std::size_t> first_;
  std::vector<std::uint32_t> items_;
  std::vector<std::uint32_t> by_start_;
  std::vector<Step> start_of_;
  std::vector<std::size_t> load_;
};

/// One chain of the search: its own offsets, tops and random source.
class Chain {
 public:
  Chain(const Problem& problem, const TimeIndex& index, const Plan& start, std::uint64_t seed)
      : bufs_(problem.buffers), index_(index), off_(start.offsets), rng_(seed) {
    placed_.assign(bufs_.size(), 1);
    for (std::size_t i = 0; i < bufs_.size(); ++i) add_top(top(i));
    best_ = start;
  }

  /// Runs until the budget, the deadline or the target; returns whether the deadline stopped it.
  bool run(const RefineOptions& options, std::size_t& moves, std::size_t& improved) {
    std::size_t work = 0;
    while (work < options.work_budget && best_.arena_size > options.target) {
      if (Clock::now() >= options.deadline) return true;
      ++moves;
      const std::size_t before = arena();
      work += move();
      if (arena() < best_.arena_size) {
        best_.offsets = off_;
        best_.arena_size = arena();
      }
      if (arena() < before) ++improved;
    }
    return false;
  }

  const Plan& best() const { return best_; }

 private:
  std::size_t top(std::size_t i) const { return off_[i] + bufs_[i].size; }
  std::size_t arena() const { return tops_.empty() ? 0 : tops_.rbegin()->first; }
  void add_top(std::size_t t) { ++tops_[t]; }
  void remove_top(std::size_t t) {
    auto it = tops_.find(t);
    if (--it->second == 0) tops_.erase(it);
  }
  std::size_t random(std::size_t bound) { return bound ? rng_() % bound : 0; }

  /// One neighbourhood re-planned; returns the work done (buffers visited).
  std::size_t move() {
    const std::size_t n = bufs_.size();
    const std::size_t a0 = arena(), count0 = tops_.rbegin()->second;
    // A buffer that reaches the arena: the count-th one in index order.
    std::size_t pick = random(count0), c = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (top(i) == a0 && pick-- == 0) {
        c = i;
        break;
      }
    std::size_t work = n / 8;  // the scan above, roughly
    // The window: around a step of the critical buffer's lifetime where the live bytes come
    // close to their maximum there (where the arena is decided), a few steps wide; or its whole
    // lifetime.
    Step a = index_.lo(c), b = index_.hi(c);
    if (random(4) != 0) {
      std::size_t most = 0;
      for (Step k = a; k < b; ++k) most = std::max(most, index_.load(k));
      hot_.clear();
      for (Step k = a; k < b; ++k)
        if (index_.load(k) >= most - most / 64) hot_.push_back(k);
      work += b - a;
      const Step t = hot_[random(hot_.size())];
      const Step w = static_cast<Step>(1u << random(7));
      a = t > w ? t - w : 0;
      b = static_cast<Step>(std::min<std::size_t>(index_.steps() - 1, std::size_t{t} + w));
      if (b <= a) b = a + 1;
    }
    set_.clear();
    index_.each(a, b, [&](std::uint32_t j) { set_.push_back(j); });
    work += set_.size();
    // Which of them move: the K with the highest tops (the layer that sets the arena), or the
    // K largest of those living only near the window (the short-lived ones under that layer:
    // rearranged, they may leave room below it), the critical buffer always among them.
    const std::size_t k = std::min(set_.size(), 4 + random(kMaxSet[random(3)]));
    if (random(2)) {
      const std::size_t span = std::size_t{b - a} * 8;
      const Step lo = a > span ? static_cast<Step>(a - span) : 0, hi = static_cast<Step>(b + span);
      std::erase_if(set_, [&](std::uint32_t j) {
        return j != c && (index_.lo(j) < lo || index_.hi(j) > hi);
      });
      auto larger = [&](std::uint32_t x, std::uint32_t y) {
        return bufs_[x].size != bufs_[y].size ? bufs_[x].size > bufs_[y].size : x < y;
      };
      if (k < set_.size()) {
        std::nth_element(set_.begin(), set_.begin() + static_cast<std::ptrdiff_t>(k), set_.end(),
                         larger);
        set_.resize(k);
      }
    } else {
      auto higher = [&](std::uint32_t x, std::uint32_t y) {
        return top(x) != top(y) ? top(x) > top(y) : x < y;
      };
      if (k < set_.size()) {
        std::nth_element(set_.begin(), set_.begin() + static_cast<std::ptrdiff_t>(k), set_.end(),
                         higher);
        set_.resize(k);
      }
    }
    if (std::find(set_.begin(), set_.end(), c) == set_.end()) set_.push_back(c);
    order(set_);
    const GapChoice choice = random(3) == 0 ? GapChoice::kFirst : GapChoice::kBest;
    saved_.clear();
    double height0 = 0, height1 = 0;  // the moved bytes' tops, weighted by size
    for (std::uint32_t i : set_) {
      saved_.push_back(off_[i]);
      height0 += double(top(i)) * double(bufs_[i].size);
      remove_top(top(i));
      placed_[i] = 0;
    }
    for (std::uint32_t i : set_) {
      work += place(i, choice);
      placed_[i] = 1;
      add_top(top(i));
      height1 += double(top(i)) * double(bufs_[i].size);
    }
    // Kept: a lower arena, as high with fewer buffers at its top, or as good with the moved
    // buffers no higher on the whole (the search drifts down, never up).
    const std::size_t a1 = arena(), count1 = tops_.rbegin()->second;
    if (a1 < a0 || (a1 == a0 && (count1 < count0 || (count1 == count0 && height1 <= height0))))
      return work;
    for (std::size_t s = 0; s < set_.size(); ++s) {  // worse: undo
      remove_top(top(set_[s]));
      off_[set_[s]] = saved_[s];
      add_top(top(set_[s]));
    }
    return work;
  }

  /// Orders the set for placement: one of several keys, chosen at random.
  void order(std::vector<std::uint32_t>& set) {
    auto life = [&](std::uint32_t i) { return index_.hi(i) - index_.lo(i); };
    switch (random(4)) {
      case 0:  // larger first, then longer-lived
        std::sort(set.begin(), set.end(), [&](std::uint32_t x, std::uint32_t y) {
          if (bufs_[x].size != bufs_[y].size) return bufs_[x].size > bufs_[y].size;
          if (life(x) != life(y)) return life(x) > life(y);
          return x < y;
        });
        break;
      case 1:  // longer-lived first, then larger
        std::sort(set.begin(), set.end(), [&](std::uint32_t x, std::uint32_t y) {
          if (life(x) != life(y)) return life(x) > life(y);
          if (bufs_[x].size != bufs_[y].size) return bufs_[x].size > bufs_[y].size;
          return x < y;
        });
        break;
      case 2: {  // larger first, sizes blurred by up to +-30%
        keys_.clear();
        for (std::uint32_t i : set)
          keys_.emplace_back(double(bufs_[i].size) * (0.7 + 0.6 * double(random(1024)) / 1024.0),
                             i);
        std::sort(keys_.begin(), keys_.end(), [](const auto& x, const auto& y) {
          return x.first != y.first ? x.first > y.first : x.second < y.second;
        });
        for (std::size_t s = 0; s < set.size(); ++s) set[s] = keys_[s].second;
        break;
      }
      default:
        for (std::size_t s = set.size(); s > 1; --s) std::swap(set[s - 1], set[random(s)]);
    }
  }

  /// Places buffer i into a gap among the placed buffers that overlap it in time, or on top.
  std::size_t place(std::uint32_t i, GapChoice choice) {
    ranges_.clear();
    index_.each(index_.lo(i), index_.hi(i), [&](std::uint32_t j) {
      if (placed_[j] && j != i) ranges_.emplace_back(off_[j], top(j));
    });
    std::sort(ranges_.begin(), ranges_.end());
    const Buffer& b = bufs_[i];
    std::size_t floor = 0, best = kNone, best_gap = kNone;
    for (auto [lo, end] : ranges_) {
      if (lo > floor && lo - floor >= b.size) {
        std::size_t at;
        if (try_align_up(floor, b, at) && at <= lo && lo - at >= b.size && lo - floor < best_gap) {
          best = at;
          best_gap = lo - floor;
          if (choice == GapChoice::kFirst || best_gap == b.size) break;
        }
      }
      floor = std::max(floor, end);
    }
    off_[i] = best != kNone ? best : align_up(floor, b);
    return ranges_.size() + 1;
  }

  static constexpr std::size_t kNone = ~std::size_t{0};
  static constexpr std::size_t kMaxSet[3] = {8, 32, 128};

  const std::vector<Buffer>& bufs_;
  const TimeIndex& index_;
  std::vector<std::size_t> off_;
  std::vector<char> placed_;
  std::map<std::size_t, std::size_t> tops_;  // top address -> how many buffers end there
  std::mt19937_64 rng_;
  Plan best_;
  std::vector<std::uint32_t> set_;
  std::vector<Step> hot_;
  std::vector<std::size_t> saved_;
  std::vector<std::pair<std::size_t, std::size_t>> ranges_;
  std::vector<std::pair<double, std::uint32_t>> keys_;
};

/// The other neighbourhood: the global placement order. Greedy-size places larger buffers first,
/// but among buffers of equal or nearly equal size the order is arbitrary, and on training graphs
/// (a dozen activations of one size, live at staggered steps) it decides where the big ones
/// stack and how much the long-lived buffers above them are pushed up. A move reorders one group
/// of equal sizes (a random shuffle, a reversal, or one buffer moved within the group and its
/// neighbours of similar size), and a whole placement judges it; kept when the arena does not
/// grow. Work: the placements' own count.
class OrderChain {
 public:
  /// Chain `chain` of `chains` starts from the plain orders chain, chain + chains, ... (larger
  /// first, ties broken by longer life, earlier start, later end, shorter life, later start,
  /// earlier end); the best of them is where its walk starts.
  OrderChain(const Problem& problem, const Plan& start, std::uint64_t seed, unsigned chain,
             unsigned chains)
      : problem_(problem),
        placer_(problem),
        rng_(seed),
        best_(start),
        chain_(chain),
        chains_(chains) {
    sort_by(0);
    // Groups of equal size with more than one buffer, weighted by their bytes (the same
    // positions in every base order: only ties differ).
    const auto& bufs = problem.buffers;
    for (std::size_t i = 0; i < order_.size();) {
      std::size_t j = i;
      while (j < order_.size() && bufs[order_[j]].size == bufs[order_[i]].size) ++j;
      if (j - i > 1) {
        groups_.emplace_back(i, j);
        weight_ += double(bufs[order_[i]].size) * double(j - i);
        cumulative_.push_back(weight_);
      }
      i = j;
    }
  }

  bool run(const RefineOptions& options, std::size_t budget, std::size_t& moves,
           std::size_t& improved) {
    std::size_t work = 0;
    if (groups_.empty()) return false;
    // The base orders first: the best one is where the walk starts.
    std::vector<std::size_t> base;
    current_ = ~std::size_t{0};
    for (unsigned b = chain_; b < kBases && work < budget; b += chains_) {
      sort_by(b);
      Plan plan;
      try {
        plan = placer_.place(order_, GapChoice::kBest, work, options.deadline);
      } catch (const TimeUp&) {
        return true;
      }
      ++moves;
      if (plan.arena_size < current_) {
        current_ = plan.arena_size;
        base = order_;
      }
      if (plan.arena_size < best_.arena_size) {
        ++improved;
        best_ = std::move(plan);
      }
    }
    if (base.empty()) return false;
    order_ = std::move(base);
    while (work < budget && best_.arena_size > options.target) {
      if (Clock::now() >= options.deadline) return true;
      ++moves;
      std::vector<std::size_t> saved = order_;
      perturb();
      Plan plan;
      try {
        plan = placer_.place(order_, random(4) == 0 ? GapChoice::kFirst : GapChoice::kBest, work,
                             options.deadline);
      } catch (const TimeUp&) {
        return true;
      }
      if (plan.arena_size <= current_) {
        current_ = plan.arena_size;
        if (plan.arena_size < best_.arena_size) {
          ++improved;
          best_ = std::move(plan);
        }
      } else {
        order_ = std::move(saved);
      }
    }
    return false;
  }

  const Plan& best() const { return best_; }

 private:
  std::size_t random(std::size_t bound) { return bound ? rng_() % bound : 0; }

  static constexpr unsigned kBases = 6;

  /// order_ = larger first, ties broken by the base order's key, then by index.
  void sort_by(unsigned key) {
    const auto& bufs = problem_.buffers;
    order_.resize(bufs.size());
    std::iota(order_.begin(), order_.end(), std::size_t{0});
    auto tie = [&](std::size_t x, std::size_t y) -> bool {
      const Buffer &a = bufs[x], &b = bufs[y];
      switch (key) {
        case 0:
          return a.end - a.start > b.end - b.start;
        case 1:
          return a.start < b.start;
        case 2:
          return a.end > b.end;
        case 3:
          return a.end - a.start < b.end - b.start;
        case 4:
          return a.start > b.start;
        default:
          return a.end < b.end;
      }
    };
    std::stable_sort(order_.begin(), order_.end(), [&](std::size_t x, std::size_t y) {
      if (bufs[x].size != bufs[y].size) return bufs[x].size > bufs[y].size;
      return tie(x, y);
    });
  }

  void perturb() {
    const double r = double(rng_() % (1u << 30)) / double(1u << 30) * weight_;
    const std::size_t g = static_cast<std::size_t>(
        std::upper_bound(cumulative_.begin(), cumulative_.end(), r) - cumulative_.begin());
    auto [first, last] = groups_[std::min(g, groups_.size() - 1)];
    auto b = order_.begin() + static_cast<std::ptrdiff_t>(first);
    auto e = order_.begin() + static_cast<std::ptrdiff_t>(last);
    switch (random(4)) {
      case 0:
        for (std::size_t k = last - first; k > 1; --k) std::swap(b[k - 1], b[random(k)]);
        break;
      case 1:
        std::reverse(b, e);
        break;
      default: {  // one buffer to another place in its group
        const std::size_t from = random(last - first), to = random(last - first);
        if (from < to)
          std::rotate(b + from, b + from + 1, b + to + 1);
        else
          std::rotate(b + to, b + from, b + from + 1);
      }
    }
  }

  const Problem& problem_;
  Placer placer_;
  std::mt19937_64 rng_;
  Plan best_;
  unsigned chain_ = 0, chains_ = 1;
  std::size_t current_ = 0;
  std::vector<std::size_t> order_;
  std::vector<std::pair<std::size_t, std::size_t>> groups_;
  std::vector<double> cumulative_;
  double weight_ = 0;
};

}  // namespace

RefineResult refine_plan(const Problem& problem, const Plan& start, const RefineOptions& options) {
  RefineResult result;
  result.plan = start;
  if (problem.buffers.size() < 2 || start.arena_size <= options.target ||
      Clock::now() >= options.deadline)
    return result;
  const unsigned chains = std::max(options.threads, 1u);
  std::vector<Plan> plans(chains, start);
  std::vector<std::size_t> moves(chains, 0), improved(chains, 0);
  std::vector<char> on_time(chains, 0);
  // First the global order (half the budget and, at most, half the time), then neighbourhoods
  // of the best plan so far.
  if (options.orders) {
    RefineOptions first = options;
    const auto now = Clock::now();
    if (options.deadline != Clock::time_point::max())
      first.deadline = now + (options.deadline - now) / 2;
    parallel_for(chains, chains, [&](std::size_t k) {
      OrderChain chain(problem, start, 0x5851f42d4c957f2dULL * (k + 1), static_cast<unsigned>(k),
                       chains);
      on_time[k] = chain.run(first, options.work_budget / 2, moves[k], improved[k]);
      plans[k] = chain.best();
    });
  }
  Plan from = start;
  for (unsigned k = 0; k < chains; ++k)
    if (plans[k].arena_size < from.arena_size) from = plans[k];
  const TimeIndex index(problem);
  parallel_for(chains, chains, [&](std::size_t k) {
    Chain chain(problem, index, from, 0x9e3779b97f4a7c15ULL * (k + 1));
    RefineOptions second = options;
    second.work_budget = options.orders ? options.work_budget / 2 : options.work_budget;
    on_time[k] = chain.run(second, moves[k], improved[k]) || on_time[k];
    if (chain.best().arena_size < plans[k].arena_size) plans[k] = chain.best();
  });
  for (unsigned k = 0; k < chains; ++k) {
    result.moves += moves[k];
    result.improved += improved[k];
    result.stopped_on_time = result.stopped_on_time || on_time[k];
    if (plans[k].arena_size < result.plan.arena_size) result.plan = std::move(plans[k]);
  }
  return result;
}

}  // namespace modelmem::plan::detail
