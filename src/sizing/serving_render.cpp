// The text and JSON of `modelmem plan --serve` (modelmem/sizing/serving.hpp).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "modelmem/core/error.hpp"
#include "modelmem/model/render.hpp"
#include "modelmem/sizing/serving.hpp"

namespace modelmem::sizing {
namespace {

std::string count_text(std::size_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string kv_layers_text(const model::KvCache& kv) {
  std::string s;
  for (const auto& [kind, e] : kv.by_kind()) {
    if (!s.empty()) s += ", ";
    s += fmt::format("{} {} layer{}", e.first, model::kv_kind_name(kind), e.first == 1 ? "" : "s");
    if (kind == model::KvKind::kSliding) {
      for (const auto& l : kv.layers)
        if (l.kind == kind) {
          s += fmt::format(" (window {})", l.window);
          break;
        }
    }
    if (kind == model::KvKind::kRecurrent)
      s += fmt::format(" ({} per sequence)", format_bytes(e.second));
  }
  return s;
}

}  // namespace

std::string render_text(const ServePlan& p) {
  std::string s;
  auto line = [&](const std::string& k, const std::string& v) {
    s += fmt::format("{:<15}{}\n", k, v);
  };
  line("model",
       fmt::format("{} ({})", p.model,
                   p.source == "onnx" ? "ONNX decoder, KV cache from its past/present pairs"
                                      : "checkpoint: config.json + safetensors headers"));
  line("device",
       fmt::format("{}{}", model::bytes_text(p.device_memory),
                   p.tp > 1 ? fmt::format(", one of {} tensor-parallel ranks", p.tp) : ""));
  line("weights", model::bytes_text(p.weights_bytes));
  line("decode step",
       fmt::format("{}: {} sequences at context {}", model::bytes_text(p.decode_activation_bytes),
                   p.decode_batch, p.context));
  line("prefill chunk",
       fmt::format("{}: {} tokens after {} cached", model::bytes_text(p.prefill_activation_bytes),
                   p.prefill_tokens, p.context - p.prefill_tokens));
  line("activations",
       fmt::format("{}, {}", model::bytes_text(p.activation_bytes), p.activation_source));
  line("overhead", model::bytes_text(p.overhead_bytes));
  line("KV per token", fmt::format("{} B: {}, {} B per element", count_text(p.kv_bytes_per_token),
                                   kv_layers_text(p.kv), p.kv.element_size));
  line("KV cache",
       fmt::format("{} in {} blocks of {} tokens ({} each)", model::bytes_text(p.kv_cache_bytes),
                   count_text(p.kv_blocks), p.block_size, format_bytes(p.kv_block_bytes)));
  line("KV tokens", count_text(p.kv_tokens));
  line("concurrency",
       fmt::format("{:.2f}x at context {} ({} whole sequences of {} each)", p.max_concurrency,
                   p.context, p.max_sequences, format_bytes(p.sequence_bytes)));
  line("max context",
       fmt::format("{} tokens for one sequence{}",
                   count_text(static_cast<std::size_t>(p.max_context)),
                   p.max_context_capped ? " (the model's max positions: more would fit)" : ""));
  if (p.mean_concurrency) {
    std::string from = p.requests ? fmt::format("{} requests, mean {:.1f} tokens", p.requests,
                                                *p.mean_request_tokens)
                                  : fmt::format("mean {:.1f} tokens", *p.mean_request_tokens);
    if (p.lengths_over_context)
      from += fmt::format(", {} longer than the context", p.lengths_over_context);
    line("capacity",
         fmt::format("{:.2f} sequences at once over the lengths ({})", *p.mean_concurrency, from));
  }
  s += "engine settings (they allocate exactly this KV cache):\n";
  for (const auto& e : p.engines) {
    s += fmt::format("  {:<13}{}\n", e.engine, e.command);
    s += fmt::format("  {:<13}own formula: {} tokens, {}\n", "",
                     count_text(static_cast<std::size_t>(std::max(0LL, e.default_kv_tokens))),
                     e.difference);
  }
  return s;
}

std::string render_json_text(const ServePlan& p) {
  nlohmann::ordered_json j;
  j["model"] = p.model;
  j["source"] = p.source;
  j["device_memory_bytes"] = p.device_memory;
  j["tp"] = p.tp;
  j["context"] = p.context;
  j["block_size"] = p.block_size;
  j["weights_bytes"] = p.weights_bytes;
  j["activation_bytes"] = p.activation_bytes;
  j["decode_activation_bytes"] = p.decode_activation_bytes;
  j["decode_batch"] = p.decode_batch;
  j["prefill_activation_bytes"] = p.prefill_activation_bytes;
  j["prefill_tokens"] = p.prefill_tokens;
  j["activation_source"] = p.activation_source;
  j["overhead_bytes"] = p.overhead_bytes;
  j["kv_bytes_per_token"] = p.kv_bytes_per_token;
  j["kv_element_bytes"] = p.kv.element_size;
  nlohmann::ordered_json kinds = nlohmann::ordered_json::object();
  for (const auto& [kind, e] : p.kv.by_kind())
    kinds[model::kv_kind_name(kind)] = {{"layers", e.first}, {"bytes_per_token", e.second}};
  j["kv_layers"] = kinds;
  j["kv_block_bytes"] = p.kv_block_bytes;
  j["kv_cache_bytes"] = p.kv_cache_bytes;
  j["kv_blocks"] = p.kv_blocks;
  j["kv_tokens"] = p.kv_tokens;
  j["sequence_bytes"] = p.sequence_bytes;
  j["max_concurrency"] = p.max_concurrency;
  j["max_sequences"] = p.max_sequences;
  j["max_context"] = p.max_context;
  j["max_context_capped"] = p.max_context_capped;
  if (p.mean_concurrency) {
    j["mean_request_tokens"] = *p.mean_request_tokens;
    j["mean_concurrency"] = *p.mean_concurrency;
    j["requests"] = p.requests;
  }
  nlohmann::ordered_json engines = nlohmann::ordered_json::object();
  nlohmann::ordered_json formulas = nlohmann::ordered_json::object();
  for (const auto& e : p.engines) {
    nlohmann::ordered_json settings = nlohmann::ordered_json::object();
    for (const auto& [k, v] : e.settings) settings[k] = v;
    engines[e.engine] = settings;
    formulas[e.engine] = {{"command", e.command},
                          {"default_kv_tokens", e.default_kv_tokens},
                          {"difference", e.difference}};
  }
  j["engines"] = engines;
  j["engine_formulas"] = formulas;
  return j.dump(1) + "\n";
}

}  // namespace modelmem::sizing
