// `modelmem plan` as one library call: load an ONNX model, plan its activation arena for the
// runtime it will run under, and report every figure the command prints (weights, the ideal and
// the eager activation peaks, the total, solvers compared, execution order, buckets, padding,
// the pool to provision). The CLI and the Python package call plan_model() and one renderer of
// modelmem/model/render.hpp, so both show the same thing. Several models sharing one device:
// plan_device(). Value types; each call owns its data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "modelmem/core/error.hpp"
#include "modelmem/model/buckets.hpp"
#include "modelmem/model/family.hpp"
#include "modelmem/model/graph.hpp"
#include "modelmem/model/lifetimes.hpp"
#include "modelmem/model/order.hpp"
#include "modelmem/model/solve.hpp"

namespace modelmem::model {

/// Which runtime's tensor lifetimes the arena is planned for.
enum class Runtime {
  /// A static executor with in-place reuse (modelmem's planned arena fed by a graph executor,
  /// ONNX Runtime-style): elementwise ops write into a dying input, views share memory.
  kStatic,
  /// An eager runtime (PyTorch eager): each operator's outputs are allocated while its inputs
  /// are live, nothing is reused in place, a tensor is freed after its last use, views share,
  /// the caller holds the inputs throughout, a module's arguments live until it returns
  /// (scopes from torch.onnx node names; PlanOptions::eager_module_scopes), and a Conv holds
  /// what PyTorch's CPU convolution allocates during its call (oneDNN's blocked copies or
  /// im2col; PlanOptions::eager_conv_workspace).
  kEager,
};
std::string runtime_name(Runtime runtime);       ///< "static" or "eager"
Runtime parse_runtime(const std::string& text);  ///< throws InvalidInput

struct PlanOptions {
  std::map<std::string, std::int64_t> dims;  ///< symbolic dims to bind (`--dim`)
  bool ignore_unknown_dims = false;          ///< see LoadOptions (several models, one --dim list)
  std::string solver = "best";               ///< a solver of plan::solver_names(), or "all"
  bool memory_order = false;                 ///< search an execution order with a lower peak
  std::string dtype = "fp32";                ///< fp32 (as stored), fp16 or bf16 for float32 data
  bool keep_weights_dtype = false;           ///< --dtype changes the activations only
  std::size_t alignment = 64;
  Runtime runtime = Runtime::kStatic;  ///< the lifetimes the arena (and JSON/HTML) is planned for
  bool in_place = true;                ///< static runtime: elementwise ops write into dying inputs
  bool alias = true;                   ///< view ops share their input's memory
  bool eager_conv_workspace = true;    ///< eager: a Conv's own buffers (oneDNN copies, im2col)
  bool eager_module_scopes = true;     ///< eager: a module's arguments live until it returns
  std::optional<BucketSpec> buckets;   ///< plan per bucket; the main plan uses the largest
  std::string lengths_path;            ///< request lengths file (needs buckets)
  double time_limit = 10;              ///< seconds for the searching solvers
  /// Plan dims past the model's limits (table_limits) instead of refusing them.
  bool ignore_model_limits = false;
  /// Called now and then by the searching solvers (plan::SolveOptions::progress): a front end
  /// stops a long plan by throwing from it (Python's Ctrl-C). May be empty.
  std::function<void(std::size_t best_arena, double elapsed_seconds)> progress;
};

/// A table that a Gather indexes by positions the model computes itself (a position embedding:
/// Range -> Unsqueeze -> Gather, folded once the dims are bound): its rows bound the sequence the
/// model can take. Tables indexed by the caller's input (token ids) are not limits.
struct TableLimit {
  std::string table;  ///< the weight's name
  std::size_t rows = 0;
  std::string node;                ///< the Gather
  std::int64_t largest_index = 0;  ///< the largest position at the bound dims
  bool exceeded() const { return largest_index >= static_cast<std::int64_t>(rows); }
};
std::vector<TableLimit> table_limits(const Graph& graph);

/// plan_model's error for dims past a table's rows (InvalidInput, naming the table).
class ModelLimitExceeded : public InvalidInput {
 public:
  ModelLimitExceeded(TableLimit limit, const std::string& message)
      : InvalidInput(message), limit_(std::move(limit)) {}
  const TableLimit& limit() const noexcept { return limit_; }

