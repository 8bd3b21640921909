// The serving plan of a decoder LLM (`modelmem plan --serve MODEL`): on a device of a given size,
// the need of the weights and the steps' activations on the allocator that serves them (a decode
// step of B sequences and a prefill chunk of T tokens, planned from an ONNX export with its KV
// cache kept out of the arena, their allocation sequence run through the strategy's own code, as
// `modelmem plan` sizes every quota) and the overhead leave a KV-cache pool; in whole blocks of
// `block_size` tokens it holds `kv_tokens` tokens, `max_concurrency` sequences at the context, one
// sequence of `max_context` tokens. With the settings that make vLLM / vllm-ascend, SGLang and
// TensorRT-LLM allocate exactly that pool, and what each engine's own formula would give on the
// same device. MODEL is an ONNX decoder or a Hugging Face checkpoint folder (config.json +
// safetensors headers; activations from an ONNX export given with `onnx`, else a per-family
// formula, an estimate). Value types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "modelmem/model/kv_cache.hpp"
#include "modelmem/sizing/need.hpp"
#include "modelmem/trace/trace.hpp"

namespace modelmem::sizing {

struct ServeOptions {
  std::size_t device_memory = 0;           ///< bytes of one device (> 0)
  std::int64_t context = 0;                ///< --context; 0: the model's max positions, else 8192
  std::int64_t block_size = 16;            ///< tokens per KV block
  std::int64_t max_batched_tokens = 8192;  ///< the prefill chunk planned (tokens of one step)
  std::int64_t max_num_seqs = 256;         ///< the decode batch planned
  std::string dtype;     ///< weights and activations: "" as stored, fp32/fp16/bf16
  std::string kv_dtype;  ///< "" = dtype (or as stored); fp8/int8 1 byte
  int tp = 1;            ///< tensor-parallel ranks: per-rank weights and KV heads
  /// The strategy whose need holds the weights and the steps' activations: strategy_config()
  /// text, as `plan --strategy`; "" = what `modelmem run` builds (strategy:caching).
  std::string strategy;
  /// Bytes beside the pool and the KV cache (runtime context, graph capture): parse_overhead()
  /// text ("1GiB", "5%"); "" = the default for `backend` (cuda, npu: 1 GiB), as `plan`.
  std::string overhead;
  Backend backend = Backend::kCuda;    ///< --device-kind: the default overhead
  std::string lengths_path;            ///< request lengths (total tokens), one per line
  std::optional<double> mean_context;  ///< or a mean request length
  std::vector<std::pair<std::string, std::string>> kv_pairs;  ///< --kv INPUT=OUTPUT
  /// --kv-window: ("" = every pair, or a KV input / layer number, tokens); an ONNX export's
  /// windows are otherwise found in its graph (model::find_kv_windows).
  std::vector<std::pair<std::string, std::int64_t>> kv_windows;
  std::string onnx;  ///< checkpoint path: the ONNX export its activations are planned from
  std::string runtime = "eager";  ///< activation figure: eager (PyTorch peak) or static arena
  double engine_fraction = 0.9;   ///< the engines' default fraction compared with
  /// Plan a context past the model's positions (its config's, or an ONNX position table's
  /// rows) instead of refusing it, as plan's --ignore-model-limits.
  bool ignore_model_limits = false;
  std::string engine;  ///< --engine: one engine's settings (engine_table()); "" = every engine
};

/// Rejects bad options with InvalidInput before anything is read.
void validate(const ServeOptions& options);

struct EngineSettings {
  std::string engine;                           ///< "vllm", "sglang", "tensorrt_llm"
  std::map<std::string, std::string> settings;  ///< flag or key -> value
  std::string command;                          ///< the flags as one line
  long long default_kv_tokens = 0;  ///< what the engine's own formula gives at its default
  std::string difference;           ///< how much and why it differs from kv_tokens
  /// What the engine logs at start with these settings, by its own block arithmetic ("" where
  /// not restated), e.g. vLLM's "KV cache size: N tokens, Maximum concurrency ...: X.XXx".
  std::string logs;
  std::map<std::string, double> log_figures;  ///< the same as numbers (JSON), by name
};

struct ServePlan {
  std::string model;
  std::string source;             ///< "onnx" or "checkpoint"
  std::string activation_source;  ///< "planned from ONNX (eager)" / "estimate (formula)"
  std::size_t device_memory = 0;
  std::int64_t context = 0;
  std::int64_t block_size = 0;
  std::int64_t decode_batch = 0;
  std::int64_t prefill_tokens = 0;
  int tp = 1;
  std::size_t weights_bytes = 0;             ///< on one rank
  std::size_t decode_activation_bytes = 0;   ///< live bytes at the decode step's peak
  std::size_t prefill_activation_bytes = 0;  ///< live bytes at the prefill chunk's peak
  std::size_t activation_peak_bytes = 0;     ///< the larger of the two (live bytes)
  /// The activation term on the strategy: need.need - weights_bytes (what the pool reserves for
  /// the steps beyond the weights, its rounding and segments counted).
  std::size_t activation_bytes = 0;
  /// The need of the weights and the steps on options.strategy: the allocation sequence (the
  /// weights, then rounds of one prefill chunk and one decode step) replayed through the pool
  /// `modelmem run` builds, at the smallest whole MiB that serves it (need_of_sequence).
  PoolNeed need;
  std::size_t overhead_bytes = 0;
  std::string overhead_source;
  /// When the activations are the config formula's estimate: its error measured against planned
  /// and recorded steps (docs/serving.md), as printed. Empty otherwise.
  std::string formula_note;
  model::KvCache kv;
  std::string kv_window_source;        ///< an export's windows: "graph" or "--kv-window"
  std::size_t kv_bytes_per_token = 0;  ///< all layers, one rank
  std::size_t kv_block_bytes = 0;      ///< block_size tokens
  std::size_t kv_cache_bytes = 0;      ///< the pool: whole blocks
  std::size_t kv_blocks = 0;
  std::size_t kv_tokens = 0;             ///< kv_blocks x block_size
  std::size_t sequence_bytes = 0;        ///< one sequence at the context, in blocks
  double max_concurrency = 0;            ///< sequences at the context (vLLM's "X.XXx")
  std::size_t max_sequences = 0;         ///< whole sequences at the context
  std::int64_t max_context = 0;          ///< the longest one sequence can be alone
  bool max_context_capped = false;       ///< max_context stopped at the model's positions
  std::int64_t model_max_positions = 0;  ///< 0: the model states none
  std::string model_positions_source;    ///< where model_max_positions comes from
  // Capacity over a distribution of request lengths (lengths file or mean).
  std::optional<double> mean_request_tokens;
  std::size_t requests = 0;                ///< lengths read (0 with mean_context)
  std::optional<double> mean_concurrency;  ///< sequences of the mean length in blocks at once
  std::size_t lengths_over_context = 0;    ///< requests longer than the context
  std::vector<EngineSettings> engines;
  bool fits() const { return kv_blocks > 0; }
};

/// One step of a served decoder (a decode step of B sequences or a prefill chunk of T tokens):
/// the peak of its live activation bytes and its allocation sequence, one inference without the
/// weights (allocation_sequence(): the inputs made first, then the step's buffers framed by step
/// marks; what is still live at step_end is freed there when the step is replayed).
struct ServedStep {
  std::size_t peak = 0;
  trace::Trace inference;
};

/// A served decoder modelled once, whatever the device: what `plan --serve` (plan_serving),
/// the serving need (serving_need.hpp) and placement (`place` with serve:) all take, so that
/// the three replay the same blocks.
struct ServedModel {
  std::string model;
  std::string source;             ///< "onnx" or "checkpoint"
  std::string activation_source;  ///< as ServePlan::activation_source
  std::string formula_note;       ///< the formula's measured error; "" when planned
  std::string kv_window_source;   ///< an export's windows: "graph" or "--kv-window"
  bool planned = false;           ///< steps planned from an ONNX graph (false: the formula)
  std::int64_t context = 0, decode_batch = 0, prefill_tokens = 0, model_max_positions = 0;
  std::string model_positions_source;  ///< where model_max_positions comes from
  int tp = 1;
  std::size_t weights_bytes = 0;  ///< on one rank
  /// The weights as the engine's pool gets them: one block per tensor, one rank's share; a
  /// checkpoint's routed experts merged into one block per layer and projection (FusedMoE).
  std::vector<std::size_t> weight_blocks;
  ServedStep decode, prefill;
  model::KvCache kv;
  /// The weights and rounds of one prefill chunk and one decode step on options.strategy
  /// (need_of_sequence), without the overhead: plan_serving adds the device's.
  PoolNeed need;
};

/// Models serving `model` (an ONNX file or a checkpoint folder) with `options` (its device size
/// and overhead are not used, but validated). Throws InvalidInput as plan_serving.
ServedModel serve_model(const std::string& model, const ServeOptions& options);

/// Plans serving `model` (an ONNX file or a checkpoint folder). Throws InvalidInput for bad
/// options or a bad model (named), and when the weights and a step's activations leave no room
/// for one KV block (with the numbers).
ServePlan plan_serving(const std::string& model, const ServeOptions& options);

/// The serving plan of a model already modelled (serve_model with the same options but the
/// device size and overhead) on options.device_memory with options.overhead.
ServePlan plan_serving(const ServedModel& served, const ServeOptions& options);

/// The allocation sequence of serving: `held` blocks (the weights, then whatever else the pool
/// holds: the KV cache) allocated in order and held, then `steps` replayed one after the other
/// (each step's blocks freed by its end). Requests below `min_request` bytes are left out (the
/// LD_PRELOAD library sends them to the C library).
trace::Trace serving_trace(const std::string& name, const std::vector<std::size_t>& held,
                           const std::vector<const ServedStep*>& steps,
                           std::size_t min_request = 0);

/// The report `modelmem plan --serve` prints, and its --json (the same fields for Python).
std::string render_text(const ServePlan& plan);
std::string render_json_text(const ServePlan& plan);

}  // namespace modelmem::sizing
