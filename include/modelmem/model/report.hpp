// Planning a loaded model end to end and the artefacts of `modelmem plan`: the solved plan with
// its peak, the JSON plan the planned-arena runtime reads (`plan:` key), a self-contained HTML
// picture, per-bucket plans for variable sequence lengths, padding waste, and the seed's static
// pool presets per model family. Plain functions over value types; not thread-safe only in the
// sense that each call owns its data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "modelmem/model/graph.hpp"
#include "modelmem/model/lifetimes.hpp"
#include "modelmem/plan/solver.hpp"

namespace modelmem::model {

struct ModelPlan {
  Lifetimes lifetimes;
  plan::SolveResult solve;  ///< solve.plan is set (plan_model throws otherwise)
  std::size_t lower_bound = 0;
  plan::Peak peak;  ///< step and buffers live where the lower bound is reached
};

/// Builds the lifetimes and solves them with `solver`; the plan is validated. Throws
/// InvalidInput for an unknown solver, Error when the solver finds no plan.
ModelPlan plan_model(const Graph& graph, const LifetimeOptions& lifetimes,
                     const std::string& solver = "best", const plan::SolveOptions& options = {});

/// The plan as JSON: arena_bytes, weights_bytes, lower_bound_bytes, steps (node names in
/// execution order), buffers, and per tensor: name, size, offset, first and last step (inclusive).
nlohmann::json plan_json(const Graph& graph, const ModelPlan& plan);

/// A self-contained HTML page (inline SVG and script, no network) drawing the buffers as
/// rectangles in time x address with the peak step marked and tensor names on hover. When its
/// script has drawn the picture it sets `data-status="rendered-ok"` on <body>.
std::string plan_html(const Graph& graph, const ModelPlan& plan, const std::string& title);

/// The seed's static pool presets: a model family, its pool and safety factor.
struct FamilyPreset {
  std::string family;  ///< "cnn", "transformer" or "gan"
  std::size_t pool_bytes = 0;
  double factor = 1.0;
  std::size_t provisioned() const {
    return static_cast<std::size_t>(static_cast<double>(pool_bytes) * factor);
  }
};
/// Guesses the family from the operators: ConvTranspose -> gan; Softmax with at least as many
/// MatMul/Gemm as Conv -> transformer; Conv -> cnn; otherwise transformer.
std::string guess_family(const Graph& graph);
FamilyPreset seed_preset(const std::string& family);

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
