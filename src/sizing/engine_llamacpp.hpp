// llama.cpp's own KV cache arithmetic (llama-context.cpp, llama-kv-cache.cpp, as vendored by
// llama-cpp-python 0.3.36), restated for the serving plan's llama.cpp row (engines.cpp): the
// context rounded up to 256 cells, split into one stream of n_ctx / n_seq cells per sequence
// (padded to 256 again) unless the cache is unified, each layer's K and V rows of its -ctk/-ctv
// type (ggml_row_size: quantised types in whole blocks), a sliding-window layer's cache of
// min(cells, window + n_ubatch) rounded up to 256. tests/engines/test_llamacpp.py compares
// these with llama.cpp's log line "llama_kv_cache: size = ...".
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "modelmem/model/gguf.hpp"
#include "modelmem/model/kv_cache.hpp"

namespace modelmem::sizing {

struct LlamaCppShape {
  std::int64_t n_ctx = 0;       ///< -c: all sequences' cells together
  std::int64_t n_seq = 1;       ///< -np
  std::int64_t n_ubatch = 512;  ///< -ub
  bool unified = false;         ///< -kvu: one stream all sequences share
  bool swa_full = false;        ///< --swa-full: sliding layers get every cell (llama-server: off)
  const model::GgmlType* type_k = nullptr;  ///< -ctk (f16 by default)
  const model::GgmlType* type_v = nullptr;  ///< -ctv
};

struct LlamaCppKv {
  std::int64_t n_ctx = 0;      ///< after llama.cpp's rounding (its "n_ctx = " line)
  std::int64_t n_ctx_seq = 0;  ///< cells of one sequence (its "n_ctx_seq = " line)
  std::int64_t cells = 0;      ///< cells of a full-attention stream
  std::int64_t swa_cells = 0;  ///< cells of a sliding-window stream (0: no sliding layers)
  std::int64_t streams = 1;
  std::size_t layers = 0, swa_layers = 0;
  std::size_t k_bytes = 0, v_bytes = 0;          ///< the full-attention layers' cache
  std::size_t swa_k_bytes = 0, swa_v_bytes = 0;  ///< the sliding layers' cache
  std::size_t bytes() const { return k_bytes + v_bytes + swa_k_bytes + swa_v_bytes; }
};

/// llama.cpp's KV cache of `kv` (one sequence's layers as the serving plan has them) for
/// `shape`. nullopt where llama.cpp sizes the layers otherwise (MLA latents, recurrent state) or
/// a row is not whole blocks of the type: `why` says so.
std::optional<LlamaCppKv> llamacpp_kv(const model::KvCache& kv, const LlamaCppShape& shape,
                                      std::string& why);

/// llama.cpp's log line for one of its caches: "llama_kv_cache: size = %7.2f MiB (%6u cells,
/// %3d layers, %2u/%u seqs), K (f16): %7.2f MiB, V (f16): %7.2f MiB".
std::string llamacpp_log_line(std::size_t k_bytes, std::size_t v_bytes, std::int64_t cells,
                              std::size_t layers, std::int64_t n_seq, std::int64_t streams,
                              const model::GgmlType& type_k, const model::GgmlType& type_v);

/// ggml's name of a type as llama.cpp prints it: "f16", "q8_0", "q4_K".
std::string ggml_print_name(const model::GgmlType& type);

struct EngineSettings;
struct ServePlan;
struct ServeOptions;
/// The llama.cpp row: -c, -np, -ctk/-ctv, -fa, -b/-ub for the plan's KV budget, and its logs.
void llamacpp_settings(EngineSettings& e, ServePlan& p, const ServeOptions& o);

}  // namespace modelmem::sizing
