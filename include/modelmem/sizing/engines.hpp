// The serving engines `plan --serve` prints settings for, as one table (src/sizing/engines.cpp):
// each engine's name, its settings, how it sizes its KV cache, its block or page rules, its KV
// dtype names, its limits, and whether it runs here (tests/engines) or stays a formula. A new
// engine is one row; `plan --serve --engine NAME` prints one.
#pragma once

#include <string>
#include <vector>

#include "modelmem/sizing/serving.hpp"

namespace modelmem::sizing {

/// How an engine sizes its KV cache when it is not given explicit bytes.
enum class KvSizing {
  kFractionOfTotal,  ///< a fraction of the device minus what it profiled (vLLM, SGLang)
  kFractionOfFree,   ///< a fraction of the memory free after weights and activations (TRT-LLM)
  kExplicit,         ///< only explicit sizes (tokens or bytes)
};

struct EngineInfo {
  const char* name = "";      ///< "vllm": the --engine name and the JSON key
  const char* label = "";     ///< "vLLM, vllm-ascend"
  const char* env_name = "";  ///< MODELMEM_<env_name>_ARGS in `place` (docs/fleet.md)
  bool cuda_only = false;     ///< no NPU or host build
  KvSizing kv_sizing = KvSizing::kExplicit;
  const char* kv_settings = "";  ///< the settings that size its KV cache
  const char* block_rule = "";   ///< tokens per block or page it takes
  const char* kv_dtypes = "";    ///< its names of the KV cache element types
  const char* limits = "";       ///< what it refuses
  /// Where it was run against the plan ("" = a formula: it does not run here).
  const char* run_here = "";
  /// Fills `e.settings`, `e.default_kv_tokens` and `e.difference` from the plan.
  void (*fill)(EngineSettings& e, ServePlan& p, const ServeOptions& o) = nullptr;
};

/// Every engine, in the order printed.
const std::vector<EngineInfo>& engine_table();
/// The row named `name`; InvalidInput naming the flag and the known names otherwise.
const EngineInfo& find_engine(const std::string& name);
/// Adds each engine's settings (or only `o.engine`'s) to the plan.
void add_engines(ServePlan& p, const ServeOptions& o);

}  // namespace modelmem::sizing
