// Turns a Graph and an execution order into a planning Problem: one buffer per block of
// activation memory, live from the step of its first producer to the step after its last use.
// Graph inputs live from step 0, graph outputs to the last step; weights go to a separate region
// and are only summed. In-place: an elementwise op whose input dies at that node with the output's
// size and type writes into it. Views (Reshape, Flatten, Squeeze, Unsqueeze, Identity) share
// their input's memory. O(nodes + tensors).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "modelmem/model/graph.hpp"
#include "modelmem/plan/problem.hpp"

namespace modelmem::model {

struct LifetimeOptions {
  /// Execution order: a permutation of node indices in topological order; empty = stored order.
  std::vector<int> order;
  /// Bytes per element for float32 activations (4; 2 plans as fp16/bf16).
  std::size_t float_bytes = 4;
  /// The same for float32 weights (weights_bytes): 4 keeps them as stored.
  std::size_t weight_float_bytes = 4;
  /// Every buffer is rounded up to and aligned on this many bytes (TFLite and ORT use 64).
  std::size_t alignment = 64;
  bool in_place = true;  ///< elementwise ops write into a dying input
  bool alias = true;     ///< view ops share their input's memory
  /// Graph inputs stay live to the last step (the caller owns them: eager runtimes) instead of
  /// dying after their last use.
  bool inputs_live_throughout = false;
  /// A Conv holds what PyTorch's CPU convolution allocates for the call beyond its input and
  /// output: oneDNN's copies of the input and weights in its channel-blocked layout (channels
  /// padded to the block) and its blocked output, or the unfolded input (im2col) of PyTorch's
  /// own kernel; nothing for a 1x1 unit-stride conv PyTorch runs itself. Which path a conv takes
  /// follows PyTorch 1.13's rule on batch, kernel, groups and input size (lifetimes.cpp). Each
  /// such step gets one workspace buffer (id "NODE:workspace", no tensors).
  bool conv_workspace = false;
  /// A tensor passed into a PyTorch module stays live until the module returns (the Python
  /// frames of eager execution hold their arguments). Module scopes are read from the node names
  /// torch.onnx.export writes ("/layer1/layer1.0/conv1/Conv"); nodes without such names have
  /// none, and the option changes nothing for them. With it, a Concat a module makes itself
  /// and passes into a sub-module stays live until the module returns (torch.cat's result is a
  /// local of the forward: DenseNet's `concated_features`).
  bool module_scopes = false;
  /// A leaf module (a torch.onnx scope with no sub-scopes) whose nodes are all elementwise,
  /// reductions, Softmax or layout ops is one PyTorch operator spelled as several ONNX nodes
  /// (nn.SiLU as Sigmoid+Mul, nn.GELU as Div+Erf+Add+Mul+Mul, nn.LayerNorm as ReduceMean+Sub+
  /// Pow+...): a tensor an elementwise or reduction node makes and only that module uses is
  /// internal to the operator and gets no buffer. Unnamed nodes have no modules.
  bool fuse_leaf_modules = false;
  /// With in_place off (PyTorch eager): an activation (Relu, Clip, LeakyRelu, HardSwish, Elu)
  /// whose input is a BatchNormalization's output that dies there writes into it, as
  /// torchvision's inplace=True activations after a norm the export did not fold into a Conv
  /// (DenseNet's norm -> relu -> conv). After a Conv the export folds the norm away, and the
  /// activation's own buffer stands for the norm output PyTorch allocates.
  bool activation_in_place_after_norm = false;
  /// With in_place off (PyTorch eager): nn.Linear on an input of rank > 2, exported as a
  /// MatMul by the weight and an Add of the bias inside the Linear's own leaf module scope
  /// (`/blk/fc1/MatMul`, `/blk/fc1/Add`), is one PyTorch operator with one output (addmm on the
  /// flattened input, or matmul then an in-place add_): the Add writes into the product. Needs
  /// torch.onnx's scoped node names: elsewhere (`x @ w + b` in a forward) PyTorch allocates both.
  bool linear_bias_in_place = false;
  /// PyTorch eager inside torchvision's `shifted_window_attention` (Swin, Swin-V2): a module
  /// scope with a Softmax whose first projection (a MatMul by a weight) reads a tensor the
  /// scope made itself, the window partition `x`. There the layout of each tensor is followed:
  /// Transpose, Slice, Expand and Gather of one index are views of their input (the qkv
  /// projection stays whole while q, k and v live), a Reshape is a view where PyTorch's view
  /// rule allows and a copy elsewhere, an elementwise op writes in its input's layout, a
  /// MatMul copies an operand whose batch dims do not merge (torch.matmul's reshape to 3-D),
  /// the projections' bias adds are F.linear's own (in place), and `x`, a Python local, lives
  /// until the attention's output is reshaped into the next `x`. Needs torch.onnx's scoped
  /// node names; changes nothing in a graph without such a scope.
  bool window_attention = false;
  /// PyTorch eager in a self-attention written out in a module's forward (BERT, GPT-2, the
  /// bundled encoder): q, k, v (views of the projection sub-modules' outputs) and the scores
  /// (the Softmax's input) are Python locals, held until the forward returns (the last node of
  /// the scope and its sub-modules), where the graph frees each after its last use. The scores
  /// grow with the sequence squared. Needs torch.onnx's scoped node names.
  bool attention_locals = false;
  /// PyTorch 2.x eager: F.scaled_dot_product_attention, spelled by torch.onnx as
  /// MatMul(q * c, k^T * c) [+ mask] -> Softmax [-> NaN guard] -> MatMul(p, v), is one operator
  /// (the CPU flash-attention kernel): the scores and the softmax never exist, q, k, v and the
  /// mask are read until it runs, its output is [b, s, h, d] in memory (the transpose back is
  /// a view), and the step holds the kernel's logsumexp and one thread's work buffer (id
  /// "NODE:sdpa", no tensors). A graph without that spelling is unchanged (1.13 exports).
  bool sdpa = false;
};

struct Lifetimes {
  plan::Problem problem;       ///< the activation buffers, ids = first tensor's name
  std::vector<int> buffer_of;  ///< per tensor: index into problem.buffers, -1 when none
  std::vector<std::vector<int>> tensors_of;  ///< per buffer: the tensors sharing it
  std::vector<int> order;                    ///< the execution order used (step s runs order[s])
  std::vector<std::size_t> step_of_node;     ///< inverse of order
  std::size_t weights_bytes = 0;             ///< sum of the initializers (weight_float_bytes)
  std::size_t weights_count = 0;
  std::size_t activation_bytes_unshared = 0;  ///< every activation its own memory, no reuse
  std::size_t activation_count = 0;           ///< activation + input tensors with bytes > 0
  std::size_t in_place = 0;                   ///< outputs written into a dying input
  std::size_t aliases = 0;                    ///< view outputs sharing their input
  std::size_t weight_views = 0;               ///< views of weights/constants (no activation memory)
  std::size_t workspaces = 0;                 ///< conv_workspace buffers
  std::size_t window_attentions = 0;  ///< scopes planned as window attention (window_attention)
  std::size_t matmul_copies = 0;      ///< operand copies of MatMuls in those scopes
  std::size_t attention_scopes = 0;   ///< self-attentions whose locals are held (attention_locals)
  std::size_t attention_locals = 0;   ///< the tensors held there
  std::size_t fused = 0;              ///< fuse_leaf_modules: tensors without a buffer
  std::size_t sdpa = 0;               ///< attentions run as one SDPA operator (sdpa)
};

/// Builds the lifetimes. Throws InvalidInput when `order` is not a topological permutation.
Lifetimes build_lifetimes(const Graph& graph, const LifetimeOptions& options = {});

/// Activation size of a tensor under `float_bytes` (float32 tensors scaled), unrounded.
std::size_t activation_bytes(const Tensor& tensor, std::size_t float_bytes);

/// Ops that may write their output into a dying input of the same size and type.
bool is_in_place_op(const std::string& op_type);
/// Ops whose output is a view of their first input.
bool is_alias_op(const std::string& op_type);

}  // namespace modelmem::model
