// Greedy placement of buffers one at a time, the engine of greedy-size and greedy-breadth.
//
// Each newcomer needs the address ranges of the already placed buffers that overlap it in
// time, in address order: the gaps between them are where it may go. Two indexes give them:
//
// - OffsetOrderedSet keeps every placed buffer sorted by offset in flat arrays and scans all of
//   them, skipping those that do not overlap in time. O(n) per placement with a tiny constant;
//   best when most buffers overlap most others (dense schedules).
// - TimeTree is a segment tree over the schedule's steps: each buffer is stored at the O(log m)
//   nodes that cover its lifetime and listed at their ancestors, so a query visits only buffers
//   that do overlap the newcomer. A node keeps the union of its buffers' address ranges (merged
//   ranges: buffers packed side by side cost one entry), and the query sorts the ranges of the
//   O(log m) nodes it visits. At most O(k log k) per placement for k overlapping buffers, far
//   less when the many long-lived buffers of a training step lie packed; best when lifetimes
//   are short or nested (recorded traces, large models: a million buffers in seconds).
//
// Both give the same gaps in the same order, so the plan does not depend on which one runs;
// place_in_order_counted picks by the problem's size and average overlap. Placer keeps the index
// between placements of the same problem (the heuristics place it in many orders).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <memory_resource>
#include <optional>

#include "modelmem/core/error.hpp"
#include "plan/buffer_placer.hpp"

namespace modelmem::plan::detail {

std::vector<Time> time_points(const Problem& problem) {
  std::vector<Time> times;
  times.reserve(2 * problem.buffers.size());
  for (const Buffer& b : problem.buffers) {
    times.push_back(b.start);
    times.push_back(b.end);
  }
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  return times;
}

void throw_offset_overflow(const Buffer& b) {
  throw InvalidInput("buffer '" + b.id + "' (size " + std::to_string(b.size) + ", alignment " +
                     std::to_string(b.alignment) + "): its offset would overflow 64 bits");
}

namespace {

constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

/// Chooses the offset for `b` given the time-overlapping buffers as (offset, end address)
/// pairs in increasing offset order, produced by `each(visit)`.
class GapFinder {
 public:
  GapFinder(const Buffer& b, GapChoice choice) : b_(b), choice_(choice) {}

  /// Feeds the next overlapping buffer; false when the answer is already known.
  bool next(std::size_t lo, std::size_t end_addr) {
    if (lo > floor_ && lo - floor_ >= b_.size) {
      std::size_t at;
      if (try_align_up(floor_, b_, at) && at <= lo && lo - at >= b_.size) {
        const std::size_t gap = lo - floor_;
        if (choice_ == GapChoice::kFirst) {
          best_ = at;
          return false;
        }
        if (gap < best_gap_) {
          best_gap_ = gap;
          best_ = at;
          if (gap == b_.size) return false;  // cannot do better than an exact fit
        }
      }
    }
    floor_ = std::max(floor_, end_addr);
    return true;
  }

  std::size_t result() const { return best_ != kNone ? best_ : align_up(floor_, b_); }

 private:
  const Buffer& b_;
  GapChoice choice_;
  std::size_t floor_ = 0;  // max end address of the overlapping buffers fed so far
  std::size_t best_ = kNone;
  std::size_t best_gap_ = kNone;
};

class OffsetOrderedSet {
 public:
  explicit OffsetOrderedSet(std::size_t n) {
    offset_.reserve(n);
    end_addr_.reserve(n);
    life_.reserve(n);
  }

  void reset() {
    offset_.clear();
    end_addr_.clear();
    life_.clear();
  }

  std::size_t find(std::size_t, const Buffer& b, GapChoice choice, std::size_t& work) const {
    const std::size_t n = offset_.size();
    work += n;
    GapFinder finder(b, choice);
    for (std::size_t i = 0; i < n; ++i) {
      if (!(life_[i].first < b.end && b.start < life_[i].second)) continue;
      if (!finder.next(offset_[i], end_addr_[i])) break;
    }
    return finder.result();
  }

