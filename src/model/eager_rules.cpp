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

namespace {

// Each node's own module scope (torch.onnx's `/a/b/MatMul` is in `/a/b`), and each scope's nodes.
struct ModuleScopes {
  std::vector<std::string> direct;
  std::map<std::string, std::vector<int>> nodes_of;
};
ModuleScopes module_scopes(const Graph& graph) {
  ModuleScopes ms;
  ms.direct.resize(graph.nodes.size());
  for (std::size_t v = 0; v < graph.nodes.size(); ++v) {
    const std::string& name = graph.nodes[v].name;
    if (name.size() < 2 || name[0] != '/') continue;
    ms.direct[v] = name.substr(0, name.rfind('/'));
    if (!ms.direct[v].empty()) ms.nodes_of[ms.direct[v]].push_back(static_cast<int>(v));
  }
  return ms;
}

}  // namespace

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
  const ModuleScopes ms = module_scopes(graph);
  const std::vector<std::string>& direct = ms.direct;
  const auto& nodes_of = ms.nodes_of;
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

// A self-attention written out in a module's forward, as BERT's, GPT-2's and the bundled
// encoder's are: `q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))`, then
// `scores = q @ k.transpose(-1, -2) / sqrt(d)` (a mask added), `softmax(scores) @ v`, and the
// rest of the forward (the output projection; in the bundled encoder the whole feed-forward
// too). q, k, v and scores are Python locals: PyTorch frees them when the forward returns, not
// after their last use, which the graph shows. Found as a scope with a Softmax and two
// MatMuls of two activations of its own, whose operands are (views of) outputs of its
// sub-modules, the projections; scopes in `skip` (window attentions) are left out, and so is
// nn.MultiheadAttention, whose projections are F.linear calls in its own scope. The held
// tensors are those operands and the Softmax's input; they live until the last node of the
// scope or its sub-modules. The Softmax's output is not held: the bundled encoder passes it on
// as a temporary (transformers' eager BERT keeps it as `attention_probs`, after the peak).
AttentionLocals find_attention_locals(const Graph& graph,
                                      const std::vector<std::size_t>& step_of_node,
                                      const std::vector<bool>& skip,
                                      const std::vector<Sdpa>& sdpa) {
  AttentionLocals al;
  al.inside.assign(graph.nodes.size(), false);
  const ModuleScopes ms = module_scopes(graph);
  const std::vector<std::string>& direct = ms.direct;
  const auto& nodes_of = ms.nodes_of;
  // A view in such a forward: reshape, transpose (q.view(...).transpose(1, 2)).
  auto is_view = [](const Node& n) { return is_alias_op(n.op_type) || n.op_type == "Transpose"; };
  // The tensor a chain of views reads.
  auto origin = [&](int t) {
    for (int depth = 0; t >= 0 && depth < 8; ++depth) {
      const int p = graph.tensors[t].producer;
      if (p < 0) break;
      const Node& n = graph.nodes[p];
      if (n.inputs.empty() || !is_view(n)) break;
      t = n.inputs[0];
    }
    return t;
  };
  for (const auto& [scope, nodes] : nodes_of) {
    if (std::any_of(nodes.begin(), nodes.end(), [&](int v) { return skip.size() > 0 && skip[v]; }))
      continue;
    int softmax = -1;
    std::vector<int> products;  // MatMuls of two activations
    for (int v : nodes) {
      const Node& n = graph.nodes[v];
      if (n.op_type == "Softmax" && !n.inputs.empty() && n.inputs[0] >= 0) softmax = v;
      if (n.op_type == "MatMul" && n.inputs.size() == 2 && n.inputs[0] >= 0 && n.inputs[1] >= 0 &&
          !fixed_tensor(graph, n.inputs[0]) && !fixed_tensor(graph, n.inputs[1]))
        products.push_back(v);
    }
    if (softmax < 0 || products.size() < 2) continue;
    const std::string prefix = scope + "/";
    std::vector<int> locals;
    for (int v : products)
      for (int t : graph.nodes[v].inputs) {
        const int o = origin(t);
        const int p = graph.tensors[o].producer;
        if (p < 0 || direct[p].compare(0, prefix.size(), prefix) != 0) continue;
        if (in_arena(graph.tensors[t])) locals.push_back(t);
        if (o != t && in_arena(graph.tensors[o])) locals.push_back(o);
      }
    // An SDPA (PyTorch 2.x): the forward's query, key and value states are what the operator
    // reads (through views; Llama's rotated q and k are made in the scope itself), and the
    // scores never exist.
    const Sdpa* sd = nullptr;
    for (const Sdpa& s : sdpa)
      if (s.node >= 0 && direct[s.node] == scope) sd = &s;
    if (sd) {
      locals.clear();
      for (int t : {sd->q, sd->k, sd->v}) {
        const int o = origin(t);
        const int p = graph.tensors[o].producer;
        if (p < 0 || (direct[p] != scope && direct[p].compare(0, prefix.size(), prefix) != 0))
          continue;
        if (in_arena(graph.tensors[o])) locals.push_back(o);
      }
    }
    if (locals.empty()) continue;
    const int scores = graph.nodes[softmax].inputs[0];
    if (!sd && in_arena(graph.tensors[scores])) locals.push_back(scores);
    // The forward's last node: of the scope or of its sub-modules.
    int last = -1;
    for (std::size_t v = 0; v < graph.nodes.size(); ++v) {
      const std::string& d = direct[v];
      if (d != scope && d.compare(0, prefix.size(), prefix) != 0) continue;
      if (last < 0 || step_of_node[v] > step_of_node[static_cast<std::size_t>(last)])
        last = static_cast<int>(v);
    }
    // The context: the second product, through its views and the reshape that copies it, as
    // it reaches the output projection (`ctx = ctx.transpose(1, 2).reshape(b, s, h)`).
    for (int t = graph.nodes[products.back()].outputs.empty()
                     ? -1
                     : graph.nodes[products.back()].outputs[0],
             depth = 0;
         t >= 0 && depth < 8; ++depth) {
      const auto& cs = graph.tensors[t].consumers;
      if (std::any_of(cs.begin(), cs.end(),
                      [&](int c) { return direct[c].compare(0, prefix.size(), prefix) == 0; })) {
        if (in_arena(graph.tensors[t])) locals.push_back(t);
        break;
      }
      if (cs.size() != 1 || direct[cs[0]] != scope) break;
      const Node& c = graph.nodes[cs[0]];
      if (!is_view(c) || c.outputs.empty()) break;
      t = c.outputs[0];
    }
    for (int v : nodes) al.inside[v] = true;
    std::sort(locals.begin(), locals.end());
    locals.erase(std::unique(locals.begin(), locals.end()), locals.end());
    for (int t : locals) al.held.emplace_back(t, last);
    al.locals += locals.size();
    ++al.scopes;
  }
  return al;
}

