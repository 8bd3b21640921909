// plan_model(): the whole of `modelmem plan MODEL` as one call (modelmem/model/plan_model.hpp).
// Validate the options first, then load, then compute every figure; nothing is rendered here.
#include "modelmem/model/plan_model.hpp"

#include <fmt/format.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>

#include "modelmem/core/error.hpp"
#include "modelmem/core/strings.hpp"
#include "modelmem/plan/solver.hpp"

namespace modelmem::model {

std::string runtime_name(Runtime runtime) {
  return runtime == Runtime::kEager ? "eager" : "static";
}

Runtime parse_runtime(const std::string& text) {
  if (text == "static") return Runtime::kStatic;
  if (text == "eager") return Runtime::kEager;
  throw InvalidInput(fmt::format("--runtime {}: expected static or eager", text));
}

namespace {

std::size_t dtype_bytes(const std::string& dtype) {
  if (dtype == "fp32") return 4;
  if (dtype == "fp16" || dtype == "bf16") return 2;
  throw InvalidInput(fmt::format("--dtype {}: expected fp32, fp16 or bf16", dtype));
}

}  // namespace

void validate(const PlanOptions& o) {
  if (!(o.time_limit > 0) || !std::isfinite(o.time_limit))
    throw InvalidInput(
        fmt::format("--time-limit {}: must be a positive number of seconds", o.time_limit));
  constexpr std::size_t kMaxAlign = std::size_t{1} << 20;
  if (o.alignment == 0 || (o.alignment & (o.alignment - 1)) != 0 || o.alignment > kMaxAlign)
    throw InvalidInput(fmt::format("--align {}: out of range: a power of two from 1 to {} bytes",
                                   o.alignment, kMaxAlign));
  dtype_bytes(o.dtype);
  if (o.keep_weights_dtype && o.dtype == "fp32")
    throw InvalidInput(
        "--keep-weights-dtype needs --dtype fp16 or bf16 (fp32 keeps every tensor "
        "as stored already)");
  if (o.runtime == Runtime::kEager && !o.in_place)
    throw InvalidInput(
        "--no-in-place with --runtime eager: the eager runtime reuses nothing in "
        "place already; give one of them");
  if (!o.lengths_path.empty() && !o.buckets)
    throw InvalidInput("--lengths needs --buckets (the padding waste is that of a bucket set)");
  if (o.solver != "all") {
    bool known = false;
    for (const auto& n : plan::solver_names()) known = known || n == o.solver;
    if (!known) {
      std::string names;
      for (const auto& n : plan::solver_names()) names += n + ", ";
      throw InvalidInput(fmt::format("--solver {}: unknown (known: {}or all)", o.solver, names));
    }
  }
  if (o.buckets && o.dims.count(o.buckets->dim))
    throw InvalidInput(
        fmt::format("--buckets {} and --dim {} name the same dim", o.buckets->dim, o.buckets->dim));
}

std::size_t ModelPlan::total() const {
  return checked_add(weights_bytes, arena(), "total bytes");
}

std::size_t ModelPlan::need(Runtime runtime) const {
  return runtime == Runtime::kEager ? eager_peak : ideal_arena;
}

std::string planned_dtype_name(const Tensor& tensor, const std::string& dtype) {
  constexpr std::int32_t kFloat = 1;  // onnx::TensorProto::FLOAT
  if (tensor.dtype == kFloat && dtype == "fp16") return "float16";
  if (tensor.dtype == kFloat && dtype == "bf16") return "bfloat16";
  return dtype_name(tensor.dtype);
}

ModelPlan plan_model(const std::string& path, const PlanOptions& options) {
  validate(options);
  ModelPlan mp;
  mp.options = options;
  // Lengths are read before the model: a bad file stops the command before any work.
  std::vector<std::int64_t> lengths;
  if (!options.lengths_path.empty()) lengths = read_lengths(options.lengths_path);

  LoadOptions load;
  load.dims = options.dims;
  load.ignore_unknown_dims = options.ignore_unknown_dims;
  if (options.buckets) load.dims[options.buckets->dim] = options.buckets->values.back();
  mp.graph = load_onnx(path, load);
  if (!options.ignore_model_limits)
    for (const auto& limit : table_limits(mp.graph))
      if (limit.exceeded()) {
        std::string dims;
        for (const auto& [name, value] : mp.graph.dims)
          dims += fmt::format("{}{}={}", dims.empty() ? "" : " ", name, value);
        throw ModelLimitExceeded(
            limit,
            fmt::format("{}: at {} the model indexes position {} of table '{}' ({}), which "
                        "has {} rows: the sequence is longer than the model takes "
                        "(--ignore-model-limits plans it anyway)",
                        path, dims, limit.largest_index, limit.table, limit.node, limit.rows));
      }
  mp.family = guess_family(mp.graph);
  mp.preset = seed_preset(mp.family);

  mp.float_bytes = dtype_bytes(options.dtype);
  mp.weight_float_bytes = options.keep_weights_dtype ? 4 : mp.float_bytes;
  LifetimeOptions ideal;
  ideal.alignment = options.alignment;
  ideal.in_place = options.in_place;
  ideal.alias = options.alias;
  ideal.float_bytes = mp.float_bytes;
  ideal.weight_float_bytes = mp.weight_float_bytes;
  if (options.memory_order) {
    mp.order = memory_order(mp.graph, ideal);
    ideal.order = mp.order->order;
  }
  LifetimeOptions eager = ideal;
  eager.in_place = false;
  eager.inputs_live_throughout = true;
  eager.conv_workspace = options.eager_conv_workspace;
  eager.module_scopes = options.eager_module_scopes;
  eager.fuse_leaf_modules = options.eager_module_scopes;
  eager.activation_in_place_after_norm = true;
  eager.linear_bias_in_place = options.eager_module_scopes;
  eager.window_attention = options.eager_module_scopes;
  eager.attention_locals = options.eager_module_scopes;
  eager.sdpa = options.eager_module_scopes;

  plan::SolveOptions solve;
  solve.time_limit = std::chrono::duration<double>(options.time_limit);
  solve.progress = options.progress;
  std::vector<std::string> solvers =
      options.solver == "all" ? plan::solver_names() : std::vector<std::string>{options.solver};
  const LifetimeOptions& planned = options.runtime == Runtime::kEager ? eager : ideal;
  std::optional<SolvedModel> chosen;
  for (const auto& name : solvers) {
    SolvedModel s = solve_model(mp.graph, planned, name, solve);
    mp.runs.push_back({name, s.solve.plan->arena_size, s.solve.seconds, s.solve.proven_optimal});
    if (!chosen || s.solve.plan->arena_size < chosen->solve.plan->arena_size) chosen = std::move(s);
  }
  mp.plan = std::move(*chosen);
  const std::string best_solver = options.solver == "all" ? "best" : options.solver;
  if (options.runtime == Runtime::kStatic) {
    mp.ideal_arena = mp.arena();
    mp.ideal_lower_bound = mp.plan.lower_bound;
    Lifetimes lt = build_lifetimes(mp.graph, eager);
    mp.eager_peak = plan::lower_bound(lt.problem);
    mp.eager_peak_step = static_cast<std::size_t>(plan::peak(lt.problem).step);
  } else {
    mp.eager_arena = mp.arena();
    mp.eager_peak = mp.plan.lower_bound;
    mp.eager_peak_step = static_cast<std::size_t>(mp.plan.peak.step);
    SolvedModel s = solve_model(mp.graph, ideal, best_solver, solve);
    mp.ideal_arena = s.solve.plan->arena_size;
    mp.ideal_lower_bound = s.lower_bound;
  }
  mp.weights_bytes = mp.plan.lifetimes.weights_bytes;
  for (const auto& t : mp.graph.tensors)
    if (t.kind == TensorKind::kWeight)
      mp.weights_stored_bytes = checked_add(mp.weights_stored_bytes, t.bytes, "weights bytes");

  if (options.buckets) {
    mp.buckets = plan_buckets(path, load, *options.buckets, planned, best_solver, solve,
                              options.memory_order);
    if (!lengths.empty()) mp.padding = padding_waste(*options.buckets, lengths);
  }
  return mp;
}

long long DevicePlan::headroom() const {
  return static_cast<long long>(device_memory) - static_cast<long long>(total_quota);
}

DevicePlan plan_device(const std::vector<std::string>& paths, const PlanOptions& options,
                       std::size_t device_memory) {
  if (paths.empty()) throw InvalidInput("no model given");
  if (device_memory == 0) throw InvalidInput("--device-memory must be positive");
  if (options.buckets) throw InvalidInput("--buckets plans one model; give it with a single model");
  validate(options);
  DevicePlan dp;
  dp.device_memory = device_memory;
  dp.runtime = options.runtime;
  PlanOptions each = options;
  each.ignore_unknown_dims = true;
  std::map<std::string, int> used;
  for (const auto& [name, value] : options.dims) used[name] = 0;
  for (const auto& path : paths) {
    dp.plans.push_back(plan_model(path, each));
    for (const auto& [name, value] : dp.plans.back().graph.dims) ++used[name];
  }
  for (const auto& [name, count] : used)
    if (count == 0) {
      std::set<std::string> known;
      for (const ModelPlan& mp : dp.plans)
        for (const auto& [dim, value] : mp.graph.dims) known.insert(dim);
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw InvalidInput(
          fmt::format("--dim {}: none of the models has a dim named '{}' (they "
                      "have: {})",
                      name, name, list.empty() ? "none" : list));
    }
  std::set<std::string> taken;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    const ModelPlan& mp = dp.plans[i];
    ModelShare s;
    s.model = paths[i];
    std::string stem = std::filesystem::path(paths[i]).stem().string();
    // The pool-name rule (core::valid_pool_name); a suffix _N keeps names unique.
    std::string pool = core::pool_name_from(stem);
    const std::string base = pool;
    for (int n = 2; taken.count(pool); ++n) pool = fmt::format("{}_{}", base, n);
    if (!core::valid_pool_name(pool))
      throw InvalidInput(fmt::format("{}: no pool name follows the rule ({}) for this model",
                                     paths[i], core::pool_name_rule()));
    taken.insert(pool);
    s.pool = pool;
    s.weights = mp.weights_bytes;
    s.ideal = checked_add(mp.weights_bytes, mp.ideal_arena, "model need");
    s.eager = checked_add(mp.weights_bytes, mp.eager_peak, "model need");
    s.quota = mp.total();  // sizing gives each its need on the strategy (plan_need.hpp)
    dp.total_ideal = checked_add(dp.total_ideal, s.ideal, "total need");
    dp.total_eager = checked_add(dp.total_eager, s.eager, "total need");
    dp.total_quota = checked_add(dp.total_quota, s.quota, "total need");
    dp.models.push_back(std::move(s));
  }
  return dp;
}

}  // namespace modelmem::model
