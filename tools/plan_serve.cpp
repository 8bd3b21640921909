// `modelmem plan --serve MODEL` (tools/plan_serve.hpp): parses the serving flags, calls
// sizing::plan_serving() and prints its report. Every input is checked before anything is read.
#include "plan_serve.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <regex>

#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"
#include "modelmem/model/kv_cache.hpp"
#include "modelmem/model/plan_model.hpp"
#include "modelmem/monitor/view.hpp"
#include "modelmem/sizing/serving.hpp"
#ifdef MODELMEM_HAVE_CUDA
#include "modelmem/monitor/cuda.hpp"
#endif

namespace fs = std::filesystem;

namespace modelmem::tools {
namespace {

// A size ("64GiB") or a live device ("cuda:0", "npu:0") whose total memory the driver reports.
std::size_t device_memory(const std::string& text) {
  static const std::regex live(R"((cuda|npu):\d+)");
  if (!std::regex_match(text, live)) return parse_size(text, "--device-memory");
#ifdef MODELMEM_HAVE_CUDA
  monitor::register_cuda_memory_query();
#endif
  monitor::ScanOptions so;
  monitor::MachineView v = monitor::look(so, /*devices=*/true);
  std::string seen;
  for (const auto& d : v.devices) {
    if (d.device == text) return static_cast<std::size_t>(d.total);
    seen += (seen.empty() ? "" : ", ") + d.device;
  }
  throw InvalidInput(fmt::format("--device-memory {}: no such device here (found: {})", text,
                                 seen.empty() ? "none" : seen));
}

}  // namespace

std::shared_ptr<ServeArgs> add_serve_options(CLI::App* cmd, bool as_flag) {
  auto a = std::make_shared<ServeArgs>();
  // On `plan` each serving option's help says it goes with --serve; `serve` needs no such word.
  const std::string with = as_flag ? "--serve" : "";
  auto help = [&with](const std::string& text) { return with.empty() ? text : with + ": " + text; };
  const std::string what =
      "Serving plan of a decoder LLM: an ONNX export with its KV cache or a Hugging "
      "Face checkpoint folder (config.json + *.safetensors, weights not read) or a GGUF "
      "file (metadata and tensor infos); needs --device-memory";
  if (as_flag)
    cmd->add_option("--serve", a->model, what);
  else
    cmd->add_option("model", a->model, what)->required();
  cmd->add_option("--context", a->context,
                  help("tokens per request (prompt + output; default the model's max "
                       "positions, else 8192)"))
      ->check(CLI::PositiveNumber);
  cmd->add_option("--block-size", a->block_size, help("tokens per KV block"))
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-batched-tokens", a->max_batched_tokens,
                  help("the prefill chunk (tokens of one step) planned"))
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-num-seqs", a->max_num_seqs,
                  help("the decode batch (sequences of one step) planned"))
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--kv-dtype", a->kv_dtype,
                  help("KV cache element type: fp16, bf16, fp32, fp8 (fp8_e4m3, fp8_e5m2), "
                       "int8 (default the model's)"));
  cmd->add_option("--tp", a->tp, help("tensor-parallel ranks (weights and KV heads per rank)"))
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--mean-context", a->mean_context,
                  help("capacity for requests of this mean length (or --lengths FILE)"))
      ->check(CLI::PositiveNumber);
  cmd->add_option("--kv", a->kv,
                  help("a KV pair INPUT=OUTPUT of an ONNX decoder (repeatable; default: "
                       "past*/present* by name)"));
  cmd->add_option(
      "--kv-window", a->kv_window,
      help("a sliding window of an ONNX decoder's KV cache: N (every pair) or "
           "NAME=N (a KV input or layer number; repeatable; default: found in the graph)"));
  cmd->add_option("--onnx", a->onnx,
                  (with.empty() ? "" : with + " ") +
                      "with a checkpoint: plan the step activations from this ONNX export");
  cmd->add_option("--engine", a->engine,
                  help("print one engine's settings: vllm, sglang, tensorrt_llm or llama.cpp "
                       "(default "
                       "all; docs/serving.md has the table)"));
  cmd->add_option("--engine-fraction", a->engine_fraction,
                  help("the engines' memory fraction their own formula is shown at"))
      ->capture_default_str();
  return a;
}

