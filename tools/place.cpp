// `modelmem place`: many models on many devices. Parses the flags, reads the models and the
// devices, calls sizing::place() and renders the report, or emits the requests of one scheduler
// (sizing::emit) for `kubectl apply -f -`. Every input is checked before anything is computed.
#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "command.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"
#include "modelmem/sizing/placement.hpp"
#include "modelmem/sizing/requests.hpp"
#include "paths.hpp"

namespace fs = std::filesystem;

namespace modelmem::tools {
namespace {

struct PlaceArgs {
  std::vector<std::string> models;
  std::string models_file;
  std::string devices;
  std::vector<std::string> dims;
  std::string dtype = "fp32";
  std::string runtime;  // "" = eager (the pools run under PyTorch or torch_npu)
  std::string strategy;
  std::string overhead;
  int replicas = 1;
  std::size_t exact_limit = 12;
  bool no_templates = false;
  bool no_spread = false;
  std::string emit;
  bool pods = false;
  std::string ns;
  std::string dra_driver;
  std::string dra_capacity = "memory";
  std::string ray_app = "app:build";
  std::string out;
};

std::vector<sizing::ModelSpec> models_of(const PlaceArgs& a) {
  if (a.models.empty() && a.models_file.empty())
    throw InvalidInput("no model: give ONNX files or --models FILE");
  if (!a.models.empty() && !a.models_file.empty())
    throw InvalidInput("give ONNX files or --models FILE, not both");
  if (!a.models_file.empty()) {
    if (!a.dims.empty() || a.dtype != "fp32" || !a.runtime.empty() || a.replicas != 1)
      throw InvalidInput(
          "--dim, --dtype, --runtime and --replicas go with ONNX files; a models file gives "
          "them per model");
    check_input_file(a.models_file, "models file");
    auto specs = sizing::read_models(a.models_file);
    for (const auto& s : specs) {
      std::error_code ec;
      // A served LLM may be a Hugging Face checkpoint folder (plan_serving reads it).
      if (!(s.serve && fs::is_directory(s.path, ec)))
        check_input_file(s.path, s.serve ? "model file" : "ONNX model file");
      if (s.serve && !s.serve->onnx.empty()) check_input_file(s.serve->onnx, "ONNX export");
    }
    return specs;
  }
  std::map<std::string, std::int64_t> dims;
  for (const auto& d : a.dims) {
    auto [name, value] = model::parse_dim(d);
    if (!dims.emplace(name, value).second)
      throw InvalidInput(fmt::format("--dim {} given twice", name));
  }
  for (const auto& path : a.models) check_input_file(path, "ONNX model file");
  return sizing::models_from_files(a.models, dims, a.dtype,
                                   model::parse_runtime(a.runtime.empty() ? "eager" : a.runtime),
                                   a.replicas);
}

int run_place(const PlaceArgs& a) {
  if (a.devices.empty()) throw InvalidInput("--devices is required (8x64GiB, 8x910A or a file)");
  if (!a.emit.empty() && !a.out.empty()) throw InvalidInput("give --emit or --out, not both");
  std::optional<sizing::Target> target;
  if (!a.emit.empty()) target = sizing::parse_target(a.emit);
  if (!a.out.empty()) {
    std::error_code ec;
    if (!fs::is_directory(a.out, ec)) throw InvalidInput("--out " + a.out + ": no such directory");
  }
  std::error_code ec;
  if (fs::exists(a.devices, ec)) check_input_file(a.devices, "devices file");
  const std::vector<sizing::Device> devices = sizing::devices_from(a.devices);
  const std::vector<sizing::ModelSpec> specs = models_of(a);
  sizing::PlaceOptions po;
  po.strategy = a.strategy;
  po.overhead = a.overhead;
  sizing::validate_sizing({}, po);
  po.exact_limit = a.exact_limit;
  po.templates = !a.no_templates;
  po.spread = !a.no_spread;
  sizing::EmitOptions eo;
  eo.pods = a.pods;
  eo.ns = a.ns;
  eo.dra_driver = a.dra_driver;
  eo.dra_capacity = a.dra_capacity;
  eo.ray_app = a.ray_app;
  const sizing::Placement pl = sizing::place(specs, devices, po);
  if (target) {
    if (!pl.fits())
      throw Error("the models do not fit, nothing to emit: " + pl.messages.front() +
                  " (modelmem place without --emit shows the placement)");
    fmt::print("{}", sizing::emit(pl, *target, eo));
    return 0;
  }
  std::string report = sizing::render_text(pl);
  if (!a.out.empty() && pl.fits()) {
    report += "\n";
    for (auto t : {sizing::Target::kHami, sizing::Target::kVnpu, sizing::Target::kDra,
                   sizing::Target::kRay}) {
      const std::string file = (fs::path(a.out) / (sizing::target_name(t) + ".yaml")).string();
      try {
        core::write_file_replacing(file, sizing::emit(pl, t, eo));
        report += fmt::format("{:<14} {}\n", sizing::target_name(t), file);
      } catch (const InvalidInput& e) {
        report += fmt::format("{:<14} not written: {}\n", sizing::target_name(t), e.what());
      }
    }
  }
  fmt::print("{}", report);
  return pl.fits() ? 0 : 1;
}

void setup_place(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<PlaceArgs>();
  auto* cmd = app.add_subcommand(
      "place",
      "Place many models on many devices and emit the requests Kubernetes schedulers consume");
  cmd->add_option("model", a->models, "ONNX model files (or --models FILE)");
  cmd->add_option("--models", a->models_file,
                  "YAML or JSON file: models: [{name, model, dims, dtype, runtime, replicas, "
                  "image, strategy, overhead, serve}]");
  cmd->add_option("--devices", a->devices,
                  "COUNTxSIZE[:KIND] or COUNTxKIND (8x64GiB, 8x910A, 8x80GiB:gpu, 2x8x910A for "
                  "2 nodes), or a YAML/JSON file: nodes: [{name, devices}]")
      ->required();
  cmd->add_option("--dim", a->dims, "Bind a symbolic dim of the ONNX files: NAME=VALUE");
  cmd->add_option("--dtype", a->dtype, "Precision of the ONNX files' float tensors")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--runtime", a->runtime,
                  "Lifetimes planned for: eager (PyTorch, torch_npu; the default) or static (ONNX "
                  "Runtime, a compiled graph)")
      ->check(CLI::IsMember({"static", "eager"}))
      ->capture_default_str();
  cmd->add_option("--strategy", a->strategy,
                  "Every pool's strategy, as plan --strategy (caching, static, planned, "
                  "expandable or a configuration string); a model's `strategy:` overrides it")
      ->default_str("what modelmem run uses: caching");
  cmd->add_option("--overhead", a->overhead,
                  "Memory outside the allocator, once per container (512MiB); default: the "
                  "device kind's (cuda, npu 1GiB, reported not measured; cpu 0); a model's "
                  "`overhead:` overrides it");
  cmd->add_option("--replicas", a->replicas, "Replicas of each ONNX file")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--exact-limit", a->exact_limit,
                  "Replicas up to which the packing is searched exactly (best-fit decreasing "
                  "beyond)")
      ->capture_default_str();
  cmd->add_flag("--no-templates", a->no_templates,
                "Charge Ascend replicas their request, not their vNPU template (HAMi's "
                "hami-core soft slicing, DRA)");
  cmd->add_flag("--no-spread", a->no_spread,
                "Let replicas of one model share a device (by default each goes to a device of "
                "its own)");
  cmd->add_option("--emit", a->emit,
                  "Print only the objects of one scheduler: hami (Deployments), vnpu (Pods on "
                  "static vNPU templates), dra (DeviceClass, ResourceClaims, Pods), ray (a Serve "
                  "config: an application per replica, and the ray start resources)")
      ->check(CLI::IsMember({"hami", "vnpu", "dra", "ray"}));
  cmd->add_flag("--pods", a->pods, "hami: one Pod per replica instead of a Deployment per model");
  cmd->add_option("--namespace", a->ns, "metadata.namespace of the emitted objects");
  cmd->add_option("--dra-driver", a->dra_driver,
                  "dra: the driver name the DeviceClass selects (GPUs: gpu.nvidia.com)");
  cmd->add_option("--dra-capacity", a->dra_capacity,
                  "dra: the capacity name the driver publishes for device memory")
      ->capture_default_str();
  cmd->add_option("--ray-app", a->ray_app,
                  "ray: the import path of your Serve application builder (MODULE:BUILDER); it "
                  "gets args {model, replica, device}")
      ->capture_default_str();
  cmd->add_option("--out", a->out, "Write hami.yaml, vnpu.yaml, dra.yaml and ray.yaml here");
  cmd->callback([a, &exit_code] { exit_code = run_place(*a); });
}

CommandRegistration place_registration(35, &setup_place);

}  // namespace
}  // namespace modelmem::tools
