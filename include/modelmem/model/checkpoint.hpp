// A Hugging Face checkpoint folder read without loading its weights: `config.json` for the
// architecture and, of each `*.safetensors` file, only the JSON header (an 8-byte little-endian
// length, then the header), which gives every tensor's dtype, shape and byte range. So the weight
// bytes are exact, and the KV cache per token follows from the config for the common families:
// Llama / Mistral / Qwen2 (GQA num_key_value_heads, sliding windows, layer_types), DeepSeek MLA
// (kv_lora_rank + qk_rope_head_dim), GPT-2 and GPT-NeoX. Value types; reading is O(header bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "modelmem/model/kv_cache.hpp"

namespace modelmem::model {

struct SafetensorsEntry {
  std::string file;  ///< the .safetensors file (its name in the folder)
  std::string name;
  std::string dtype;  ///< as written: "F16", "BF16", "F32", "F8_E4M3", "I8", ...
  std::vector<std::int64_t> shape;
  std::size_t bytes = 0;  ///< data_offsets end - begin, checked against dtype x shape
};

/// Reads one file's header. Throws InvalidInput naming the file for: a file shorter than its
/// header says, a header that is not JSON, an unknown dtype, offsets that disagree with the
/// shape or overlap or run past the end of the file.
std::vector<SafetensorsEntry> read_safetensors_header(const std::string& path);

/// The architecture as config.json gives it (a "text_config" inside is used when present).
struct ModelConfig {
  std::string model_type;   ///< "llama", "mistral", "qwen2", "deepseek_v3", "gpt2", ...
  std::string torch_dtype;  ///< "float16", "bfloat16", "float32" ("" when not given)
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;  ///< num_key_value_heads (== heads without GQA)
  std::int64_t head_dim = 0;  ///< head_dim, or hidden / heads
  std::int64_t intermediate = 0;
  std::int64_t vocab = 0;
  /// The positions the model takes: max_position_embeddings / n_positions (0: not given), times
  /// the factor of a linear, dynamic or YaRN rope_scaling (YaRN: of its
  /// original_max_position_embeddings), as vLLM derives its longest --max-model-len.
  std::int64_t max_positions = 0;
  std::string max_positions_source;      ///< how max_positions was read ("max_position_embeddings")
  std::int64_t sliding_window = 0;       ///< 0: none
  std::vector<std::string> layer_types;  ///< per layer: "full_attention" / "sliding_attention"
  std::int64_t kv_lora_rank = 0;         ///< MLA
  std::int64_t qk_rope_head_dim = 0;     ///< MLA
};

/// Parses a config.json; throws InvalidInput naming the file and the missing or bad key.
ModelConfig read_model_config(const std::string& path);

/// The KV cache of one sequence of the model, at `element_size` bytes per element, on one of
/// `tp` tensor-parallel ranks: KV heads are split over the ranks (a head is not split: with
/// fewer KV heads than ranks each rank holds one); an MLA latent is held whole on every rank.
KvCache kv_cache_of(const ModelConfig& config, std::size_t element_size, int tp = 1);

struct Checkpoint {
  std::string folder;
  ModelConfig config;
  std::vector<SafetensorsEntry> tensors;
  std::size_t weights_bytes = 0;  ///< all tensors, as stored
  std::size_t weights_params = 0;
  std::size_t file_count = 0;
  /// One rank's share under tensor parallelism of `tp`: every tensor of two or more dims is split
  /// (rounded up: vocab-, column- and row-parallel layers), one-dim tensors (norms, biases) are
  /// held whole by every rank. `float_bytes` > 0 counts the floating-point tensors (F32, F16,
  /// BF16) at that element size (a checkpoint served at another --dtype).
  std::size_t weights_per_rank(int tp, std::size_t float_bytes = 0) const;
  /// Each tensor's bytes on one rank, as weights_per_rank() counts them (in `tensors` order).
  std::vector<std::size_t> tensor_bytes_per_rank(int tp, std::size_t float_bytes = 0) const;
};

/// Reads config.json and every *.safetensors header in `folder`. Throws InvalidInput when the
/// folder has no config.json or no .safetensors file, or for a bad file (named).
Checkpoint read_checkpoint(const std::string& folder);

/// True when `path` is a folder holding a config.json.
bool is_checkpoint_folder(const std::string& path);

/// Bytes per element of a KV or weight dtype name: fp32/float32 4, fp16/bf16/float16/bfloat16
/// 2, fp8/int8/fp8_e4m3/fp8_e5m2 1. Throws InvalidInput naming `what`.
std::size_t dtype_size(const std::string& name, const std::string& what);

}  // namespace modelmem::model