  void insert(std::size_t, const Buffer& b, std::size_t offset, std::size_t end_addr,
              std::size_t&) {
    auto pos = std::upper_bound(offset_.begin(), offset_.end(), offset) - offset_.begin();
    offset_.insert(offset_.begin() + pos, offset);
    end_addr_.insert(end_addr_.begin() + pos, end_addr);
    life_.insert(life_.begin() + pos, {b.start, b.end});
  }

 private:
  std::vector<std::size_t> offset_, end_addr_;
  std::vector<std::pair<Time, Time>> life_;
};

/// A set of disjoint, non-touching address ranges [lo, hi) in increasing order: the union of
/// the ranges inserted. Touching ranges merge too (the gap between them holds nothing).
class RangeUnion {
 public:
  explicit RangeUnion(std::pmr::memory_resource* memory) : ranges_(memory) {}
  void insert(std::size_t lo, std::size_t hi) {
    // The first range ending at or after lo, and the first starting after hi: everything in
    // between merges with [lo, hi).
    auto first = std::lower_bound(ranges_.begin(), ranges_.end(), lo,
                                  [](const Range& r, std::size_t v) { return r.second < v; });
    auto last = first;
    while (last != ranges_.end() && last->first <= hi) ++last;
    if (first == last) {
      ranges_.insert(first, {lo, hi});
      return;
    }
    first->first = std::min(first->first, lo);
    first->second = std::max(std::prev(last)->second, hi);
    ranges_.erase(first + 1, last);
  }
  const std::pmr::vector<std::pair<std::size_t, std::size_t>>& ranges() const { return ranges_; }
  void clear() { ranges_.clear(); }

 private:
  using Range = std::pair<std::size_t, std::size_t>;
  std::pmr::vector<Range> ranges_;
};

class TimeTree {
 public:
  explicit TimeTree(const Problem& problem) : bufs_(problem.buffers) {
    times_ = time_points(problem);
    const std::size_t steps = times_.empty() ? 1 : times_.size() - 1;
    while (leaves_ < steps) leaves_ *= 2;
    covering_.reserve(2 * leaves_);
    touching_.reserve(2 * leaves_);
    for (std::size_t i = 0; i < 2 * leaves_; ++i) {
      covering_.emplace_back(&lists_);
      touching_.emplace_back(&lists_);
    }
    node_stamp_.assign(2 * leaves_, 0);
    steps_.reserve(bufs_.size());
    for (const Buffer& b : bufs_) steps_.emplace_back(step_index(b.start), step_index(b.end));
  }

  /// Empties the tree for another placement, keeping its memory.
  void reset() {
    for (auto& u : covering_) u.clear();
    for (auto& u : touching_) u.clear();
  }

  // Every range listed at a node the query visits belongs to a buffer that overlaps the query in
  // time, so only the union of those ranges matters: each node keeps its buffers' address
  // ranges merged, and packed buffers (the usual case) cost one range for many buffers.
  std::size_t find(std::size_t index, const Buffer& b, GapChoice choice, std::size_t& work) {
    auto [l, r] = steps_[index];
    ++stamp_;
    found_.clear();
    auto take = [&](const RangeUnion& list) {
      work += 1 + list.ranges().size();
      found_.insert(found_.end(), list.ranges().begin(), list.ranges().end());
    };
    // Buffers overlapping a canonical node's range overlap the query: its touching list. Those
    // stored at an ancestor cover the whole ancestor, hence the query too: covering lists.
    for_each_canonical(l, r, [&](std::size_t node) {
      take(touching_[node]);
      for (std::size_t a = node / 2; a >= 1 && node_stamp_[a] != stamp_; a /= 2) {
        node_stamp_[a] = stamp_;
        take(covering_[a]);
      }
    });
    std::sort(found_.begin(), found_.end());
    work += found_.size();
    GapFinder finder(b, choice);
    for (const auto& [lo, end_addr] : found_)
      if (!finder.next(lo, end_addr)) break;
    return finder.result();
  }

