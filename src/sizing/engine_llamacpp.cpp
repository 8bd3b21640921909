// llama.cpp's KV cache arithmetic and its row of the engine table (engine_llamacpp.hpp).
#include "sizing/engine_llamacpp.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "modelmem/core/checked.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/model/render.hpp"
#include "modelmem/sizing/serving.hpp"

namespace modelmem::sizing {
namespace {

std::int64_t pad256(std::int64_t n) {
  return (n + 255) / 256 * 256;
}

// The -ctk/-ctv type of a --kv-dtype: llama.cpp keeps f16 by default; it has no fp8 cache, and
// its 8-bit one is q8_0 (34 bytes a block of 32).
const model::GgmlType& cache_type(const std::string& kv_dtype) {
  const char* name = "F16";
  if (kv_dtype == "bf16" || kv_dtype == "bfloat16")
    name = "BF16";
  else if (kv_dtype == "fp32" || kv_dtype == "float32" || kv_dtype == "float")
    name = "F32";
  else if (kv_dtype == "int8" || kv_dtype.rfind("fp8", 0) == 0)
    name = "Q8_0";
  return *model::ggml_type_named(name);
}

}  // namespace

std::string ggml_print_name(const model::GgmlType& type) {
  std::string s = type.name;
  const bool k_quant = s.size() > 2 && s.compare(s.size() - 2, 2, "_K") == 0;
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (k_quant) s.back() = 'K';
  return s;
}

std::optional<LlamaCppKv> llamacpp_kv(const model::KvCache& kv, const LlamaCppShape& shape,
                                      std::string& why) {
  if (!shape.type_k || !shape.type_v || shape.n_seq <= 0 || shape.n_ctx <= 0 ||
      shape.n_ubatch <= 0) {
    why = "-c, -np, -ub and the cache types must be given";
    return std::nullopt;
  }
  LlamaCppKv out;
  out.n_ctx = pad256(shape.n_ctx);
  if (shape.unified) {
    out.n_ctx_seq = out.n_ctx;
  } else {
    out.n_ctx_seq = pad256(out.n_ctx / shape.n_seq);
    if (out.n_ctx_seq == 0) {
      why = "n_ctx_seq == 0";
      return std::nullopt;
    }
    out.n_ctx = out.n_ctx_seq * shape.n_seq;
  }
  out.streams = shape.unified ? 1 : shape.n_seq;
  out.cells = out.n_ctx_seq;
  const std::size_t streams = static_cast<std::size_t>(out.streams);
  for (const auto& l : kv.layers) {
    if (l.kind == model::KvKind::kLatent || l.kind == model::KvKind::kRecurrent) {
      why = fmt::format("{} holds a {} cache, which llama.cpp sizes its own way (not restated)",
                        l.name, model::kv_kind_name(l.kind));
      return std::nullopt;
    }
    const std::size_t elements = l.bytes_per_token / kv.element_size;  // K and V of one token
    if (elements % 2 != 0) {
      why = fmt::format("{}: K and V of unequal widths", l.name);
      return std::nullopt;
    }
    const std::string what = fmt::format("{} (-ctk/-ctv)", l.name);
    std::size_t k = 0, v = 0;
    try {
      k = model::ggml_row_bytes(*shape.type_k, elements / 2, what);
      v = model::ggml_row_bytes(*shape.type_v, elements / 2, what);
    } catch (const InvalidInput& e) {
      why = e.what();
      return std::nullopt;
    }
    const bool sliding = l.kind == model::KvKind::kSliding && !shape.swa_full;
    std::int64_t cells = out.cells;
    if (sliding) {
      const std::int64_t seqs = shape.unified ? shape.n_seq : 1;
      out.swa_cells = pad256(std::min(out.cells, l.window * seqs + shape.n_ubatch));
      cells = out.swa_cells;
    }
    const std::size_t rows = checked_mul(static_cast<std::size_t>(cells), streams, "KV cells");
    (sliding ? out.swa_k_bytes : out.k_bytes) += checked_mul(k, rows, "KV bytes");
    (sliding ? out.swa_v_bytes : out.v_bytes) += checked_mul(v, rows, "KV bytes");
    ++(sliding ? out.swa_layers : out.layers);
  }
  why.clear();
  return out;
}

std::string llamacpp_log_line(std::size_t k_bytes, std::size_t v_bytes, std::int64_t cells,
                              std::size_t layers, std::int64_t n_seq, std::int64_t streams,
                              const model::GgmlType& type_k, const model::GgmlType& type_v) {
  // As llama.cpp prints it: float MiB (the sum in float), then printf's %7.2f.
  const float mib = 1024.0f * 1024.0f;
  return fmt::format(
      "llama_kv_cache: size = {:7.2f} MiB ({:6} cells, {:3} layers, {:2}/{} seqs), K ({}): "
      "{:7.2f} MiB, V ({}): {:7.2f} MiB",
      static_cast<double>(static_cast<float>(k_bytes + v_bytes) / mib), cells, layers, n_seq,
      streams, ggml_print_name(type_k), static_cast<double>(static_cast<float>(k_bytes) / mib),
      ggml_print_name(type_v), static_cast<double>(static_cast<float>(v_bytes) / mib));
}

void llamacpp_settings(EngineSettings& e, ServePlan& p, const ServeOptions& o) {
  LlamaCppShape shape;
  shape.type_k = shape.type_v = &cache_type(o.kv_dtype);
  const std::int64_t batch = std::max<std::int64_t>(1, p.prefill_tokens);
  shape.n_ubatch = std::min<std::int64_t>(512, batch);
  std::string why;
  // One sequence at the context: llama.cpp gives each sequence a stream of whole 256 cells.
  std::int64_t seq_cells = pad256(std::max<std::int64_t>(1, p.context));
  shape.n_ctx = seq_cells;
  std::optional<LlamaCppKv> one = llamacpp_kv(p.kv, shape, why);
  std::int64_t n_seq = 0;
  if (one && one->bytes() > 0)
    n_seq = std::min<std::int64_t>(p.decode_batch,
                                   static_cast<std::int64_t>(p.kv_cache_bytes / one->bytes()));
  std::string shortfall;
  if (one && n_seq == 0) {
    // Not one sequence of the context: the longest whole-256 context one sequence can have.
    while (seq_cells > 256 && one && one->bytes() > p.kv_cache_bytes) {
      seq_cells -= 256;
      shape.n_ctx = seq_cells;
      one = llamacpp_kv(p.kv, shape, why);
    }
    n_seq = 1;
    shortfall = one && one->bytes() <= p.kv_cache_bytes
                    ? fmt::format(
                          "; one sequence of {} tokens does not fit: -c {} is the most "
                          "that does",
                          p.context, seq_cells)
                    : "; not even 256 cells of one sequence fit the KV budget";
  }
  n_seq = std::max<std::int64_t>(1, n_seq);
  shape.n_ctx = seq_cells * n_seq;
  shape.n_seq = n_seq;
  e.settings["-c"] = std::to_string(shape.n_ctx);
  e.settings["-np"] = std::to_string(n_seq);
  e.settings["-ctk"] = ggml_print_name(*shape.type_k);
  e.settings["-ctv"] = ggml_print_name(*shape.type_v);
  e.settings["-fa"] = "on";  // a quantised V cache needs flash attention
  e.settings["-b"] = std::to_string(batch);
  e.settings["-ub"] = std::to_string(shape.n_ubatch);
  const std::int64_t train = p.model_max_positions > 0 ? p.model_max_positions : 4096;
  e.default_kv_tokens = pad256(train);
  const long long tokens = static_cast<long long>(shape.n_ctx);
  e.difference = fmt::format(
      "{:+} tokens against the plan's {} at llama.cpp's defaults (-c 0: the model's {} "
      "positions, one sequence); with these settings it holds {} tokens, {} sequences of {} "
      "cells (-c / -np each, whole 256s; -kvu would share them){}",
      e.default_kv_tokens - static_cast<long long>(p.kv_tokens), p.kv_tokens, train, tokens, n_seq,
      seq_cells, shortfall);
  if (o.kv_dtype.rfind("fp8", 0) == 0)
    e.difference += "; llama.cpp has no fp8 cache: q8_0 is its 8-bit type (8.5 bits)";
  if (p.tp > 1) e.difference += "; llama.cpp splits layers or rows (-sm), not heads as --tp does";
  const std::optional<LlamaCppKv> kv = llamacpp_kv(p.kv, shape, why);
  if (!kv) {
    e.logs = "not restated: " + why;
    return;
  }
  e.logs = llamacpp_log_line(kv->k_bytes, kv->v_bytes, kv->cells, kv->layers, n_seq, kv->streams,
                             *shape.type_k, *shape.type_v);
  if (kv->swa_layers)
    e.logs +=
        "; " + llamacpp_log_line(kv->swa_k_bytes, kv->swa_v_bytes, kv->swa_cells, kv->swa_layers,
                                 n_seq, kv->streams, *shape.type_k, *shape.type_v);
  e.logs += fmt::format(
      "; {} of the plan's KV budget of {}; compute buffer per micro-batch of {} tokens: "
      "llama.cpp's graph allocator sizes it (measured in tests/engines, not restated); "
      "modelmem's activation figure for a chunk of {} tokens is {}",
      model::bytes_text(kv->bytes()), model::bytes_text(p.kv_cache_bytes), shape.n_ubatch,
      p.prefill_tokens, model::bytes_text(p.prefill_activation_bytes));
  e.log_figures = {{"n_ctx", static_cast<double>(kv->n_ctx)},
                   {"n_ctx_seq", static_cast<double>(kv->n_ctx_seq)},
                   {"n_seq", static_cast<double>(n_seq)},
                   {"kv_bytes", static_cast<double>(kv->bytes())},
                   {"k_bytes", static_cast<double>(kv->k_bytes)},
                   {"v_bytes", static_cast<double>(kv->v_bytes)},
                   {"swa_k_bytes", static_cast<double>(kv->swa_k_bytes)},
                   {"swa_v_bytes", static_cast<double>(kv->swa_v_bytes)},
                   {"cells", static_cast<double>(kv->cells)},
                   {"swa_cells", static_cast<double>(kv->swa_cells)}};
}

}  // namespace modelmem::sizing
