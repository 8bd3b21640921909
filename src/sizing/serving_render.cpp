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

std::string kv_layers_text(const model::KvCache& kv, const std::string& source) {
  std::string s;
  for (const auto& [kind, e] : kv.by_kind()) {
    if (!s.empty()) s += ", ";
    s += fmt::format("{} {} layer{}", e.first, model::kv_kind_name(kind), e.first == 1 ? "" : "s");
    if (kind == model::KvKind::kSliding) {
      for (const auto& l : kv.layers)
        if (l.kind == kind) {
          s += fmt::format(" (window {}{})", l.window,
                           source.empty() ? ""
                           : source == "graph"
                               ? ", found in the graph: the present output keeps at most it"
                               : ", from " + source);
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
                   : p.model.size() > 5 && p.model.rfind(".gguf") == p.model.size() - 5
                       ? "GGUF: metadata and tensor infos, ggml types as stored"
                       : "checkpoint: config.json + safetensors headers"));
  line("device",
       fmt::format("{}{}", model::bytes_text(p.device_memory),
                   p.tp > 1 ? fmt::format(", one of {} tensor-parallel ranks", p.tp) : ""));
  line("weights", model::bytes_text(p.weights_bytes));
  line("decode step",
       fmt::format("{} at its peak: {} sequences at context {}",
                   model::bytes_text(p.decode_activation_bytes), p.decode_batch, p.context));
  line("prefill chunk", fmt::format("{} at its peak: {} tokens after {} cached",
                                    model::bytes_text(p.prefill_activation_bytes), p.prefill_tokens,
                                    p.context - p.prefill_tokens));
  line("activations", fmt::format("{} at the peak, {}", model::bytes_text(p.activation_peak_bytes),
                                  p.activation_source));
  if (!p.formula_note.empty()) line("", p.formula_note);
  const PoolNeed& n = p.need;
  line("need",
       fmt::format("{} on {}: the weights and {} rounds of a prefill chunk and a decode step ({} "
                   "requests) run through the pool `modelmem run` builds; {} MiB does not serve "
                   "them",
                   model::bytes_text(n.need), n.strategy, n.inferences, count_text(n.requests),
                   n.replay_mib - 1));
  if (n.order_slack > 0)
    line("", fmt::format("= {} MiB replayed + {} for PyTorch's own order (two segments, or half "
                         "the largest request up to 64 MiB)",
                         n.replay_mib, format_bytes(n.order_slack)));
  line("", fmt::format("activations on {}: {} (the need beyond the weights; {} live at the peak)",
                       n.strategy, format_bytes(p.activation_bytes),
                       format_bytes(p.activation_peak_bytes)));
  line("overhead", fmt::format("{}: {}", model::bytes_text(p.overhead_bytes), p.overhead_source));
  line("KV per token", fmt::format("{} B: {}, {} B per element", count_text(p.kv_bytes_per_token),
                                   kv_layers_text(p.kv, p.kv_window_source), p.kv.element_size));
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
    if (!e.logs.empty()) s += fmt::format("  {:<13}logs: {}\n", "", e.logs);
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
  j["activation_peak_bytes"] = p.activation_peak_bytes;
  j["decode_activation_bytes"] = p.decode_activation_bytes;
  j["decode_batch"] = p.decode_batch;
  j["max_num_seqs"] = p.decode_batch;  // the same, by the word the CLI and the engines use
  j["prefill_activation_bytes"] = p.prefill_activation_bytes;
  j["prefill_tokens"] = p.prefill_tokens;
  j["max_batched_tokens"] = p.prefill_tokens;  // the same, as --max-batched-tokens
  j["activation_source"] = p.activation_source;
  if (!p.formula_note.empty()) j["activation_formula"] = p.formula_note;
  j["strategy"] = p.need.strategy;
  j["need_bytes"] = p.need.need;
  j["need_replay_bytes"] = p.need.replay_mib * (std::size_t{1} << 20);
  j["order_slack_bytes"] = p.need.order_slack;
  j["peak_reserved_bytes"] = p.need.peak_reserved;
  j["overhead_bytes"] = p.overhead_bytes;
  j["overhead_source"] = p.overhead_source;
  j["kv_bytes_per_token"] = p.kv_bytes_per_token;
  j["kv_element_bytes"] = p.kv.element_size;
  nlohmann::ordered_json kinds = nlohmann::ordered_json::object();
  for (const auto& [kind, e] : p.kv.by_kind()) {
    kinds[model::kv_kind_name(kind)] = {{"layers", e.first}, {"bytes_per_token", e.second}};
    for (const auto& l : p.kv.layers)
      if (l.kind == kind && kind == model::KvKind::kSliding) {
        kinds[model::kv_kind_name(kind)]["window"] = l.window;
        break;
      }
  }
  j["kv_layers"] = kinds;
  if (!p.kv_window_source.empty()) j["kv_window_source"] = p.kv_window_source;
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
    if (!e.logs.empty()) {
      formulas[e.engine]["logs"] = e.logs;
      for (const auto& [k, v] : e.log_figures) formulas[e.engine]["log_figures"][k] = v;
    }
  }
  j["engines"] = engines;
  j["engine_formulas"] = formulas;
  return j.dump(1) + "\n";
}

}  // namespace modelmem::sizing