  void insert(std::size_t index, const Buffer&, std::size_t offset, std::size_t end_addr,
              std::size_t& work) {
    auto [l, r] = steps_[index];
    ++stamp_;
    for_each_canonical(l, r, [&](std::size_t node) {
      covering_[node].insert(offset, end_addr);
      ++work;
      for (std::size_t a = node; a >= 1 && node_stamp_[a] != stamp_; a /= 2) {
        node_stamp_[a] = stamp_;
        touching_[a].insert(offset, end_addr);
        ++work;
      }
    });
  }

 private:
  std::uint32_t step_index(Time t) const {
    return static_cast<std::uint32_t>(std::lower_bound(times_.begin(), times_.end(), t) -
                                      times_.begin());
  }

  /// The O(log m) nodes whose ranges partition the steps [l, r).
  template <typename F>
  void for_each_canonical(std::size_t l, std::size_t r, F&& f) const {
    for (l += leaves_, r += leaves_; l < r; l /= 2, r /= 2) {
      if (l & 1) f(l++);
      if (r & 1) f(--r);
    }
  }

  const std::vector<Buffer>& bufs_;
  std::vector<Time> times_;
  std::size_t leaves_ = 1;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> steps_;  // [first, last) step per buffer
  // The nodes' lists come from one pool, given back whole with the tree: freeing millions of
  // lists one by one cost as long as building the tree (0.4 s at 10^6 buffers), past the time
  // limits of `best`, which gives up a placement to keep them.
  std::pmr::unsynchronized_pool_resource lists_;
  std::vector<RangeUnion> covering_, touching_;
  std::vector<std::uint64_t> node_stamp_;
  std::uint64_t stamp_ = 0;
  std::vector<std::pair<std::size_t, std::size_t>> found_;
};

/// Average number of other buffers each buffer overlaps in time, by a sort and binary searches;
/// past 20,000 buffers an estimate from 20,000 of them evenly spread (it only chooses between
/// two indexes that give the same plan, and the full count cost a second at a million).
double average_overlap(const std::vector<std::pair<Time, Time>>& lives) {
  std::vector<Time> starts, ends;
  starts.reserve(lives.size());
  ends.reserve(lives.size());
  for (const auto& [start, end] : lives) {
    starts.push_back(start);
    ends.push_back(end);
  }
  std::sort(starts.begin(), starts.end());
  std::sort(ends.begin(), ends.end());
  const std::size_t stride = std::max<std::size_t>(1, lives.size() / 20'000);
  double total = 0;
  std::size_t counted = 0;
  for (std::size_t i = 0; i < lives.size(); i += stride, ++counted) {
    const auto& [start, end] = lives[i];
    // Overlapping it: started before it ends, minus those that ended by the time it starts.
    auto started = std::lower_bound(starts.begin(), starts.end(), end) - starts.begin();
    auto ended = std::upper_bound(ends.begin(), ends.end(), start) - ends.begin();
    total += static_cast<double>(started - ended - 1);
  }
  return counted == 0 ? 0 : total / static_cast<double>(counted);
}

template <typename Index>
Plan place_with(Index& placed, const Problem& problem, std::span<const std::size_t> order,
                GapChoice choice, std::size_t& work, Deadline stop_at) {
  const auto& bufs = problem.buffers;
  placed.reset();
  Plan plan;
  plan.offsets.assign(bufs.size(), kNone);
  std::vector<bool> seen(bufs.size(), false);
  std::size_t count = 0;
  for (std::size_t idx : order) {
    // A placement among many live buffers costs up to tens of microseconds: the clock is read
    // every 256 of them (about 25 ns each), so a stop comes at most a few milliseconds late.
    if (stop_at != Deadline::max() && ++count % 256 == 0 &&
        std::chrono::steady_clock::now() >= stop_at)
      throw TimeUp{};
    if (idx >= bufs.size() || seen[idx])
      throw InvalidInput("placement order is not a permutation of the buffers");
    seen[idx] = true;
    const Buffer& b = bufs[idx];
    std::size_t offset = placed.find(idx, b, choice, work);
    std::size_t end_addr;
    if (__builtin_add_overflow(offset, b.size, &end_addr)) throw_offset_overflow(b);
    placed.insert(idx, b, offset, end_addr, work);
    plan.offsets[idx] = offset;
    plan.arena_size = std::max(plan.arena_size, end_addr);
  }
  return plan;
}

}  // namespace

bool prefer_time_tree(const Problem& problem) {
  const double n = static_cast<double>(problem.buffers.size());
  if (n < 256) return false;
  // The scan looks at n/2 buffers per placement on average; the tree at most at the k
  // overlapping ones, each costing a sort step and some bookkeeping (measured: about 8x a scan
  // step), usually far fewer since packed neighbours merge into one range. Past 20,000 buffers
  // the scan's n^2 dominates unless nearly everything overlaps.
  std::vector<std::pair<Time, Time>> lives;
  lives.reserve(problem.buffers.size());
  for (const Buffer& b : problem.buffers) lives.emplace_back(b.start, b.end);
  const double k = average_overlap(lives);
  if (8 * k * std::max(1.0, std::log2(k + 1)) < n) return true;
  if (n < 20'000) return false;
  // Large problems: buffers living over most of the schedule (weights, optimiser state) count
  // as one packed range each in the tree, and the scan's n^2 / 2 is prohibitive; what decides
  // is how much the shorter-lived buffers overlap one another.
  Time t0 = problem.buffers[0].start, t1 = problem.buffers[0].end;
  for (const Buffer& b : problem.buffers) {
    t0 = std::min(t0, b.start);
    t1 = std::max(t1, b.end);
  }
  std::vector<std::pair<Time, Time>> shorter;
  for (const auto& [start, end] : lives)
    if (end - start < (t1 - t0) / 2) shorter.emplace_back(start, end);
  const double k_short = average_overlap(shorter);
  return 8 * k_short * std::max(1.0, std::log2(k_short + 1)) < n;
}

struct Placer::Index {
  std::optional<TimeTree> tree;
  std::optional<OffsetOrderedSet> set;
};

Placer::Placer(const Problem& problem, PlacementIndex index)
    : problem_(problem), index_(std::make_unique<Index>()) {
  if (index == PlacementIndex::kAuto)
    index = prefer_time_tree(problem) ? PlacementIndex::kTimeTree : PlacementIndex::kScan;
  if (index == PlacementIndex::kTimeTree)
    index_->tree.emplace(problem);
  else
    index_->set.emplace(problem.buffers.size());
}

Placer::~Placer() = default;

Plan Placer::place(std::span<const std::size_t> order, GapChoice choice, std::size_t& work,
                   Deadline stop_at) {
  if (order.size() != problem_.buffers.size())
    throw InvalidInput("placement order has " + std::to_string(order.size()) + " entries for " +
                       std::to_string(problem_.buffers.size()) + " buffers");
  if (index_->tree) return place_with(*index_->tree, problem_, order, choice, work, stop_at);
  return place_with(*index_->set, problem_, order, choice, work, stop_at);
}

Plan place_in_order_counted(const Problem& problem, std::span<const std::size_t> order,
                            GapChoice choice, std::size_t& work, PlacementIndex index) {
  if (order.size() != problem.buffers.size())
    throw InvalidInput("placement order has " + std::to_string(order.size()) + " entries for " +
                       std::to_string(problem.buffers.size()) + " buffers");
  Placer placer(problem, index);
  return placer.place(order, choice, work);
}

}  // namespace modelmem::plan::detail

namespace modelmem::plan {

Plan place_in_order(const Problem& problem, std::span<const std::size_t> order, GapChoice choice) {
  std::size_t work = 0;
  return detail::place_in_order_counted(problem, order, choice, work);
}

}  // namespace modelmem::plan
