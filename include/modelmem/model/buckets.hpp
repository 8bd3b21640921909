// Variable sequence lengths: one plan per bucket of a symbolic dim (the arena that serves every
// bucket is the largest), request-length files and the padding waste of a bucket set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "modelmem/model/graph.hpp"
#include "modelmem/model/lifetimes.hpp"
#include "modelmem/plan/solver.hpp"

namespace modelmem::model {

/// `--buckets seq=32,64,128`: one symbolic dim and its values (sorted, distinct, positive).
struct BucketSpec {
  std::string dim;
  std::vector<std::int64_t> values;
};
BucketSpec parse_buckets(const std::string& text);

struct BucketPlan {
  std::int64_t value = 0;
  std::size_t arena = 0;
  std::size_t lower_bound = 0;
  std::size_t weights = 0;
};
/// Plans the model once per bucket value (the other dims from `load`). The arena that serves
/// every bucket is the largest of them (one request runs at a time). With `memory_order`, each
/// bucket's graph gets its own memory-aware execution order (`memory_order()`), as the main
/// plan does with `--order memory`; otherwise the stored order.
std::vector<BucketPlan> plan_buckets(const std::string& path, const LoadOptions& load,
                                     const BucketSpec& buckets, const LifetimeOptions& lifetimes,
                                     const std::string& solver, const plan::SolveOptions& options,
                                     bool memory_order = false);

/// Request lengths, one positive integer per line (blank lines and '#' comments skipped).
/// Throws InvalidInput naming file and line.
std::vector<std::int64_t> read_lengths(const std::string& path);

struct PaddingReport {
  std::size_t requests = 0;
  std::size_t too_long = 0;             ///< longer than the largest bucket (not counted below)
  std::uint64_t tokens = 0;             ///< sum of the request lengths that fit
  std::uint64_t padded_tokens = 0;      ///< sum of the bucket sizes they were padded to
  std::vector<std::size_t> per_bucket;  ///< requests served by each bucket
  double waste() const {
    return padded_tokens == 0
               ? 0.0
               : static_cast<double>(padded_tokens - tokens) / static_cast<double>(padded_tokens);
  }
};
/// Each request goes to the smallest bucket that holds it.
PaddingReport padding_waste(const BucketSpec& buckets, const std::vector<std::int64_t>& lengths);

}  // namespace modelmem::model
