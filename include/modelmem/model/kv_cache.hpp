// The KV cache of a decoder LLM, per layer and per kind, and how it is found in an ONNX export.
// A serving engine keeps the KV cache in a block pool of its own, apart from the step's
// activations, so modelmem separates it: bytes per token (full attention, sliding window up to
// its window, MLA latent) and bytes per sequence (recurrent state). In an ONNX decoder the cache
// is the pairs of graph inputs and outputs a step reads and writes: `past_key_values.N.key` ->
// `present.N.key`, `past_N` -> `present_N` (or pairs named with --kv INPUT=OUTPUT). Value types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "modelmem/model/graph.hpp"

namespace modelmem::model {

enum class KvKind {
  kFull,       ///< full attention: every token of the sequence
  kSliding,    ///< sliding-window attention: at most `window` tokens
  kLatent,     ///< MLA: a compressed latent (kv_lora_rank + rope dims) per token
  kRecurrent,  ///< a state of constant size per sequence (SSM, linear attention)
};
std::string kv_kind_name(KvKind kind);  ///< "full", "sliding", "latent", "recurrent"

struct KvLayer {
  std::string name;  ///< "layer 3", or the ONNX input holding it
  KvKind kind = KvKind::kFull;
  std::size_t bytes_per_token = 0;     ///< per sequence and token (0 for recurrent)
  std::size_t bytes_per_sequence = 0;  ///< recurrent state (0 otherwise)
  std::int64_t window = 0;             ///< sliding: the tokens kept
};

/// One sequence's KV cache over all layers.
struct KvCache {
  std::vector<KvLayer> layers;
  std::size_t element_size = 2;  ///< bytes per KV element (fp16/bf16 2, fp8/int8 1, fp32 4)

  /// What one token of a sequence costs over all layers while it is inside every window.
  std::size_t bytes_per_token() const;
  std::size_t bytes_per_token(KvKind kind) const;  ///< the same over the layers of one kind
  std::size_t bytes_per_sequence() const;          ///< the recurrent states
  /// The bytes one sequence of `tokens` holds in blocks of `block_size` tokens: whole blocks per
  /// layer group; a sliding layer holds the blocks its window straddles (at most window/block +
  /// 1); recurrent state once.
  std::size_t sequence_bytes(std::int64_t tokens, std::int64_t block_size) const;
  /// Per kind, the number of layers and their bytes per token: for the report.
  std::map<KvKind, std::pair<std::size_t, std::size_t>> by_kind() const;
};

/// Parses "INPUT=OUTPUT" for --kv; throws InvalidInput.
std::pair<std::string, std::string> parse_kv_pair(const std::string& text);

/// The symbolic dims of a decoder export and its KV pairs, read from the ONNX file's declared
/// inputs and outputs (nothing is bound or inferred).
struct DecoderSignature {
  struct Pair {
    std::string input, output;
    int length_axis = -1;  ///< the input's axis that grows into the output; -1: recurrent
    int batch_axis = -1;
    /// Sliding window: the tokens the layer keeps (0: all). Found by find_kv_windows() or given
    /// by apply_kv_windows() (--kv-window).
    std::int64_t window = 0;
    std::string window_source;  ///< "graph" or "--kv-window"
  };
  std::vector<Pair> pairs;
  std::string batch_dim;  ///< the symbolic dim of the batch (shared by the pairs and the ids)
  std::string seq_dim;    ///< the new tokens of the step
  std::string past_dim;   ///< the cached tokens (the pairs' length axis); "" when all recurrent
  std::vector<std::string> total_dims;  ///< other dims, bound to past + seq (attention masks)
};

/// Reads the signature. `explicit_pairs` (from --kv) replace the detection by name. Throws
/// InvalidInput naming the file when no pair is found, a named tensor is missing, or the dims
/// cannot be told apart (a decoder whose past and new-token dims are not symbolic).
DecoderSignature read_decoder_signature(
    const std::string& path,
    const std::vector<std::pair<std::string, std::string>>& explicit_pairs);

/// Finds the sliding windows of an export from its graph: loaded with one sequence of one new
/// token after `probe_past` cached ones, a pair whose output's length dim is shorter than
/// probe_past + 1 keeps at most that many tokens (a Slice of the last W tokens, a ring buffer).
/// The probes are tried in order; one the graph cannot be loaded at (a fixed-size mask table) is
/// skipped. Pairs given a window already keep it.
void find_kv_windows(const std::string& path, DecoderSignature& sig,
                     const std::vector<std::int64_t>& probe_pasts);

/// Parses `--kv-window` text: "N" (every KV pair) or "NAME=N", NAME a KV input or a layer number
/// ("past_key_values.3.key", "3"). Throws InvalidInput naming the flag.
std::pair<std::string, std::int64_t> parse_kv_window(const std::string& text);

/// Gives the pairs the windows of --kv-window. Throws InvalidInput for a name that matches no
/// pair, or a window on a recurrent state.
void apply_kv_windows(DecoderSignature& sig,
                      const std::vector<std::pair<std::string, std::int64_t>>& windows);

/// The dims of one step: `batch` sequences, `seq` new tokens each, `past` cached tokens.
std::map<std::string, std::int64_t> step_dims(const DecoderSignature& sig, std::int64_t batch,
                                              std::int64_t seq, std::int64_t past);

/// Takes the pairs' tensors of a loaded graph out of the activation arena: a serving engine holds
/// them in its KV block pool. They become TensorKind::kConstant (neither the weights region nor
/// the arena), so build_lifetimes() gives them no buffer and views of them no memory. Throws
/// InvalidInput for a name not in the graph.
void mark_kv_cache(Graph& graph, const DecoderSignature& sig);

/// The KV cache per token and sequence of an export, from the pairs' tensors in a graph loaded
/// with batch 1 and past 1. `element_size` 0 keeps the stored element size.
KvCache kv_cache_of(const Graph& graph_b1_p1, const DecoderSignature& sig,
                    std::size_t element_size);

}  // namespace modelmem::model
