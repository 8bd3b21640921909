// What PyTorch eager allocates beyond a graph's tensors, for the eager lifetimes of
// model/lifetimes.cpp: a convolution's own buffers (LifetimeOptions::conv_workspace), the
// layouts of views and torchvision's window attention (LifetimeOptions::window_attention).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "modelmem/model/graph.hpp"
#include "modelmem/model/lifetimes.hpp"

namespace modelmem::model::detail {

/// An activation or graph input with bytes: what the arena holds.
inline bool in_arena(const Tensor& t) {
  return (t.kind == TensorKind::kActivation || t.kind == TensorKind::kInput) && t.bytes > 0;
}

// PyTorch 1.13's CPU convolution (float32, one intra-op thread), as recorded call by call with
// `modelmem run --trace` (docs/plan.md). It takes oneDNN (mkldnn_convolution) when
//   (strided or dilated or batch >= 16 or kernel not 1x1) and
//   (groups > 1 or both kernel dims > 3 or batch > 1 or the input has more than 20480 elements),
// else its own kernel (slow_conv2d). oneDNN reorders into a channel-blocked layout whose
// channel count is rounded up to kOneDnnBlock: it copies the input (unless fewer than 16
// channels and one group: it reads those plain), copies the weights, computes into a blocked
// output, frees both copies and reorders the blocked output into the plain one; a 1x1 strided
// kernel first packs one image's strided input. slow_conv2d unfolds the input (im2col) into one
// buffer for the whole batch, except for a 1x1 kernel with unit stride.
// Returns what the step holds beyond its input and output, which the plan counts already.
std::size_t conv_workspace_bytes(const Graph& graph, const Node& node,
                                 const LifetimeOptions& options);

/// Strides in elements; empty = contiguous.
using Strides = std::vector<std::int64_t>;

Strides contiguous_strides(const std::vector<std::int64_t>& shape);
bool is_contiguous(const std::vector<std::int64_t>& shape, const Strides& st);
/// The strides of a view of shape `to` on a tensor of shape `from` with strides `st`, where
/// PyTorch's view rule allows one (dims merged or split only where the memory is evenly
/// spaced); nullopt where `reshape` must copy.
std::optional<Strides> view_strides(const std::vector<std::int64_t>& from, const Strides& st,
                                    const std::vector<std::int64_t>& to);
/// Whether torch.matmul reads an operand of this layout without copying it: its batch dims
/// merge into one (the reshape to 3-D is a view) and its matrix has a unit stride in one dim.
bool matmul_reads_in_place(const std::vector<std::int64_t>& shape, const Strides& st);
/// The layout PyTorch's elementwise kernels write for an input of this layout: the dims ordered
/// as in the input's memory, densely (empty when that is contiguous).
Strides dense_like(const std::vector<std::int64_t>& shape, const Strides& st);
/// A weight, a constant or a view of one (torch.onnx writes an Identity of one initializer for
/// each parameter with the same value).
bool fixed_tensor(const Graph& graph, int t);

/// The scopes of torchvision's `shifted_window_attention` in a graph (window_attention.cpp).
struct WindowAttention {
  std::vector<bool> inside;               ///< per node: a node of such a scope
  std::vector<std::pair<int, int>> held;  ///< (the partition x, the node making the next x)
  std::size_t scopes = 0;
};
WindowAttention find_window_attention(const Graph& graph);

/// F.scaled_dot_product_attention as torch.onnx spells it, which PyTorch 2.x's CPU kernel runs
/// as one operator (flash attention: no scores). sdpa.cpp says what it allocates.
struct Sdpa {
  int node = -1;               ///< the final MatMul (p @ v): where the operator runs
  int q = -1, k = -1, v = -1;  ///< what the operator reads (k before the export's transpose)
  std::vector<int> internals;  ///< the spelled-out tensors PyTorch never allocates
  std::vector<int> inputs;     ///< read until `node`: q, k, v and a float mask
  std::size_t workspace = 0;   ///< logsumexp and one thread's work buffer, freed on return
  Strides output_strides;      ///< [b, s, h, d] memory seen as [b, h, s, d]; empty: contiguous
};
std::vector<Sdpa> find_sdpa(const Graph& graph, std::size_t float_bytes);

/// The self-attentions written out in a module's forward (eager_rules.cpp).
struct AttentionLocals {
  std::vector<bool> inside;               ///< per node: of such a scope's own (layouts followed)
  std::vector<std::pair<int, int>> held;  ///< (a local's tensor, the forward's last node)
  std::size_t scopes = 0;
  std::size_t locals = 0;  ///< tensors held: q, k, v, the scores and the context
};
/// `sdpa`: the SDPAs found (their q, k and v are the locals there; no scores exist).
AttentionLocals find_attention_locals(const Graph& graph,
                                      const std::vector<std::size_t>& step_of_node,
                                      const std::vector<bool>& skip,
                                      const std::vector<Sdpa>& sdpa = {});

}  // namespace modelmem::model::detail

namespace modelmem::model::detail {
/// F.gelu (exact) as torch.onnx writes it, x * 0.5 * (1 + erf(x / sqrt(2))): one PyTorch
/// operator with one output, so the formula's intermediates (the Div, Erf, Add and first Mul
/// outputs) are never allocated, and x is read until the output is written.
struct ErfGelu {
  int input = -1;              ///< x
  int last_node = -1;          ///< the final Mul, which writes the output
  std::vector<int> internals;  ///< the intermediates
};
std::vector<ErfGelu> find_erf_gelus(const Graph& graph);
/// Tensors a forward binds to Python locals the graph does not show, held until it returns
/// (forward_locals.cpp): (tensor, its last step).
std::vector<std::pair<int, std::size_t>> forward_locals(
    const Graph& graph, const std::vector<std::size_t>& step_of_node);

// The lifetime rules of lifetime_rules.cpp, each pass of build_lifetimes that uses one:
/// A tensor consumed inside a module it was not produced in is an argument of that module: its
/// `last` step is raised to the module's last step (torch.onnx's scope names).
void extend_to_module_ends(const Graph& graph, const std::vector<std::size_t>& step_of_node,
                           std::vector<std::size_t>& last);
/// Per tensor: internal to one PyTorch operator of a leaf module (never allocated).
std::vector<bool> fused_in_leaf_modules(const Graph& graph);
/// An activation written into the output of the BatchNormalization before it (inplace=True).
bool after_norm(const Graph& graph, const Node& node);
/// Per node: the product an nn.Linear's bias Add writes into, or -1.
std::vector<int> linear_bias_adds(const Graph& graph);
}  // namespace modelmem::model::detail
