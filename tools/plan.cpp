// `modelmem plan MODEL.onnx`: the activation arena and weights a model needs, planned ahead of
// time from the model itself, with the options of reduced precision, a memory-aware execution
// order, sequence-length buckets and the static pool to provision.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "command.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/model/graph.hpp"
#include "modelmem/model/lifetimes.hpp"
#include "modelmem/model/order.hpp"
#include "modelmem/model/report.hpp"
#include "modelmem/plan/solver.hpp"

namespace modelmem::tools {
namespace {

struct PlanArgs {
  std::string model;
  std::vector<std::string> dims;
  std::string solver = "best";
  std::string order = "stored";
  std::string dtype = "fp32";
  std::size_t alignment = 64;
  std::string buckets;
  std::string lengths;
  std::optional<double> safety;
  std::string json;
  std::string html;
  double time_limit = 10;
  std::size_t show_live = 8;
  bool no_in_place = false;
  bool no_alias = false;
};

std::string bytes_text_plain(std::size_t b) {
  // Thousands separators without depending on the locale.
  std::string digits = std::to_string(b), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out + " B (" + format_bytes(b) + ")";
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
  return s + "]";
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw InvalidInput(path + ": cannot open for writing");
  out << text;
  if (!out) throw Error(path + ": write failed");
}

int run_plan(const PlanArgs& args) {
  if (!(args.time_limit > 0)) throw InvalidInput("--time-limit must be positive");
  if (args.safety && !(*args.safety >= 1.0 && std::isfinite(*args.safety)))
    throw InvalidInput("--safety must be a factor >= 1");
  if (args.alignment == 0) throw InvalidInput("--align must be positive");
  if (!args.lengths.empty() && args.buckets.empty())
    throw InvalidInput("--lengths needs --buckets (the padding waste is that of a bucket set)");

  model::LoadOptions load;
  for (const auto& d : args.dims) {
    auto [name, value] = model::parse_dim(d);
    if (!load.dims.emplace(name, value).second)
      throw InvalidInput(fmt::format("--dim {} given twice", name));
  }
  std::optional<model::BucketSpec> buckets;
  if (!args.buckets.empty()) {
    buckets = model::parse_buckets(args.buckets);
    if (load.dims.count(buckets->dim))
      throw InvalidInput(
          fmt::format("--buckets {} and --dim {} name the same dim", buckets->dim, buckets->dim));
    load.dims[buckets->dim] = buckets->values.back();  // the main report: the largest bucket
  }
  model::LifetimeOptions lifetimes;
  lifetimes.alignment = args.alignment;
  lifetimes.in_place = !args.no_in_place;
  lifetimes.alias = !args.no_alias;
  lifetimes.float_bytes = args.dtype == "fp32" ? 4 : 2;
  plan::SolveOptions solve;
  solve.time_limit = std::chrono::duration<double>(args.time_limit);

  model::Graph graph = model::load_onnx(args.model, load);
  std::string dims_text;
  for (const auto& [k, v] : graph.dims)
    dims_text += fmt::format("{}{}={}", dims_text.empty() ? "" : ", ", k, v);
  const std::string family = model::guess_family(graph);
  std::size_t activations = 0;
  for (const auto& t : graph.tensors)
    if (t.kind == model::TensorKind::kActivation || t.kind == model::TensorKind::kInput)
      ++activations;
  fmt::print(
      "model          {}{}: {} nodes, {} tensors ({} folded to constants at load), family {}\n",
      graph.source, dims_text.empty() ? "" : " (" + dims_text + ")", graph.nodes.size(),
      graph.tensors.size(), graph.folded_nodes, family);

  std::optional<model::OrderResult> order;
  if (args.order == "memory") {
    order = model::memory_order(graph, lifetimes);
    lifetimes.order = order->order;
  }

  std::vector<std::string> solvers;
  if (args.solver == "all") {
    solvers = plan::solver_names();
  } else {
    solvers = {args.solver};
  }
  std::optional<model::ModelPlan> chosen;
  std::vector<std::pair<std::string, model::ModelPlan>> runs;
  for (const auto& name : solvers) {
    auto mp = model::plan_model(graph, lifetimes, name, solve);
    if (!chosen || mp.solve.plan->arena_size < chosen->solve.plan->arena_size) chosen = mp;
    runs.emplace_back(name, std::move(mp));
  }
  const model::ModelPlan& mp = *chosen;
  const model::Lifetimes& lt = mp.lifetimes;
  const std::size_t arena = mp.solve.plan->arena_size;

  fmt::print("weights        {} in {} initializers (separate region)\n",
             bytes_text_plain(lt.weights_bytes), lt.weights_count);
  fmt::print("activations    {} tensors, {} without reuse ({})\n", lt.activation_count,
             bytes_text_plain(lt.activation_bytes_unshared),
             args.dtype == "fp32" ? "float32 as stored" : "float32 planned as " + args.dtype);
  fmt::print(
      "buffers        {} after {} in-place outputs and {} views of activations ({} of weights)\n",
      lt.problem.buffers.size(), lt.in_place, lt.aliases, lt.weight_views);
  if (runs.size() > 1) {
    fmt::print("solvers        {:<16} {:>14} {:>9} {:>10}\n", "solver", "arena bytes", "/ bound",
               "seconds");
    for (const auto& [name, r] : runs) {
      fmt::print(
          "               {:<16} {:>14} {:>9.4f} {:>10.4f}{}\n", name, r.solve.plan->arena_size,
          mp.lower_bound ? static_cast<double>(r.solve.plan->arena_size) / mp.lower_bound : 1.0,
          r.solve.seconds, r.solve.proven_optimal ? "  optimal" : "");
    }
  }
  fmt::print("planned arena  {} by {} in {:.3f} s{}\n", bytes_text_plain(arena), mp.solve.solver,
             mp.solve.seconds, mp.solve.proven_optimal ? " (proven optimal)" : "");
  fmt::print(
      "lower bound    {}; arena / lower bound = {:.4f}\n", bytes_text_plain(mp.lower_bound),
      mp.lower_bound ? static_cast<double>(arena) / static_cast<double>(mp.lower_bound) : 1.0);
  int largest = -1;
  for (std::size_t t = 0; t < graph.tensors.size(); ++t) {
    if (lt.buffer_of[t] < 0) continue;
    if (largest < 0 || graph.tensors[t].bytes > graph.tensors[largest].bytes)
      largest = static_cast<int>(t);
  }
  if (largest >= 0) {
    const auto& t = graph.tensors[largest];
    fmt::print("largest tensor {} {} {}: {}\n", t.name, model::dtype_name(t.dtype),
               shape_text(t.shape),
               bytes_text_plain(model::activation_bytes(t, lifetimes.float_bytes)));
  }
  if (!lt.order.empty()) {
    auto step = static_cast<std::size_t>(mp.peak.step);
    fmt::print("peak           step {} of {}, {}: {} buffers live\n", step, lt.order.size(),
               graph.describe_node(lt.order[step]), mp.peak.live.size());
    std::vector<std::size_t> live = mp.peak.live;
    std::sort(live.begin(), live.end(), [&](std::size_t a, std::size_t b) {
      return lt.problem.buffers[a].size > lt.problem.buffers[b].size;
    });
    for (std::size_t i = 0; i < live.size() && i < args.show_live; ++i) {
      const auto& b = lt.problem.buffers[live[i]];
      std::string names;
      for (int t : lt.tensors_of[live[i]])
        names += (names.empty() ? "" : " = ") + graph.tensors[t].name;
      fmt::print("                 {:>12}  steps {}..{}  {}\n", format_bytes(b.size), b.start,
                 b.end - 1, names);
    }
    if (live.size() > args.show_live)
      fmt::print("                 ... and {} more\n", live.size() - args.show_live);
  }
  if (order) {
    fmt::print("order          memory ({}, {:.3f} s): peak {} vs stored order {}\n", order->method,
               order->seconds, bytes_text_plain(order->peak), bytes_text_plain(order->stored_peak));
  } else {
    fmt::print("order          stored\n");
  }

  if (buckets) {
    auto plans = model::plan_buckets(args.model, load, *buckets, lifetimes,
                                     args.solver == "all" ? "best" : args.solver, solve,
                                     args.order == "memory");
    std::size_t serving = 0;
    for (const auto& b : plans) {
      serving = std::max(serving, b.arena);
      fmt::print("bucket         {}={:<6} arena {}  lower bound {}\n", buckets->dim, b.value,
                 bytes_text_plain(b.arena), bytes_text_plain(b.lower_bound));
    }
    fmt::print("buckets        one arena serving every bucket: {}\n", bytes_text_plain(serving));
    if (!args.lengths.empty()) {
      auto lengths = model::read_lengths(args.lengths);
      auto pad = model::padding_waste(*buckets, lengths);
      fmt::print(
          "padding        {} requests, {} tokens padded to {}: {:.1f}% of the padded tokens are "
          "waste\n",
          pad.requests, pad.tokens, pad.padded_tokens, 100.0 * pad.waste());
      for (std::size_t i = 0; i < plans.size(); ++i)
        fmt::print("                 {}={:<6} {} requests\n", buckets->dim, buckets->values[i],
                   pad.per_bucket[i]);
      if (pad.too_long)
        fmt::print("                 {} requests longer than the largest bucket (not served)\n",
                   pad.too_long);
    }
  }
  if (args.safety) {
    auto preset = model::seed_preset(family);
    std::size_t need = checked_add(lt.weights_bytes, arena, "pool size");
    auto pool = static_cast<std::size_t>(std::ceil(static_cast<double>(need) * *args.safety));
    fmt::print("pool           (weights + arena) x {} = {}\n", *args.safety,
               bytes_text_plain(pool));
    fmt::print("seed preset    {}: {} x {} = {} ({:.1f}x what the plan needs)\n", preset.family,
               format_bytes(preset.pool_bytes), preset.factor,
               bytes_text_plain(preset.provisioned()),
               pool ? static_cast<double>(preset.provisioned()) / static_cast<double>(pool) : 0.0);
  }
  if (!args.json.empty()) {
    write_file(args.json, model::plan_json(graph, mp).dump(1) + "\n");
    fmt::print("json           {}\n", args.json);
  }
  if (!args.html.empty()) {
    write_file(args.html, model::plan_html(graph, mp, "modelmem plan: " + graph.source));
    fmt::print("html           {}\n", args.html);
  }
  return 0;
}

void setup_plan(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<PlanArgs>();
  auto* cmd =
      app.add_subcommand("plan", "Plan the activation memory of an ONNX model ahead of time");
  cmd->add_option("model", args->model, "ONNX model file (weights embedded, external or absent)")
      ->required();
  cmd->add_option("--dim", args->dims, "Bind a symbolic dim: NAME=VALUE (repeatable)");
  cmd->add_option(
         "--solver", args->solver,
         "Solver: " +
             [] {
               std::string s;
               for (const auto& n : plan::solver_names()) s += n + ", ";
               return s + "or all";
             }())
      ->capture_default_str();
  cmd->add_option("--order", args->order, "Execution order: stored or memory (search a lower peak)")
      ->check(CLI::IsMember({"stored", "memory"}))
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "Plan float32 activations as fp16 or bf16 (2 bytes)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--align", args->alignment, "Buffer alignment and size rounding in bytes")
      ->capture_default_str();
  cmd->add_option("--buckets", args->buckets, "Plan per bucket of one dim: DIM=V1,V2,... ");
  cmd->add_option("--lengths", args->lengths,
                  "Request lengths, one per line: padding waste of the buckets");
  cmd->add_option("--safety", args->safety,
                  "Static pool = (weights + arena) x F, beside the seed preset");
  cmd->add_option("--json", args->json,
                  "Write the plan as JSON (the runtime's plan: key reads it)");
  cmd->add_option("--html", args->html, "Write a self-contained HTML picture of the plan");
  cmd->add_option("--time-limit", args->time_limit, "Seconds for searching solvers (exact, best)")
      ->capture_default_str();
  cmd->add_option("--show-live", args->show_live, "Live buffers listed at the peak")
      ->capture_default_str();
  cmd->add_flag("--no-in-place", args->no_in_place,
                "Do not let elementwise ops write into a dying input");
  cmd->add_flag("--no-alias", args->no_alias, "Do not let view ops share their input's memory");
  cmd->callback([args, &exit_code] { exit_code = run_plan(*args); });
}

CommandRegistration reg(30, &setup_plan);

}  // namespace
}  // namespace modelmem::tools