std::vector<ErfGelu> find_erf_gelus(const Graph& graph) {
  std::vector<ErfGelu> out;
  auto only = [&](int t) -> const Node* {
    if (t < 0 || graph.tensors[t].consumers.size() != 1 || graph.tensors[t].graph_output)
      return nullptr;
    return &graph.nodes[graph.tensors[t].consumers[0]];
  };
  auto other = [](const Node& n, int t) { return n.inputs[0] == t ? n.inputs[1] : n.inputs[0]; };
  for (const Node& erf : graph.nodes) {
    if (erf.op_type != "Erf" || erf.inputs.size() != 1 || erf.outputs.size() != 1) continue;
    const int scaled = erf.inputs[0];
    if (scaled < 0 || graph.tensors[scaled].producer < 0) continue;
    const Node& div = graph.nodes[graph.tensors[scaled].producer];
    if ((div.op_type != "Div" && div.op_type != "Mul") || div.inputs.size() != 2 ||
        div.inputs[0] < 0 || div.inputs[1] < 0 || !fixed_tensor(graph, div.inputs[1]) ||
        only(scaled) != &erf)
      continue;
    const int x = div.inputs[0];
    const Node* add = only(erf.outputs[0]);
    if (!add || add->op_type != "Add" || add->inputs.size() != 2 || add->outputs.size() != 1 ||
        !fixed_tensor(graph, other(*add, erf.outputs[0])))
      continue;
    const Node* mul = only(add->outputs[0]);
    if (!mul || mul->op_type != "Mul" || mul->inputs.size() != 2 || mul->outputs.size() != 1 ||
        other(*mul, add->outputs[0]) != x)
      continue;
    const Node* half = only(mul->outputs[0]);
    if (!half || half->op_type != "Mul" || half->inputs.size() != 2 ||
        !fixed_tensor(graph, other(*half, mul->outputs[0])))
      continue;
    out.push_back({x,
                   graph.tensors[mul->outputs[0]].consumers[0],
                   {scaled, erf.outputs[0], add->outputs[0], mul->outputs[0]}});
  }
  return out;
}

}  // namespace modelmem::model::detail
