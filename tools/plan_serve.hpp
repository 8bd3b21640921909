// `modelmem plan --serve MODEL`: the serving plan of a decoder LLM (sizing/serving.hpp). Its
// options are added to `plan` by add_serve_options(); the flags it shares with plan
// (--device-memory, --dtype, --lengths, --json, --runtime, --strategy, --overhead,
// --device-kind) are read from plan's own.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace modelmem::tools {

struct ServeArgs {
  std::string model;
  std::int64_t context = 0;
  std::int64_t block_size = 16;
  std::int64_t max_batched_tokens = 8192;
  std::int64_t max_num_seqs = 256;
  std::string kv_dtype;
  int tp = 1;
  double mean_context = 0;
  std::vector<std::string> kv;
  std::vector<std::string> kv_window;
  std::string onnx;
  double engine_fraction = 0.9;
  std::string engine;  ///< --engine: one engine's settings
};

/// Where `plan`, `fit` and `serve` put the plan's JSON: `-o FILE` writes it beside the text
/// report; `--json` prints it instead of the report, as every other command's --json does. The
/// old `--json FILE` (a .json file) still means -o FILE, with a note.
struct JsonOutput {
  std::string file;    ///< -o FILE ("" = none)
  bool print = false;  ///< --json
  /// Refuses a file that cannot be written (a directory, a missing folder), before any work.
  void check() const;
  /// Prints `report` (with a line naming the file written), or, with --json, `json` instead.
  void emit(std::string report, const std::string& json) const;
};

/// Adds -o/--output and --json to a command; the returned function reads them after parsing.
std::function<JsonOutput()> add_json_options(CLI::App* cmd);

/// The values of plan's own flags that the serving plan reads.
struct PlanShared {
  std::string device_memory;
  std::string dtype;  ///< "" when --dtype was not given
  std::string lengths;
  JsonOutput json;
  std::string runtime;               ///< "" when --runtime was not given
  std::string strategy;              ///< --strategy: the need of the weights and the steps
  std::string overhead;              ///< --overhead text ("" = the device kind's default)
  std::string device_kind;           ///< --device-kind
  bool ignore_model_limits = false;  ///< --ignore-model-limits: a context past the positions
};

/// The serving options, on `plan` (`as_flag`: the model is --serve MODEL) or on `serve` (the
/// model is the positional argument).
std::shared_ptr<ServeArgs> add_serve_options(CLI::App* cmd, bool as_flag = true);
int run_plan_serve(const ServeArgs& args, const PlanShared& shared);

}  // namespace modelmem::tools
