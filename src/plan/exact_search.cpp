// The search keeps a skyline: floor_[s] is the lowest address still usable in time section s.
// Every plan can be pushed down until each buffer rests on the floor or on another buffer
// ("gravity"), so it is enough to build such plans from the bottom up, one valley at a time (a
// valley is a run of sections at one level m whose neighbours are higher).
//
// Branching, per node:
//  - a tight section in a valley (its slack, capacity - floor - bytes still to place there, is
//    below the least waste it could get) must be covered right at m: branch on which buffer
//    inside the valley covers it; there is no other branch;
//  - otherwise, in the valley with the least slack, branch on which buffer is the leftmost one
//    to sit at m; the sections to its left can then hold nothing at m and are raised ("wasted")
//    to the lower of the walls around them; a last branch wastes the whole valley. Each set of
//    buffers at level m is met once, in left-to-right order, not once per permutation.
// Pruning and inference: each unplaced buffer has a candidate address (the highest floor under
// its lifetime), raised further by the compulsory parts of big buffers; each section's floor is
// raised to the lowest candidate crossing it, and floor + bytes still to place must fit under the
// capacity. Identical buffers are tried once per node. Sections that nothing unplaced crosses
// split the rest into independent parts, solved one by one (a failing part fails the node). States
// proven to fail are remembered (per part, and across capacities: failing at a capacity means
// failing at every smaller one). Restarts on a Luby schedule rotate through branching variants,
// since which variant is fast differs from instance to instance (heavy-tailed run times).
#include "exact_search.hpp"

#include <algorithm>
#include <numeric>
#include <tuple>

