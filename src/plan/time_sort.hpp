// Sorting buffers by a time (start or end) without comparing through the buffers: a counting
// sort when the times span a range not much larger than the count (schedules are steps), else
// a sort of plain (time, position) keys. A million buffers order in milliseconds either way,
// where std::sort through the buffers took a second on a busy core. Private to src/plan/.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "modelmem/plan/problem.hpp"

namespace modelmem::plan::detail {

/// `seq` stably sorted by key(x) for x in seq (ties keep their order in seq).
template <typename KeyFn>
std::vector<std::size_t> stable_order_by(std::span<const std::size_t> seq, KeyFn key) {
  const std::size_t n = seq.size();
  std::vector<std::size_t> out(n);
  if (n == 0) return out;
  Time lo = key(seq[0]), hi = lo;
  for (std::size_t x : seq) {
    const Time k = key(x);
    lo = std::min(lo, k);
    hi = std::max(hi, k);
  }
  // The span as unsigned: no overflow even from INT64_MIN to INT64_MAX.
  const auto span = static_cast<unsigned long long>(hi) - static_cast<unsigned long long>(lo);
  if (span < 4 * static_cast<unsigned long long>(n) + 1024) {
    std::vector<std::size_t> count(static_cast<std::size_t>(span) + 2, 0);
    auto slot = [&](std::size_t x) {
      return static_cast<std::size_t>(static_cast<unsigned long long>(key(x)) -
                                      static_cast<unsigned long long>(lo));
    };
    for (std::size_t x : seq) ++count[slot(x) + 1];
    for (std::size_t i = 1; i < count.size(); ++i) count[i] += count[i - 1];
    for (std::size_t x : seq) out[count[slot(x)]++] = x;
    return out;
  }
  std::vector<std::pair<Time, std::size_t>> keys(n);
  for (std::size_t p = 0; p < n; ++p) keys[p] = {key(seq[p]), p};
  std::sort(keys.begin(), keys.end());
  for (std::size_t p = 0; p < n; ++p) out[p] = seq[keys[p].second];
  return out;
}

/// 0..n-1 stably sorted by key.
template <typename KeyFn>
std::vector<std::size_t> stable_order_by(std::size_t n, KeyFn key) {
  std::vector<std::size_t> seq(n);
  for (std::size_t i = 0; i < n; ++i) seq[i] = i;
  return stable_order_by(std::span<const std::size_t>(seq), key);
}

}  // namespace modelmem::plan::detail
