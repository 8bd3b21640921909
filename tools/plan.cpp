// `modelmem plan MODEL.onnx [MODEL2.onnx ...]`: parses the flags, calls sizing::plan_need() (or
// sizing::plan_device() with --device-memory) and renders the result with the library's
// renderers. Every input is checked before anything is computed, and files are
// written before the report is printed, so an error stops the command with nothing on stdout.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "command.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"
#include "modelmem/model/plan_model.hpp"
#include "modelmem/model/render.hpp"
#include "modelmem/plan/solver.hpp"
#include "modelmem/sizing/fit.hpp"
#include "modelmem/sizing/plan_need.hpp"
#include "plan_serve.hpp"

namespace fs = std::filesystem;

namespace modelmem::tools {
namespace {

struct PlanArgs {
  std::vector<std::string> models;
  std::vector<std::string> dims;
  std::string solver = "best";
  std::string order = "stored";
  std::string dtype = "fp32";
  bool keep_weights_dtype = false;
  std::size_t alignment = 64;
  std::string runtime;  // "" = eager with --device-memory (pool quotas), else static
  std::string buckets;
  std::string lengths;
  std::optional<double> safety;
  std::string device_memory;
  JsonOutput json;  // set after parsing (add_json_options)
  std::string html;
  double time_limit = 10;
  std::size_t show_live = 8;
  bool no_in_place = false;
  bool no_alias = false;
  bool no_conv_workspace = false;
  bool no_module_scopes = false;
  bool ignore_model_limits = false;
  std::string strategy;
  std::string overhead;
  std::string device_kind = "cuda";
  std::string fit;
  bool fit_each = false;
  std::int64_t fit_every_max = 4096;
};

// Through a temporary file renamed into place: a symlink at `path` is replaced, not followed.
void write_file(const std::string& path, const std::string& text) {
  core::write_file_replacing(path, text);
}

model::PlanOptions plan_options(const PlanArgs& args) {
  model::PlanOptions o;
  for (const auto& d : args.dims) {
    auto [name, value] = model::parse_dim(d);
    if (!o.dims.emplace(name, value).second)
      throw InvalidInput(fmt::format("--dim {} given twice", name));
  }
  o.solver = args.solver;
  o.memory_order = args.order == "memory";
  o.dtype = args.dtype;
  o.keep_weights_dtype = args.keep_weights_dtype;
  o.alignment = args.alignment;
  // Where pool quotas are printed (--device-memory: a shared device, --fit) they are for the
  // framework that will run the model; PyTorch and torch_npu run it eagerly, and a static
  // executor's quota overflows under them. Without --device-memory both figures are printed.
  o.runtime = model::parse_runtime(!args.runtime.empty()        ? args.runtime
                                   : args.device_memory.empty() ? "static"
                                                                : "eager");
  o.in_place = !args.no_in_place;
  o.alias = !args.no_alias;
  o.eager_conv_workspace = !args.no_conv_workspace;
  o.eager_module_scopes = !args.no_module_scopes;
  if (!args.buckets.empty()) o.buckets = model::parse_buckets(args.buckets);
  o.lengths_path = args.lengths;
  o.time_limit = args.time_limit;
  o.ignore_model_limits = args.ignore_model_limits;
  return o;
}

// --fit DIM [--fit-each]: the largest value of DIM that fits --device-memory.
int run_fit(const PlanArgs& args, const model::PlanOptions& options,
            const sizing::SizingOptions& sizing, std::size_t device) {
  if (args.fit.empty()) throw InvalidInput("--fit-each needs --fit DIM");
  if (!args.html.empty()) throw InvalidInput("--html draws one plan; it does not go with --fit");
  sizing::FitRequest request;
  request.models = args.models;
  request.options = options;
  request.sizing = sizing;
  request.device_memory = device;
  request.dim = args.fit;
  if (args.fit_every_max < 0) throw InvalidInput("--fit-every-max must be >= 0");
  request.every_max = args.fit_every_max;
  std::vector<sizing::FitResult> results;
  if (args.fit_each)
    results = sizing::fit_each(request);
  else
    results.push_back(sizing::fit(request));
  std::string report;
  bool found = true;
  for (const auto& f : results) {
    report += sizing::render_text(f);
    found = found && f.found();
  }
  const nlohmann::json j =
      args.fit_each ? sizing::render_json(results) : sizing::render_json(results.front());
  args.json.emit(report, j.dump(1) + "\n");
  return found ? 0 : 1;
}

int run_plan(const PlanArgs& args) {
  if (args.models.empty()) throw InvalidInput("plan: give an ONNX model (or --serve MODEL)");
  model::PlanOptions options = plan_options(args);
  model::validate(options);
  sizing::SizingOptions sizing;
  sizing.strategy = args.strategy;
  sizing.overhead = args.overhead;
  sizing.backend = sizing::parse_backend(args.device_kind);
  sizing.safety = args.safety;
  const std::size_t device =
      args.device_memory.empty() ? 0 : parse_size(args.device_memory, "--device-memory");
  sizing::validate(sizing, device);
  args.json.check();
  if (!args.html.empty())
    core::check_output_file(args.html, core::OutputWrite::kReplacing, "--html");
  if (!args.lengths.empty() && fs::is_directory(args.lengths))
    throw InvalidInput(fmt::format("--lengths {}: is a directory", args.lengths));
  for (const auto& m : args.models) {
    std::error_code ec;
    if (fs::is_directory(m, ec))
      throw InvalidInput(fmt::format("{}: is a directory, not an ONNX model file", m));
  }

  if (!args.fit.empty() || args.fit_each) return run_fit(args, options, sizing, device);
  if (args.device_memory.empty()) {
    if (args.models.size() > 1)
      throw InvalidInput(fmt::format(
          "{} models given: planning several models shares a device, give --device-memory SIZE",
          args.models.size()));
    sizing::ModelNeed mn = sizing::plan_need(args.models[0], options, sizing);
    const model::ModelPlan& mp = mn.plan;
    model::TextOptions text;
    text.show_live = args.show_live;
    std::string report = sizing::render_text(mn, text);
    if (!args.html.empty()) {
      write_file(args.html, model::render_html(mp));
      report += fmt::format("html           {}\n", args.html);
    }
    args.json.emit(report, sizing::render_json_text(mn));
    return 0;
  }

  if (!args.html.empty())
    throw InvalidInput("--html draws one model's plan; it does not go with --device-memory");
  sizing::DeviceNeed dn = sizing::plan_device(args.models, options, device, sizing);
  args.json.emit(sizing::render_text(dn), sizing::render_json(dn).dump(1) + "\n");
  return dn.fits() ? 0 : 1;
}

// The three commands that share plan's options: `plan` (one model, or several sharing a
// device), `fit` (the largest value of a dim) and `serve` (a decoder's serving plan, which reads
// only the options marked below).
enum class Form { kPlan, kFit, kServe };

// Returns what reads -o and --json after parsing (add_json_options).
std::function<JsonOutput()> add_plan_options(CLI::App* cmd, PlanArgs& a, Form form) {
  const bool graph = form != Form::kServe;  // options of the ONNX planner (not `serve`)
  if (graph) cmd->add_option("--dim", a.dims, "Bind a symbolic dim: NAME=VALUE (repeatable)");
  if (graph)
    cmd->add_option(
           "--solver", a.solver,
           "Solver: " +
               [] {
                 std::string s;
                 for (const auto& n : plan::solver_names()) s += n + ", ";
                 return s + "or all";
               }())
        ->capture_default_str();
  if (graph)
    cmd->add_option("--order", a.order, "Execution order: stored or memory (search a lower peak)")
        ->check(CLI::IsMember({"stored", "memory"}))
        ->capture_default_str();
  cmd->add_option("--runtime", a.runtime,
                  "static or eager: plan for a static executor with in-place reuse (static: ONNX "
                  "Runtime, a compiled graph) or for PyTorch-style eager execution (eager: "
                  "PyTorch, torch_npu); both figures are printed. Default: eager with "
                  "--device-memory (the quotas are for PyTorch), else static");
  cmd->add_option("--dtype", a.dtype,
                  "fp32 (as stored), fp16 or bf16: plan float32 activations and weights at that "
                  "width")
      ->capture_default_str();
  if (graph)
    cmd->add_flag("--keep-weights-dtype", a.keep_weights_dtype,
                  "With --dtype: convert the activations only, weights as stored");
  if (graph)
    cmd->add_option("--align", a.alignment, "Buffer alignment and size rounding in bytes")
        ->capture_default_str();
  if (graph) cmd->add_option("--buckets", a.buckets, "Plan per bucket of one dim: DIM=V1,V2,... ");
  cmd->add_option("--lengths", a.lengths,
                  "Request lengths, one per line: padding waste of the buckets");
  if (graph)
    cmd->add_option("--safety", a.safety,
                    "Each quota = the need on --strategy x F (whole MiB): one model's (printed "
                    "beside the seed preset) or each model's with --device-memory");
  cmd->add_option("--device-memory", a.device_memory,
                  "Share a device of SIZE (16GiB, 512MiB, bytes) among the models: each one's "
                  "need, the fit, the headroom and per-model configuration strings");
  cmd->add_option("--strategy", a.strategy,
                  "The strategy whose need sizes every quota, total and fit: caching, static, "
                  "planned, expandable or a configuration string (default: what `modelmem run` "
                  "builds, strategy:caching)");
  cmd->add_option("--overhead", a.overhead,
                  "Device memory outside the allocator (runtime context, library workspaces): a "
                  "size (512MiB) or a fraction of --device-memory (0.05, 5%); default per "
                  "--device-kind");
  cmd->add_option("--device-kind", a.device_kind,
                  "cuda, npu or host, or a device kind of `place --devices` (910B3, 310P, gpu, "
                  "cpu, ...): the device the plan is for, its default --overhead (cuda, npu: 1 "
                  "GiB; host: 0)")
      ->capture_default_str();
  if (form == Form::kPlan)
    cmd->add_option("--fit", a.fit,
                    "The largest value of this dim (batch, seq, ...) whose need fits "
                    "--device-memory, for every model together; the need there and one above");
  if (form != Form::kServe)
    cmd->add_flag("--fit-each", a.fit_each, "With --fit: each model's largest value alone");
  if (form != Form::kServe)
    cmd->add_option("--fit-every-max", a.fit_every_max,
                    "With --fit: plan each value from 1 up to the one found, at most this many, "
                    "for the answer that every value up to it fits (0: the single value only)")
        ->capture_default_str();
  auto json = add_json_options(cmd);
  if (graph) cmd->add_option("--html", a.html, "Write a self-contained HTML picture of the plan");
  if (graph)
    cmd->add_option("--time-limit", a.time_limit, "Seconds for searching solvers (exact, best)")
        ->capture_default_str();
  if (graph)
    cmd->add_option("--show-live", a.show_live, "Live buffers listed at the peak")
        ->capture_default_str();
  if (graph)
    cmd->add_flag("--no-in-place", a.no_in_place,
                  "Do not let elementwise ops write into a dying input");
  if (graph)
    cmd->add_flag("--no-alias", a.no_alias, "Do not let view ops share their input's memory");
  if (graph)
    cmd->add_flag("--no-conv-workspace", a.no_conv_workspace,
                  "Eager figure without the copies PyTorch's CPU convolution (oneDNN) makes of a "
                  "Conv's input and weights (kernels larger than 1x1)");
  cmd->add_flag("--ignore-model-limits", a.ignore_model_limits,
                "Plan dims past the model's limits (a position table's rows) instead of refusing "
                "them");
  if (graph)
    cmd->add_flag("--no-module-scopes", a.no_module_scopes,
                  "Eager figure without holding a PyTorch module's arguments until it returns "
                  "(scopes read from torch.onnx node names)");
  return json;
}

// The flags of plan's that the serving plan reads, for `plan --serve` and `serve`.
PlanShared shared_flags(const PlanArgs& a, const CLI::App& cmd) {
  return {a.device_memory,
          cmd.count("--dtype") ? a.dtype : "",
          a.lengths,
          a.json,
          cmd.count("--runtime") ? a.runtime : "",
          a.strategy,
          a.overhead,
          a.device_kind,
          a.ignore_model_limits};
}

void setup_plan(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<PlanArgs>();
  auto* cmd =
      app.add_subcommand("plan", "Plan the activation memory of an ONNX model ahead of time");
  cmd->add_option("model", args->models,
                  "ONNX model file (weights embedded, external or absent); several with "
                  "--device-memory");
  auto json = add_plan_options(cmd, *args, Form::kPlan);
  auto serve = add_serve_options(cmd);
  cmd->callback([args, serve, cmd, json, &exit_code] {
    args->json = json();
    if (serve->model.empty()) {
      exit_code = run_plan(*args);
      return;
    }
    if (!args->models.empty())
      throw InvalidInput("--serve MODEL plans one model: give no other model");
    sizing::parse_backend(args->device_kind);  // refused as without --serve
    exit_code = run_plan_serve(*serve, shared_flags(*args, *cmd));
  });
}

CommandRegistration plan_registration(30, &setup_plan);

// `modelmem fit DIM MODEL...`: what `plan MODEL... --fit DIM` prints (that form stays).
void setup_fit(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand(
      "fit", "The largest value of a dim (batch, seq, ...) whose need fits --device-memory");
  cmd->add_option("dim", args->fit, "The dim to grow: batch, seq, ...")->required();
  cmd->add_option("model", args->models, "ONNX model file(s): their needs fit together")
      ->required();
  auto json = add_plan_options(cmd, *args, Form::kFit);
  cmd->callback([args, json, &exit_code] {
    args->json = json();
    if (args->device_memory.empty())
      throw InvalidInput("fit: give --device-memory SIZE (16GiB): the device to fit");
    exit_code = run_plan(*args);
  });
}

CommandRegistration fit_registration(31, &setup_fit);

// `modelmem serve MODEL`: what `plan --serve MODEL` prints (that form stays).
void setup_serve(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand(
      "serve",
      "The serving plan of a decoder LLM on a device: KV cache, capacity, engine settings");
  auto json = add_plan_options(cmd, *args, Form::kServe);
  auto serve = add_serve_options(cmd, /*as_flag=*/false);
  cmd->callback([args, serve, cmd, json, &exit_code] {
    args->json = json();
    sizing::parse_backend(args->device_kind);
    exit_code = run_plan_serve(*serve, shared_flags(*args, *cmd));
  });
}

CommandRegistration serve_registration(32, &setup_serve);

}  // namespace
}  // namespace modelmem::tools