 private:
  TableLimit limit_;
};

/// Rejects contradictory or out-of-range options with InvalidInput (nothing is loaded).
void validate(const PlanOptions& options);

struct SolverRun {
  std::string solver;
  std::size_t arena = 0;
  double seconds = 0;
  bool proven_optimal = false;
};

struct ModelPlan {
  Graph graph;
  PlanOptions options;
  std::string family;                ///< guess_family()
  SolvedModel plan;                  ///< the chosen plan, for options.runtime's lifetimes
  std::vector<SolverRun> runs;       ///< every solver tried (one unless solver == "all")
  std::optional<OrderResult> order;  ///< with memory_order

  /// The ideal arena: planned for a static executor with in-place reuse (options.in_place).
  std::size_t ideal_arena = 0;
  std::size_t ideal_lower_bound = 0;
  /// The peak of live activation bytes an eager runtime sees (no in-place reuse, same order).
  std::size_t eager_peak = 0;
  std::size_t eager_peak_step = 0;
  /// The arena planned for the eager lifetimes (== plan's arena under Runtime::kEager; under
  /// kStatic the eager lifetimes are not solved and this is 0).
  std::size_t eager_arena = 0;

  std::size_t weights_bytes = 0;         ///< at the planned precision (see keep_weights_dtype)
  std::size_t weights_stored_bytes = 0;  ///< as stored in the model
  std::size_t float_bytes = 4;           ///< activations' float32 element size as planned
  std::size_t weight_float_bytes = 4;

  std::vector<BucketPlan> buckets;  ///< one per bucket value (with options.buckets)
  std::optional<PaddingReport> padding;
  FamilyPreset preset;  ///< seed_preset(family)

  std::size_t arena() const { return plan.solve.plan->arena_size; }  ///< the planned arena
  std::size_t total() const;  ///< weights + the planned arena
  /// What the activations need under each runtime: the ideal arena, and the eager peak.
  std::size_t need(Runtime runtime) const;
};

/// Loads `path` and plans it. Throws InvalidInput for bad options or a bad model (naming the
/// file), Error when no solver finds a plan.
ModelPlan plan_model(const std::string& path, const PlanOptions& options = {});

/// The element type a tensor is planned at under `dtype` (fp32, fp16, bf16): "float16" for a
/// float32 tensor planned as fp16, the stored type otherwise.
std::string planned_dtype_name(const Tensor& tensor, const std::string& dtype);

// ---- several models on one device ----

struct ModelShare {
  std::string model;  ///< path as given
  std::string pool;   ///< pool name in the config string (the file's stem, made unique)
  std::size_t weights = 0;
  std::size_t ideal = 0;  ///< weights + ideal arena
  std::size_t eager = 0;  ///< weights + eager peak
  std::size_t quota = 0;  ///< what the pool is given: weights + the planned arena
};

struct DevicePlan {
  std::size_t device_memory = 0;
  Runtime runtime = Runtime::kStatic;  ///< which need the quotas are for
  std::vector<ModelPlan> plans;
  std::vector<ModelShare> models;
  std::size_t total_ideal = 0;
  std::size_t total_eager = 0;
  std::size_t total_quota = 0;
  bool fits() const { return total_quota <= device_memory; }
  /// device_memory - total_quota; negative when the models do not fit.
  long long headroom() const;
  /// The configuration string the runtime accepts for model `i` (its pool and quota).
  std::string config_string(std::size_t i) const;
  /// One string for a process that serves every model (all pools and quotas).
  std::string config_string_all() const;
};

/// Plans every model with `options` (dims apply to the models that have them) and shares the
/// device among them. Throws InvalidInput for no models, a zero device size, a dim that no
/// model has, or a bad model.
DevicePlan plan_device(const std::vector<std::string>& paths, const PlanOptions& options,
                       std::size_t device_memory);

}  // namespace modelmem::model
