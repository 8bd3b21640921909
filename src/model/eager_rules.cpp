// What PyTorch eager allocates beyond a graph's tensors (eager_rules.hpp).
#include "model/eager_rules.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <string>

#include "modelmem/model/lifetimes.hpp"

namespace modelmem::model::detail {

constexpr std::size_t kOneDnnBlock = 16;  // AVX-512's channel block (AVX2: 8)

std::size_t round_block(std::size_t channels) {
  return (channels + kOneDnnBlock - 1) / kOneDnnBlock * kOneDnnBlock;
}

std::size_t conv_workspace_bytes(const Graph& graph, const Node& node,
                                 const LifetimeOptions& options) {
  if (node.inputs.size() < 2 || node.inputs[0] < 0 || node.inputs[1] < 0 || node.outputs.empty() ||
      node.outputs[0] < 0)
    return 0;
  const Tensor& x = graph.tensors[node.inputs[0]];
  const Tensor& w = graph.tensors[node.inputs[1]];
  const Tensor& y = graph.tensors[node.outputs[0]];
  const std::size_t rank = x.shape.size();
  if (rank < 3 || w.shape.size() != rank || y.shape.size() != rank || !in_arena(x)) return 0;
  auto u = [](std::int64_t v) { return static_cast<std::size_t>(std::max<std::int64_t>(v, 0)); };
  const std::size_t batch = u(x.shape[0]), ic = u(x.shape[1]), oc = u(y.shape[1]);
  const std::size_t ic_per_group = u(w.shape[1]);
  if (ic_per_group == 0 || ic % ic_per_group != 0) return 0;
  const std::size_t groups = ic / ic_per_group;
  std::size_t kernel = 1, in_spatial = 1, out_spatial = 1;
  bool unit_kernel = true, big_kernel = true, strided = false;
  for (std::size_t d = 2; d < rank; ++d) {
    kernel *= u(w.shape[d]);
    in_spatial *= u(x.shape[d]);
    out_spatial *= u(y.shape[d]);
    unit_kernel = unit_kernel && w.shape[d] == 1;
    big_kernel = big_kernel && w.shape[d] > 3;
    // A 1x1 kernel without padding keeps the size only at stride 1 (the case that matters).
    strided = strided || (w.shape[d] == 1 && y.shape[d] < x.shape[d]);
  }
  const std::size_t e =
      activation_bytes(x, options.float_bytes) / std::max<std::size_t>(batch * ic * in_spatial, 1);
  const bool onednn = (strided || batch >= 16 || !unit_kernel) &&
                      (groups > 1 || big_kernel || batch > 1 || ic * in_spatial > 20480);
  if (!onednn) {
    if (unit_kernel && !strided) return 0;
    return batch * ic * kernel * out_spatial * e;  // im2col
  }
  // An input in channels-last layout (made by a Transpose to NCHW from NHWC: a permuted view
  // in PyTorch, as ConvNeXt's LayerNorm2d returns): PyTorch runs the convolution channels-last,
  // oneDNN reads the input as it is (no blocked copy), and the weights are first copied into
  // that layout (weight.contiguous(channels_last)), held beside oneDNN's own copy; a no-op for
  // a 1x1 kernel or one input channel per group, where both layouts are the same.
  bool channels_last = false;
  if (rank == 4 && x.producer >= 0) {
    const Node& p = graph.nodes[x.producer];
    channels_last = p.op_type == "Transpose" && p.perm == std::vector<std::int64_t>{0, 3, 1, 2};
  }
  const bool blocked_input = (ic >= kOneDnnBlock || groups > 1) && !channels_last;
  const std::size_t in_copy = blocked_input ? batch * round_block(ic) * in_spatial * e : 0;
  std::size_t w_copy = 0;
  if (groups == 1)
    w_copy = round_block(oc) * (blocked_input ? round_block(ic) : ic) * kernel * e;
  else if (groups == ic && groups == oc)
    w_copy = round_block(oc) * kernel * e;  // depthwise
  else
    w_copy = round_block(oc) * ic_per_group * kernel * e;
  const std::size_t blocked_out = batch * round_block(oc) * out_spatial * e;
  const std::size_t packed = unit_kernel && strided ? round_block(ic) * out_spatial * e : 0;
  const std::size_t w_channels_last =
      channels_last && !unit_kernel && ic_per_group > 1 ? oc * ic_per_group * kernel * e : 0;
  const std::size_t out = activation_bytes(y, options.float_bytes);
  const std::size_t held =
      std::max(in_copy + w_copy + w_channels_last + blocked_out + packed, blocked_out + out);
  return held > out ? held - out : 0;
}
Strides contiguous_strides(const std::vector<std::int64_t>& shape) {
  Strides st(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;)
    st[d - 1] = st[d] * std::max<std::int64_t>(shape[d], 1);
  return st;
}

bool is_contiguous(const std::vector<std::int64_t>& shape, const Strides& st) {
  if (st.empty()) return true;
  std::int64_t expected = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 1) continue;
    if (st[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

std::optional<Strides> view_strides(const std::vector<std::int64_t>& from, const Strides& st,
                                    const std::vector<std::int64_t>& to) {
  std::int64_t numel = 1;
  for (auto d : from) numel *= d;
  if (numel == 0 || from.empty() || is_contiguous(from, st)) return contiguous_strides(to);
  Strides out(to.size(), 0);
  std::int64_t view_d = static_cast<std::int64_t>(to.size()) - 1;
  std::int64_t base = st.back(), tensor_numel = 1, view_numel = 1;
  for (std::int64_t d = static_cast<std::int64_t>(from.size()) - 1; d >= 0; --d) {
    tensor_numel *= from[d];
    const bool chunk_ends = d == 0 || (from[d - 1] != 1 && st[d - 1] != tensor_numel * base);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || to[view_d] == 1)) {
      out[view_d] = view_numel * base;
      view_numel *= to[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      base = st[d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

bool matmul_reads_in_place(const std::vector<std::int64_t>& shape, const Strides& st) {
  if (st.empty() || shape.size() < 2) return true;
  const std::size_t r = shape.size();
  Strides m = st;
  std::vector<std::int64_t> as3 = shape;
  if (r > 2) {
    std::int64_t batch = 1;
    for (std::size_t d = 0; d + 2 < r; ++d) batch *= shape[d];
    as3 = {batch, shape[r - 2], shape[r - 1]};
    auto v = view_strides(shape, st, as3);
    if (!v) return false;
    m = *v;
  }
  const std::size_t k = as3.size();
  const std::int64_t rows = as3[k - 2], cols = as3[k - 1];
  const bool row_major =
      (m[k - 1] == 1 || cols == 1) && m[k - 2] >= std::max<std::int64_t>(cols, 1);
  const bool col_major =
      (m[k - 2] == 1 || rows == 1) && m[k - 1] >= std::max<std::int64_t>(rows, 1);
  return row_major || col_major;
}

Strides dense_like(const std::vector<std::int64_t>& shape, const Strides& st) {
  if (st.empty() || is_contiguous(shape, st)) return {};
  std::vector<std::size_t> order(shape.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return st[a] > st[b]; });
  Strides out(shape.size(), 1);
  std::int64_t next = 1;
  for (std::size_t i = order.size(); i-- > 0;) {
    out[order[i]] = next;
    next *= std::max<std::int64_t>(shape[order[i]], 1);
  }
  return out;
}

bool fixed_tensor(const Graph& graph, int t) {
  for (int depth = 0; t >= 0 && depth < 8; ++depth) {
    if (!in_arena(graph.tensors[t])) return true;
    const int p = graph.tensors[t].producer;
    if (p < 0 || !is_alias_op(graph.nodes[p].op_type) || graph.nodes[p].inputs.empty()) break;
    t = graph.nodes[p].inputs[0];
  }
  return false;
}

// torchvision's `shifted_window_attention` (Swin and Swin-V2, torchvision 0.13-0.14): the
// function runs inside the attention module's forward, so its nodes are that scope's own
// (`/features/features.1/features.1.0/attn/MatMul`). It partitions its input into windows
// (`x = x.view(...).permute(...).reshape(...)`), projects `qkv = F.linear(x, ...)`, splits
// q, k and v as views, normalises (V2) or scales (V1) q, multiplies, adds the bias and mask,
// softmaxes, multiplies by v and reshapes into the next `x`, projected by F.linear. Found as a
// scope with a Softmax of its own whose first MatMul by a weight reads a tensor the scope made
// (in nn.MultiheadAttention the projection reads the module's argument).
WindowAttention find_window_attention(const Graph& graph) {
  WindowAttention wa;
  wa.inside.assign(graph.nodes.size(), false);
  std::vector<std::string> direct(graph.nodes.size());
  std::map<std::string, std::vector<int>> nodes_of;
  for (std::size_t v = 0; v < graph.nodes.size(); ++v) {
    const std::string& name = graph.nodes[v].name;
    if (name.size() < 2 || name[0] != '/') continue;
    direct[v] = name.substr(0, name.rfind('/'));
    if (!direct[v].empty()) nodes_of[direct[v]].push_back(static_cast<int>(v));
  }
  for (const auto& [scope, nodes] : nodes_of) {
    const bool softmax = std::any_of(nodes.begin(), nodes.end(),
                                     [&](int v) { return graph.nodes[v].op_type == "Softmax"; });
    if (!softmax) continue;
    int first = -1, last = -1;
    for (int v : nodes) {
      const Node& n = graph.nodes[v];
      if (n.op_type != "MatMul" || n.inputs.size() != 2 || n.inputs[0] < 0 ||
          !fixed_tensor(graph, n.inputs[1]) || fixed_tensor(graph, n.inputs[0]))
        continue;
      const int p = graph.tensors[n.inputs[0]].producer;
      if (first < 0) {
        if (p >= 0 && direct[p] == scope) first = v;
        if (first < 0) break;  // the first projection reads an argument: not this function
        continue;
      }
      last = v;
    }
    if (first < 0 || last < 0) continue;
    const int next_x = graph.tensors[graph.nodes[last].inputs[0]].producer;
    if (next_x < 0) continue;
    for (int v : nodes) wa.inside[v] = true;
    wa.held.emplace_back(graph.nodes[first].inputs[0], next_x);
    ++wa.scopes;
  }
  return wa;
}

}  // namespace modelmem::model::detail