void JsonOutput::check() const {
  if (!file.empty()) core::check_output_file(file, core::OutputWrite::kReplacing, "-o");
}

void JsonOutput::emit(std::string report, const std::string& json) const {
  if (!file.empty()) {
    core::write_file_replacing(file, json);  // through a temporary file renamed into place
    report += fmt::format("json           {}\n", file);
  }
  fmt::print("{}", print ? json : report);
}

std::function<JsonOutput()> add_json_options(CLI::App* cmd) {
  auto out = std::make_shared<std::string>();
  auto old = std::make_shared<std::string>();
  cmd->add_option("-o,--output", *out,
                  "Write the plan as JSON to this file (the runtime's plan: key reads it)");
  cmd->add_option("--json", *old,
                  "Print the plan as JSON instead of the report (--json FILE.json: the old "
                  "spelling of -o FILE.json)")
      ->expected(0, 1)
      ->type_name("");
  return [cmd, out, old] {
    JsonOutput j;
    j.file = *out;
    if (old->empty()) {
      j.print = cmd->count("--json") > 0;
      return j;
    }
    // The old spelling, for one release: only a .json name (a model named there is not
    // overwritten).
    if (!old->ends_with(".json"))
      throw InvalidInput(fmt::format(
          "--json {}: --json prints the plan as JSON and takes no value; write a file with -o "
          "FILE (the old --json FILE is kept for .json names)",
          *old));
    if (!out->empty()) throw InvalidInput("-o and --json FILE both name the JSON file: give -o");
    std::fprintf(stderr,
                 "modelmem %s: --json %s is the old spelling of -o %s (kept for one release)\n",
                 cmd->get_name().c_str(), old->c_str(), old->c_str());
    j.file = *old;
    return j;
  };
}

int run_plan_serve(const ServeArgs& a, const PlanShared& shared) {
  sizing::ServeOptions o;
  if (shared.device_memory.empty())
    throw InvalidInput("--serve needs --device-memory SIZE (64GiB) or a device (cuda:0, npu:0)");
  o.context = a.context;
  o.block_size = a.block_size;
  o.max_batched_tokens = a.max_batched_tokens;
  o.max_num_seqs = a.max_num_seqs;
  o.dtype = shared.dtype;
  o.kv_dtype = a.kv_dtype;
  o.tp = a.tp;
  o.overhead = shared.overhead;
  o.strategy = shared.strategy;
  o.backend = sizing::parse_backend(shared.device_kind);
  o.lengths_path = shared.lengths;
  if (a.mean_context > 0) o.mean_context = a.mean_context;
  for (const auto& k : a.kv) o.kv_pairs.push_back(model::parse_kv_pair(k));
  for (const auto& w : a.kv_window) o.kv_windows.push_back(model::parse_kv_window(w));
  o.onnx = a.onnx;
  if (!shared.runtime.empty()) o.runtime = shared.runtime;
  o.engine_fraction = a.engine_fraction;
  o.ignore_model_limits = shared.ignore_model_limits;
  o.engine = a.engine;
  o.device_memory = 1;  // checked below, after the cheap checks
  sizing::validate(o);
  if (!shared.lengths.empty() && fs::is_directory(shared.lengths))
    throw InvalidInput(fmt::format("--lengths {}: is a directory", shared.lengths));
  shared.json.check();
  o.device_memory = device_memory(shared.device_memory);
  sizing::ServePlan p = sizing::plan_serving(a.model, o);
  shared.json.emit(sizing::render_text(p), sizing::render_json_text(p));
  return 0;
}

}  // namespace modelmem::tools
