// The repeating step of an allocation sequence (plan/period.hpp).
#include "modelmem/plan/period.hpp"

#include <algorithm>
#include <array>
#include <unordered_map>
#include <utility>

namespace modelmem::plan {

namespace {

std::size_t effective_max_period(std::size_t n, const PeriodOptions& options) {
  std::size_t repeats = std::max<std::size_t>(options.min_repeats, 1);
  std::size_t limit = n / repeats;
  if (options.max_period != 0) limit = std::min(limit, options.max_period);
  return limit;
}

struct TokenHistory {
  std::size_t count = 0;
  // The last few positions of the token, newest at index (count - 1) % size: distances to several
  // earlier occurrences vote, because a size used twice inside a step would otherwise only ever
  // vote for the distance between its two uses.
  std::array<std::size_t, 4> last{};
};

constexpr std::size_t kWindow = 8;
constexpr std::uint64_t kHashBase = 0x100000001b3ULL;

std::uint64_t mix(std::uint64_t x) noexcept {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

void vote_distances(std::span<const std::uint64_t> keys, std::size_t min_period,
                    std::size_t max_period, std::vector<double>& votes) {
  std::unordered_map<std::uint64_t, TokenHistory> history;
  history.reserve(std::min<std::size_t>(keys.size(), 1u << 16));
  for (std::uint64_t t : keys) ++history[t].count;
  std::unordered_map<std::uint64_t, std::size_t> seen;
  seen.reserve(history.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    TokenHistory& h = history[keys[i]];
    std::size_t& k = seen[keys[i]];
    const double weight = 1.0 / static_cast<double>(h.count);
    const std::size_t back = std::min<std::size_t>(k, h.last.size());
    for (std::size_t j = 1; j <= back; ++j) {
      std::size_t d = i - h.last[(k - j) % h.last.size()];
      if (d >= min_period && d <= max_period) votes[d] += weight;
    }
    h.last[k % h.last.size()] = i;
    ++k;
  }
}

}  // namespace

std::uint64_t period_token(const PeriodEvent& event, std::size_t size_granularity) noexcept {
  std::size_t g = size_granularity == 0 ? 1 : size_granularity;
  std::uint64_t q = event.size / g + (event.size % g != 0 ? 1 : 0);
  return (q << 1) | (event.is_free ? 1u : 0u);
}

Period check_period(std::span<const std::uint64_t> tokens, std::size_t length,
                    const PeriodOptions& options) {
  Period result;
  const std::size_t n = tokens.size();
  result.length = length;
  if (length == 0 || length >= n) return result;
  const std::size_t compared = n - length;
  // Each compared position weighs +(1 - m) when it matches and -m when not, so a suffix has a
  // non-negative sum exactly when its match fraction is at least m. The best start is the one
  // with the largest suffix sum: it drops a warm-up prefix that matches worse than m, and keeps
  // everything after it.
  const double m = std::clamp(options.min_match, 0.0, 1.0);
  double suffix = 0.0;
  double best = 0.0;
  std::size_t best_start = compared;  // empty suffix
  std::size_t matches_from_best = 0;
  std::size_t matches = 0;
  for (std::size_t i = compared; i-- > 0;) {
    bool same = tokens[i] == tokens[i + length];
    suffix += same ? (1.0 - m) : -m;
    if (same) ++matches;
    if (suffix >= best) {
      best = suffix;
      best_start = i;
      matches_from_best = matches;
    }
  }
  if (best_start >= compared) {
    // Nothing repeats; report the whole sequence's statistics.
    result.start = 0;
    result.repeats = n / length;
    result.mismatches = compared - matches;
    result.match = static_cast<double>(matches) / static_cast<double>(compared);
    return result;
  }
  result.start = best_start;
  result.repeats = (n - best_start) / length;
  const std::size_t span = compared - best_start;
  result.mismatches = span - matches_from_best;
  result.match = static_cast<double>(matches_from_best) / static_cast<double>(span);
  result.found =
      result.match >= m && result.repeats >= std::max<std::size_t>(options.min_repeats, 1) &&
      length >= options.min_period && (options.max_period == 0 || length <= options.max_period);
  return result;
}

Period detect_period(std::span<const std::uint64_t> tokens, const PeriodOptions& options) {
  const std::size_t n = tokens.size();
  Period none;
  if (n < 2) return none;
  const std::size_t max_period = effective_max_period(n, options);
  const std::size_t min_period = std::max<std::size_t>(options.min_period, 1);
  if (max_period < min_period) return none;

  // Candidate periods: distances between earlier occurrences of equal tokens, and of equal
  // windows of kWindow tokens. Windows matter because in a step made of identical layers every
  // single size recurs many times a step, while a window across the step's prologue recurs once
  // a step. Votes are weighed by 1/count so that frequent keys do not drown out the rare ones.
  std::vector<double> votes(max_period + 1, 0.0);
  vote_distances(tokens, min_period, max_period, votes);
  if (n > kWindow) {
    std::vector<std::uint64_t> windows(n - kWindow + 1);
    std::uint64_t h = 0;
    std::uint64_t power = 1;
    for (std::size_t i = 0; i < kWindow; ++i) power *= kHashBase;
    for (std::size_t i = 0; i < n; ++i) {
      h = h * kHashBase + mix(tokens[i]);
      if (i >= kWindow) h -= power * mix(tokens[i - kWindow]);
      if (i + 1 >= kWindow) windows[i + 1 - kWindow] = h;
    }
    vote_distances(windows, min_period, max_period, votes);
  }
  std::vector<std::pair<double, std::size_t>> candidates;
  for (std::size_t d = min_period; d <= max_period; ++d)
    if (votes[d] > 0) candidates.emplace_back(votes[d], d);
  const std::size_t keep =
      std::min(candidates.size(), std::max<std::size_t>(options.max_candidates, 1));
  std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(keep),
                    candidates.end(), [](const auto& a, const auto& b) {
                      return a.first != b.first ? a.first > b.first : a.second < b.second;
                    });
  candidates.resize(keep);

  std::vector<Period> found;
  for (const auto& [vote, d] : candidates) {
    Period p = check_period(tokens, d, options);
    if (p.found) found.push_back(p);
  }
  if (found.empty()) return none;

  // A candidate that repeats only in a short tail (an inner loop at the end) must not beat the
  // step that covers most of the sequence.
  std::size_t max_covered = 0;
  for (const Period& p : found) max_covered = std::max(max_covered, n - p.start);
  std::erase_if(found, [&](const Period& p) {
    return 2 * (n - p.start) < max_covered ||
           static_cast<double>(n - p.start) < options.min_coverage * static_cast<double>(n);
  });
  if (found.empty()) return none;

  const Period* best = &found.front();
  for (const Period& p : found)
    if (p.match > best->match || (p.match == best->match && p.length < best->length)) best = &p;
  const Period* chosen = best;
  const std::size_t best_covered = n - best->start;
  for (const Period& p : found) {
    if (p.match + options.shorter_tolerance < best->match) continue;
    if (10 * (n - p.start) < 9 * best_covered) continue;
    if (p.length < chosen->length) chosen = &p;
  }
  return *chosen;
}

Period detect_period(std::span<const PeriodEvent> events, const PeriodOptions& options) {
  std::vector<std::uint64_t> tokens;
  tokens.reserve(events.size());
  for (const PeriodEvent& e : events) tokens.push_back(period_token(e, options.size_granularity));
  return detect_period(std::span<const std::uint64_t>(tokens), options);
}

}  // namespace modelmem::plan