namespace modelmem::plan::detail {
namespace {

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t floor_mix(int section, std::size_t level) {
  return splitmix(splitmix(static_cast<std::uint64_t>(section) + 0x51ed27) ^ level);
}

constexpr int kMaxOverlapBuffers = 2000;
constexpr std::size_t kMaxRemembered = std::size_t{1} << 20;  // about 64 MiB at most
// Restart r uses branching variant r % 16 (tight-section rules and the order of the buffers
// covering a tight section) with buffer order (r / 16) % 4.
constexpr int kVariantOrder = 16;
constexpr std::uint64_t kRestartUnit = 512;

// The Luby sequence 1 1 2 1 1 2 4 1 1 2 ...: restart lengths with a log-factor optimal worst case.
std::uint64_t luby(std::uint64_t i) {
  for (std::uint64_t k = 1;; ++k) {
    std::uint64_t full = (std::uint64_t{1} << k) - 1;
    if (i == full) return std::uint64_t{1} << (k - 1);
    if (i < full) return luby(i - ((std::uint64_t{1} << (k - 1)) - 1));
  }
}

}  // namespace

ComponentSearch::ComponentSearch(const Problem& problem, std::vector<std::size_t> members,
                                 bool memoize)
    : members_(std::move(members)), memoize_(memoize) {
  n_ = static_cast<int>(members_.size());
  std::vector<Time> times;
  times.reserve(members_.size() * 2);
  for (std::size_t i : members_) {
    times.push_back(problem.buffers[i].start);
    times.push_back(problem.buffers[i].end);
  }
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  sections_ = times.empty() ? 0 : static_cast<int>(times.size()) - 1;
  auto index_of = [&](Time t) {
    return static_cast<int>(std::lower_bound(times.begin(), times.end(), t) - times.begin());
  };

  size_.resize(n_);
  align_.resize(n_);
  lo_.resize(n_);
  hi_.resize(n_);
  std::vector<std::size_t> coverage(sections_ + 1, 0);
  std::size_t g = 0;
  for (int b = 0; b < n_; ++b) {
    const Buffer& buf = problem.buffers[members_[b]];
    size_[b] = buf.size;
    align_[b] = std::max<std::size_t>(buf.alignment, 1);
    lo_[b] = index_of(buf.start);
    hi_[b] = index_of(buf.end);
    g = std::gcd(g, buf.size);
    if (align_[b] > 1) {
      any_alignment_ = true;
      g = std::gcd(g, align_[b]);
    }
    coverage[lo_[b]] += buf.size;
    coverage[hi_[b]] -= buf.size;  // unsigned wrap-around cancels out in the prefix sum
  }
  unit_ = g == 0 ? 1 : g;
  remaining_.assign(sections_, 0);
  std::size_t live = 0;
  for (int s = 0; s < sections_; ++s) {
    live += coverage[s];
    remaining_[s] = live;
    lower_bound_ = std::max(lower_bound_, live);
  }

  // Identical buffers (same span, size, alignment) share a group key: only one of a group is
  // tried per node.
  std::vector<int> order(n_);
  std::iota(order.begin(), order.end(), 0);
  auto same = [&](int x, int y) {
    return lo_[x] == lo_[y] && hi_[x] == hi_[y] && size_[x] == size_[y] && align_[x] == align_[y];
  };
  std::sort(order.begin(), order.end(), [&](int x, int y) {
    return std::tie(lo_[x], hi_[x], size_[x], align_[x], x) <
           std::tie(lo_[y], hi_[y], size_[y], align_[y], y);
  });
  group_.resize(n_);
  std::uint64_t group = 0;
  for (int k = 0; k < n_; ++k) {
    if (k > 0 && !same(order[k - 1], order[k])) ++group;
    group_[order[k]] = group;
  }
  set_branching_order(0);
  zobrist_.resize(n_);
  for (int b = 0; b < n_; ++b) zobrist_[b] = splitmix(0xabcdefULL + static_cast<std::uint64_t>(b));
  floor_.assign(sections_, 0);
  effective_.assign(sections_, 0);
  candidate_.assign(n_, 0);
  // The lists of time-overlapping buffers take up to n^2 entries: kept for parts of moderate
  // size only (an inference, not needed for correctness).
  overlaps_.assign(n_, {});
  if (n_ <= kMaxOverlapBuffers)
    for (int b = 0; b < n_; ++b)
      for (int x = 0; x < n_; ++x)
        if (x != b && lo_[x] < hi_[b] && lo_[b] < hi_[x]) overlaps_[b].push_back(x);
  offset_.assign(n_, 0);
  placed_.assign(n_, 0);
}

// The order in which buffers starting in one section are tried. The first restarts use fixed
// orders (longer first, larger first, larger area first); later ones draw random priorities,
// so that a search stuck under an early wrong choice gets a fresh start (failed states stay
// remembered across restarts).
void ComponentSearch::set_branching_order(int restart) {
  std::vector<std::uint64_t> rnd(n_);
  for (int b = 0; b < n_; ++b)
    rnd[b] = splitmix(static_cast<std::uint64_t>(restart) * 0x1000003ULL + group_[b]);
  auto priority = [&](int b) -> long double {
    long double len = hi_[b] - lo_[b], sz = static_cast<long double>(size_[b]);
    switch ((restart / kVariantOrder) % 4) {
      case 0:
        return len * 1e20L + sz;
      case 1:
        return sz * 1e6L + len;
      case 2:
        return sz * len;
      default:
        return static_cast<long double>(rnd[b]);
    }
  };
  fewest_first_ = restart % 2 == 1;
  zero_slack_only_ = (restart / 2) % 2 == 1;
  tight_order_ = (restart / 4) % 4;
  starts_at_.assign(sections_, {});
  std::vector<int> order(n_);
  std::iota(order.begin(), order.end(), 0);
  std::vector<long double> pri(n_);
  for (int b = 0; b < n_; ++b) pri[b] = priority(b);
  std::sort(order.begin(), order.end(), [&](int x, int y) {
    if (pri[x] != pri[y]) return pri[x] > pri[y];
    if (group_[x] != group_[y]) return group_[x] < group_[y];
    return x < y;
  });
  for (int b : order) starts_at_[lo_[b]].push_back(b);
}

bool ComponentSearch::halted() {
  return budget_->stopped() || (restart_limit_ != 0 && restart_nodes_ >= restart_limit_);
}

void ComponentSearch::set_floor(int s, std::size_t value) {
  trail_.emplace_back(s, floor_[s]);
  floor_hash_ ^= floor_mix(s, floor_[s]) ^ floor_mix(s, value);
  floor_[s] = value;
}

void ComponentSearch::undo_floors(std::size_t mark) {
  while (trail_.size() > mark) {
    auto [s, old] = trail_.back();
    trail_.pop_back();
    floor_hash_ ^= floor_mix(s, floor_[s]) ^ floor_mix(s, old);
    floor_[s] = old;
  }
}

void ComponentSearch::place(int b, std::size_t offset) {
  offset_[b] = offset;
  placed_[b] = 1;
  placed_stack_.push_back(b);
  ++placed_count_;
  placed_hash_ ^= zobrist_[b];
  for (int s = lo_[b]; s < hi_[b]; ++s) {
    remaining_[s] -= size_[b];
    set_floor(s, offset + size_[b]);
  }
}

void ComponentSearch::unplace(int b) {
  placed_stack_.pop_back();  // always the most recent placement
  placed_[b] = 0;
  --placed_count_;
  placed_hash_ ^= zobrist_[b];
  for (int s = lo_[b]; s < hi_[b]; ++s) remaining_[s] += size_[b];
}

bool ComponentSearch::can_raise(int first, int last, std::size_t level) const {
  for (int s = first; s <= last; ++s)
    if (remaining_[s] > capacity_ - level) return false;
  return true;
}

void ComponentSearch::raise(int first, int last, std::size_t level) {
  for (int s = first; s <= last; ++s) set_floor(s, level);
}

// With alignment, a buffer lying entirely in [first, last] may rest on the floor `level` at
// align_up(level) > level; a waste must not skip past that address.
std::size_t ComponentSearch::next_aligned_level(int first, int last, std::size_t level,
                                                std::size_t ceiling) const {
  for (int s = first; s <= last; ++s) {
    for (int b : starts_at_[s]) {
      if (placed_[b] || hi_[b] > last + 1 || align_[b] == 1) continue;
      std::size_t rem = level % align_[b];
      if (rem == 0) continue;
      std::size_t pad = align_[b] - rem;
      if (pad < ceiling - level) ceiling = level + pad;
    }
  }
  return ceiling;
}

// Solves the sections [first, last]: every unplaced buffer inside is placed, or false. On true
// the placements stay (the caller goes on with the rest); on false everything is undone.
bool ComponentSearch::search(int depth, int first, int last) {
  std::uint64_t local = 0;
  bool any = false;
  const bool whole = first == 0 && last == sections_ - 1;
  for (int s = first; s <= last; ++s) {
    for (int b : starts_at_[s]) {
      if (placed_[b]) continue;
      any = true;
      if (whole) break;
      local ^= zobrist_[b];
    }
    if (any && whole) break;
  }
  if (!any) return true;
  ++restart_nodes_;
  if (!budget_->tick() || (restart_limit_ != 0 && restart_nodes_ >= restart_limit_)) return false;
  FailKey key{placed_hash_, floor_hash_};
  if (!whole) {
    // A part's fate depends only on its own floors and buffers, whatever happened elsewhere.
    std::uint64_t floors = splitmix(static_cast<std::uint64_t>(first) << 32 | last);
    for (int s = first; s <= last; ++s) floors ^= floor_mix(s, floor_[s]);
    key = FailKey{local, floors};
  }
  if (memoize_) {
    auto it = failed_.find(key);
    if (it != failed_.end() && it->second >= capacity_) return false;
  }

  const std::size_t entry_mark = trail_.size();
  const std::size_t placed_mark = placed_stack_.size();
  bool ok = tighten_floors();
  if (ok) {
    // Sections that no unplaced buffer crosses split the rest into independent parts: solve
    // them one after the other, and a part that fails fails the node, whatever the others do.
    int parts = 0;
    for (int s = first; s <= last;) {
      while (s <= last && remaining_[s] == 0) ++s;
      if (s > last) break;
      ++parts;
      while (s <= last && remaining_[s] != 0) ++s;
    }
    if (parts >= 2) {
      for (int s = first; s <= last && ok;) {
        while (s <= last && remaining_[s] == 0) ++s;
        if (s > last) break;
        int e = s;
        while (e + 1 <= last && remaining_[e + 1] != 0) ++e;
        ok = search(depth + 1, s, e);
        s = e + 1;
      }
      if (ok) return true;
    } else if (explore(depth, first, last)) {
      return true;
    }
  }
  while (placed_stack_.size() > placed_mark) unplace(placed_stack_.back());
  undo_floors(entry_mark);
  if (halted()) return false;
  remember_failure(key);
  return false;
}

void ComponentSearch::remember_failure(const FailKey& key) {
  if (!memoize_) return;
  if (failed_.size() >= kMaxRemembered) failed_.clear();
  std::size_t& known = failed_[key];
  known = std::max(known, capacity_);
}

// No unplaced buffer can sit below its candidate address (the highest floor under its lifetime,
// aligned), and floors only rise: so each section's floor can be raised to the lowest candidate
// among the unplaced buffers crossing it, and to the capacity where none is left. Raised floors
// expose waste early to the per-section bound.
bool ComponentSearch::tighten_floors() {
  for (int b = 0; b < n_; ++b) {
    if (placed_[b]) continue;
    std::size_t c = 0;
    for (int s = lo_[b]; s < hi_[b]; ++s) c = std::max(c, floor_[s]);
    candidate_[b] = align_up(c, align_[b]);
    if (candidate_[b] > capacity_ - size_[b]) return false;
  }
  if (!propagate_compulsory_parts()) return false;
  std::fill(effective_.begin(), effective_.end(), capacity_);
  for (int b = 0; b < n_; ++b) {
    if (placed_[b]) continue;
    for (int s = lo_[b]; s < hi_[b]; ++s) effective_[s] = std::min(effective_[s], candidate_[b]);
  }
  for (int s = 0; s < sections_; ++s) {
    if (effective_[s] <= floor_[s]) continue;
    if (remaining_[s] > capacity_ - effective_[s]) return false;
    set_floor(s, effective_[s]);
  }
  return true;
}

std::size_t ComponentSearch::align_up(std::size_t value, std::size_t alignment) const {
  if (alignment <= 1 || value % alignment == 0) return value;
  std::size_t pad = alignment - value % alignment;
  return pad > capacity_ - std::min(value, capacity_) ? capacity_ + 1 : value + pad;
}

// A buffer b whose offset lies in [candidate, capacity - size] always covers the addresses
// [capacity - size, candidate + size) when that range is not empty (its compulsory part). A
// buffer overlapping b in time that cannot fit under the compulsory part must go above it.
bool ComponentSearch::propagate_compulsory_parts() {
  for (int pass = 0; pass < 4; ++pass) {
    bool changed = false;
    for (int b = 0; b < n_; ++b) {
      if (placed_[b]) continue;
      const std::size_t part_lo = capacity_ - size_[b];
      const std::size_t part_hi = candidate_[b] + size_[b];
      if (part_hi <= part_lo) continue;
      for (int x : overlaps_[b]) {
        if (placed_[x] || candidate_[x] >= part_hi) continue;
        if (candidate_[x] + size_[x] <= part_lo) continue;  // may still fit below
        std::size_t c = align_up(part_hi, align_[x]);
        if (c > capacity_ || size_[x] > capacity_ - c) return false;
        candidate_[x] = c;
        changed = true;
      }
    }
    if (!changed) break;
  }
  return true;
}

bool ComponentSearch::explore(int depth, int first, int last) {
  // Valleys: maximal runs of equal floor whose neighbours are higher (or the ends of time).
  // Pick the lowest one (leftmost on ties), unless some valley holds a section without slack.
  int a = -1, z = -1;
  std::size_t m = capacity_;
  // A deque: growing it keeps the references of shallower levels valid.
  while (static_cast<int>(candidates_.size()) <= depth + 1) candidates_.emplace_back();
  std::vector<int>& cands = candidates_[depth];
  std::vector<int>& scratch = candidates_[depth + 1];
  cands.clear();
  bool tight = false;
  std::size_t tight_level = 0;
  std::size_t best_slack = capacity_;
  for (int s = first; s <= last;) {
    int e = s;
    while (e + 1 <= last && floor_[e + 1] == floor_[s]) ++e;
    const std::size_t level = floor_[s];
    bool valley =
        (s == 0 || floor_[s - 1] > level) && (e + 1 == sections_ || floor_[e + 1] > level);
    if (valley && level < capacity_ && !(!fewest_first_ && tight)) {
      // Without a tight section, branch in the valley with the least slack (fail first), the
      // lowest on ties.
      std::size_t slack = capacity_;
      for (int x = s; x <= e; ++x)
        if (remaining_[x] != 0) slack = std::min(slack, capacity_ - level - remaining_[x]);
      if (a < 0 || slack < best_slack || (slack == best_slack && level < m)) {
        best_slack = slack;
        m = level;
        a = s;
        z = e;
      }
      // A tight section: some buffer inside the valley must cover it right at the floor. Branch on
      // the one with the fewest such buffers; none at all ends this node. A section is tight when
      // its slack is below the least waste it could get if nothing covered it at `level`: the lower
      // wall, or the smallest buffer that fits in the valley.
      std::size_t least_waste = std::min(s > 0 ? floor_[s - 1] : capacity_,
                                         e + 1 < sections_ ? floor_[e + 1] : capacity_) -
                                level;
      if (!zero_slack_only_) {
        for (int y = s; y <= e; ++y)
          for (int b : starts_at_[y])
            if (!placed_[b] && hi_[b] <= e + 1) least_waste = std::min(least_waste, size_[b]);
      } else {
        least_waste = 1;
      }
      for (int x = s; x <= e; ++x) {
        if (remaining_[x] == 0 || capacity_ - level - remaining_[x] >= least_waste) continue;
        scratch.clear();
        for (int y = s; y <= x; ++y) {
          std::uint64_t last_group = ~std::uint64_t{0};
          for (int b : starts_at_[y]) {
            if (placed_[b] || hi_[b] <= x || hi_[b] > e + 1 || level % align_[b] != 0) continue;
            if (group_[b] == last_group) continue;
            last_group = group_[b];
            scratch.push_back(b);
          }
        }
        if (scratch.empty()) return false;
        if (!tight || (fewest_first_ && scratch.size() < cands.size())) {
          tight = true;
          tight_level = level;
          cands.swap(scratch);
        }
        if (!fewest_first_) break;
      }
    }
    s = e + 1;
  }
  if (a < 0) return false;

  if (tight) {
    // Which covering buffer to try first: the variant's order (see set_branching_order).
    auto by = [&](auto key) {
      std::stable_sort(cands.begin(), cands.end(), [&](int x, int y) { return key(x) > key(y); });
    };
    if (tight_order_ == 1) by([&](int b) { return static_cast<long double>(size_[b]); });
    if (tight_order_ == 2) by([&](int b) { return static_cast<long double>(hi_[b] - lo_[b]); });
    if (tight_order_ == 3)
      by([&](int b) { return static_cast<long double>(size_[b]) * (hi_[b] - lo_[b]); });
    for (std::size_t k = 0; k < cands.size(); ++k) {
      int b = cands[k];
      std::size_t mark = trail_.size();
      place(b, tight_level);
      if (search(depth + 1, first, last)) return true;
      undo_floors(mark);
      unplace(b);
      if (halted()) return false;
    }
    return false;
  }

  const std::size_t left = a > 0 ? floor_[a - 1] : capacity_;
  const std::size_t right = z + 1 < sections_ ? floor_[z + 1] : capacity_;
  for (int s = a; s <= z; ++s) {
    std::uint64_t last_group = ~std::uint64_t{0};
    for (int b : starts_at_[s]) {
      if (placed_[b] || hi_[b] > z + 1 || m % align_[b] != 0) continue;
      if (group_[b] == last_group) continue;  // an identical twin was just taken
      last_group = group_[b];
      cands.push_back(b);
    }
  }

  for (std::size_t k = 0; k < cands.size(); ++k) {
    int b = cands[k];
    std::size_t mark = trail_.size();
    place(b, m);
    bool ok = true;
    if (lo_[b] > a) {
      std::size_t level = std::min(left, m + size_[b]);
      if (any_alignment_) level = next_aligned_level(a, lo_[b] - 1, m, level);
      ok = can_raise(a, lo_[b] - 1, level);
      if (ok) raise(a, lo_[b] - 1, level);
    }
    if (ok && search(depth + 1, first, last)) return true;
    undo_floors(mark);
    unplace(b);
    if (halted()) return false;
  }

  std::size_t level = std::min(left, right);
  if (any_alignment_) level = next_aligned_level(a, z, m, level);
  if (can_raise(a, z, level)) {
    std::size_t mark = trail_.size();
    raise(a, z, level);
    if (search(depth + 1, first, last)) return true;
    undo_floors(mark);
  }
  return false;
}

Outcome ComponentSearch::decide(std::size_t capacity, SearchBudget& budget,
                                std::vector<std::size_t>& offsets) {
  if (n_ == 0) {
    offsets.clear();
    return Outcome::kFound;
  }
  if (lower_bound_ > capacity) return Outcome::kInfeasible;
  capacity_ = capacity;
  budget_ = &budget;
  std::fill(floor_.begin(), floor_.end(), 0);
  std::fill(placed_.begin(), placed_.end(), 0);
  placed_stack_.clear();
  placed_count_ = 0;
  placed_hash_ = 0;
  floor_hash_ = 0;
  for (int s = 0; s < sections_; ++s) floor_hash_ ^= floor_mix(s, 0);
  trail_.clear();
  // remaining_ is restored by the unwinding of every branch; recompute for safety after a stop.
  std::fill(remaining_.begin(), remaining_.end(), 0);
  for (int b = 0; b < n_; ++b)
    for (int s = lo_[b]; s < hi_[b]; ++s) remaining_[s] += size_[b];

  // Restarts on a Luby schedule of node counts. The lengths grow without bound, so the search
  // stays complete: a run that ends before its limit has explored everything. The memory of
  // failed states carries over, so restarts cost little.
  bool ok = false;
  for (int restart = 0;; ++restart) {
    set_branching_order(restart);
    restart_nodes_ = 0;
    restart_limit_ = restarts_ ? luby(restart + 1) * kRestartUnit : 0;
    while (!placed_stack_.empty()) unplace(placed_stack_.back());
    undo_floors(0);
    ok = search(0, 0, sections_ - 1);
    if (ok || budget.stopped() || restart_nodes_ < restart_limit_ || restart_limit_ == 0) break;
  }
  restart_limit_ = 0;
  if (ok) {
    offsets.assign(offset_.begin(), offset_.end());
    return Outcome::kFound;
  }
  return budget.stopped() ? Outcome::kStopped : Outcome::kInfeasible;
}

}  // namespace modelmem::plan::detail
