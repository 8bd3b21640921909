// A graph and an execution order as a planning Problem (model/lifetimes.hpp).
#include "modelmem/model/lifetimes.hpp"

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>

#include "model/eager_rules.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::model {
namespace d = detail;
using d::after_norm, d::contiguous_strides, d::conv_workspace_bytes, d::dense_like,
    d::extend_to_module_ends, d::find_window_attention, d::fixed_tensor, d::fused_in_leaf_modules,
    d::in_arena, d::is_contiguous, d::linear_bias_adds, d::matmul_reads_in_place, d::Strides,
    d::view_strides, d::WindowAttention;
namespace {

struct Group {
  std::size_t bytes = 0;
  std::size_t start = 0;
  std::size_t last = 0;  // last step at which a member is used (inclusive)
  bool has_input = false;
  std::vector<int> members;
};

// build_lifetimes as named passes over one graph, in the order run() calls them: the steps of
// the execution order, each tensor's first and last step and bytes, the lives PyTorch eager
// holds longer, the layouts attention code follows, the tensors one operator never allocates,
// the buffers tensors share (views, in place), then the plan's buffers and the step buffers
// (convolution workspaces, SDPA's, MatMul operand copies).
class Builder {
 public:
  Builder(const Graph& g, const LifetimeOptions& o) : graph(g), options(o), n(g.nodes.size()) {}

  Lifetimes run() {
    order_steps();
    tensor_ranges();
    hold_longer();
    follow_layouts();
    mark_fused();
    share_buffers();
    write_buffers();
    write_step_buffers();
    count_activations();
    return std::move(lt);
  }

 private:
  struct Copy {
    std::size_t step;
    std::size_t bytes;
    std::string id;
  };

  const Graph& graph;
  const LifetimeOptions& options;
  const std::size_t n;
  Lifetimes lt;
  std::vector<std::size_t> first, last, size;  // per tensor: steps (inclusive) and bytes
  WindowAttention wa;
  std::vector<d::Sdpa> sdpa;
  std::vector<int> sdpa_at;  // per node: the SDPA it runs, or -1
  bool layouts = false;      // some tensors follow their layout (strides)
  std::vector<Strides> strides;
  std::vector<Copy> copies;
  std::vector<bool> fused;
  std::vector<int> linear_into;
  std::vector<int> group_of;
  std::vector<bool> weight_view;
  std::vector<Group> groups;
  // share_buffers: the step whose outputs are placed, and the groups its outputs took.
  std::size_t s = 0;
  std::vector<bool> claimed;

  // The execution order: a permutation of the nodes in which every input is made before use.
  void order_steps() {
    lt.problem.name = graph.source;
    if (options.order.empty()) {
      lt.order.resize(n);
      std::iota(lt.order.begin(), lt.order.end(), 0);
    } else {
      lt.order = options.order;
    }
    if (lt.order.size() != n) throw InvalidInput("execution order: wrong number of nodes");
    lt.step_of_node.assign(n, n);
    for (std::size_t st = 0; st < n; ++st) {
      int v = lt.order[st];
      if (v < 0 || static_cast<std::size_t>(v) >= n || lt.step_of_node[v] != n)
        throw InvalidInput("execution order: not a permutation of the nodes");
      lt.step_of_node[v] = st;
    }
    for (std::size_t v = 0; v < n; ++v) {
      for (int t : graph.nodes[v].inputs) {
        if (t < 0) continue;
        int p = graph.tensors[t].producer;
        if (p >= 0 && lt.step_of_node[p] >= lt.step_of_node[v])
          throw InvalidInput(
              fmt::format("execution order: {} runs before its input '{}' is produced",
                          graph.describe_node(static_cast<int>(v)), graph.tensors[t].name));
      }
    }
    if (options.alignment == 0) throw InvalidInput("alignment must be positive");
  }

  // Each arena tensor's bytes and steps (from its producer to its last consumer; graph outputs,
  // and inputs where asked, to the end), and the weights' bytes.
  void tensor_ranges() {
    const std::size_t last_step = n == 0 ? 0 : n - 1;
    first.assign(graph.tensors.size(), 0);
    last.assign(graph.tensors.size(), 0);
    size.assign(graph.tensors.size(), 0);
    for (std::size_t i = 0; i < graph.tensors.size(); ++i) {
      const Tensor& t = graph.tensors[i];
      if (t.kind == TensorKind::kWeight) {
        lt.weights_bytes = checked_add(
            lt.weights_bytes, activation_bytes(t, options.weight_float_bytes), "weights bytes");
        ++lt.weights_count;
      }
      if (!in_arena(t)) continue;
      size[i] = activation_bytes(t, options.float_bytes);
      first[i] = t.producer >= 0 ? lt.step_of_node[t.producer] : 0;
      last[i] = first[i];
      for (int c : t.consumers) last[i] = std::max(last[i], lt.step_of_node[c]);
      if (t.graph_output || (options.inputs_live_throughout && t.kind == TensorKind::kInput))
        last[i] = last_step;
    }
  }

  // The lives PyTorch eager holds past their last use: a module's arguments and a forward's
  // locals, a window attention's tensors, SDPA's inputs, a written-out attention's locals.
  void hold_longer() {
    if (options.module_scopes) {
      extend_to_module_ends(graph, lt.step_of_node, last);
      for (auto [t, until] : d::forward_locals(graph, lt.step_of_node))
        last[t] = std::max(last[t], until);
    }
    if (options.window_attention) {
      wa = find_window_attention(graph);
      lt.window_attentions = wa.scopes;
      for (auto [x, until] : wa.held)
        if (in_arena(graph.tensors[x])) last[x] = std::max(last[x], lt.step_of_node[until]);
    }
    sdpa_at.assign(n, -1);
    if (options.sdpa) sdpa = d::find_sdpa(graph, options.float_bytes);
    for (std::size_t i = 0; i < sdpa.size(); ++i) {
      sdpa_at[sdpa[i].node] = static_cast<int>(i);
      for (int t : sdpa[i].inputs)
        if (in_arena(graph.tensors[t])) last[t] = std::max(last[t], lt.step_of_node[sdpa[i].node]);
    }
    lt.sdpa = sdpa.size();
    if (options.attention_locals) {
      const auto al = d::find_attention_locals(graph, lt.step_of_node, wa.inside, sdpa);
      lt.attention_scopes = al.scopes;
      lt.attention_locals = al.locals;
      for (auto [t, until] : al.held) last[t] = std::max(last[t], lt.step_of_node[until]);
      // Their layouts are followed as in a window attention: q, k and v are views.
      if (al.scopes) {
        if (wa.inside.empty()) wa.inside.assign(graph.nodes.size(), false);
        for (std::size_t v = 0; v < al.inside.size(); ++v)
          if (al.inside[v]) wa.inside[v] = true;
      }
    }
  }

  // The nodes whose outputs follow their layout: attention code, and an SDPA's output with the
  // views taken of it ([b, s, h, d] memory).
  void follow_layouts() {
    if (!sdpa.empty() && wa.inside.empty()) wa.inside.assign(n, false);
    for (const auto& sd : sdpa) {
      wa.inside[sd.node] = true;
      int t = graph.nodes[sd.node].outputs[0];
      for (int depth = 0; depth < 4 && graph.tensors[t].consumers.size() == 1; ++depth) {
        const Node& c = graph.nodes[graph.tensors[t].consumers[0]];
        if ((c.op_type != "Transpose" && !is_alias_op(c.op_type)) || c.outputs.empty() ||
            c.outputs[0] < 0)
          break;
        wa.inside[graph.tensors[t].consumers[0]] = true;
        t = c.outputs[0];
      }
    }
    layouts = wa.scopes > 0 || lt.attention_scopes > 0 || !sdpa.empty();
    strides.assign(layouts ? graph.tensors.size() : 0, Strides{});
  }

  Strides strides_of(int t) const {
    const Strides& st = strides[t];
    return st.empty() ? contiguous_strides(graph.tensors[t].shape) : st;
  }

  // The tensors one PyTorch operator computes inside itself (never allocated), and the bias
  // adds written into their product.
  void mark_fused() {
    fused.assign(graph.tensors.size(), false);
    if (options.fuse_leaf_modules) {
      fused = fused_in_leaf_modules(graph);
      // F.gelu in a forward: one operator (its input read until its output is written).
      for (const auto& g : d::find_erf_gelus(graph)) {
        for (int t : g.internals) fused[t] = true;
        if (in_arena(graph.tensors[g.input]))
          last[g.input] = std::max(last[g.input], lt.step_of_node[g.last_node]);
      }
    }
    for (const auto& sd : sdpa)
      for (int t : sd.internals) fused[t] = true;  // inside the one operator
    if (options.linear_bias_in_place && !options.in_place) linear_into = linear_bias_adds(graph);
  }

  void join(int tensor, int g) {
    group_of[tensor] = g;
    groups[g].members.push_back(tensor);
    groups[g].last = std::max(groups[g].last, last[tensor]);
  }

  // Step by step, each output's buffer: a group of tensors sharing memory (a view, an output
  // written in place into a dying input) or a new one.
  void share_buffers() {
    lt.buffer_of.assign(graph.tensors.size(), -1);
    group_of.assign(graph.tensors.size(), -1);
    weight_view.assign(graph.tensors.size(), false);
    for (std::size_t i = 0; i < graph.tensors.size(); ++i) {
      if (graph.tensors[i].kind == TensorKind::kInput && in_arena(graph.tensors[i])) {
        groups.push_back(Group{size[i], 0, 0, true, {}});
        join(static_cast<int>(i), static_cast<int>(groups.size()) - 1);
      }
    }
    for (s = 0; s < n; ++s) {
      const Node& node = graph.nodes[lt.order[s]];
      claimed.assign(groups.size() + node.outputs.size(), false);
      share_outputs(node);
    }
  }

  // The group of `in` when output `o` may be written into it: it dies at this step, is no
  // graph input, not yet taken by another output of the node, and has o's type and size.
  int dying(int in, int o) const {
    if (in < 0 || group_of[in] < 0) return -1;
    const Group& cand = groups[group_of[in]];
    if (cand.has_input || cand.last != s || claimed[group_of[in]]) return -1;
    if (graph.tensors[in].dtype != graph.tensors[o].dtype || size[in] != size[o]) return -1;
    return group_of[in];
  }

  // In a window attention: the group output `k` (`o`) of `nd` shares, or -1 for a new
  // buffer; records the operand copies a MatMul or Softmax makes.
  int windowed_output(const Node& nd, std::size_t k, int o) {
    const std::string& op = nd.op_type;
    const Tensor& out = graph.tensors[o];
    if (k == 0 && (op == "MatMul" || op == "Softmax")) {
      for (std::size_t i = 0; i < nd.inputs.size() && i < 2; ++i) {
        const int in = nd.inputs[i];
        if (in < 0 || !in_arena(graph.tensors[in])) continue;
        const Tensor& t = graph.tensors[in];
        const Strides st = strides_of(in);
        const bool copied =
            op == "MatMul" ? !matmul_reads_in_place(t.shape, st) : !is_contiguous(t.shape, st);
        if (copied) copies.push_back({s, size[in], nd.name + ":copy" + std::to_string(i)});
      }
      return -1;
    }
    if (k != 0 || nd.inputs.empty() || nd.inputs[0] < 0) return -1;
    const int in = nd.inputs[0];
    const Tensor& src = graph.tensors[in];
    if (!in_arena(src) || group_of[in] < 0) {
      // F.linear's bias: added in place into the product of a MatMul by a weight
      if (op != "Add" || nd.inputs.size() != 2) return -1;
    }
    if (op == "Add" && nd.inputs.size() == 2) {
      for (int j = 0; j < 2; ++j) {
        const int prod = nd.inputs[j], bias = nd.inputs[1 - j];
        if (prod < 0 || bias < 0 || !fixed_tensor(graph, bias) || !in_arena(graph.tensors[prod]) ||
            graph.tensors[prod].producer < 0)
          continue;
        const Node& mm = graph.nodes[graph.tensors[prod].producer];
        if (mm.op_type != "MatMul" || mm.inputs.size() != 2 || !fixed_tensor(graph, mm.inputs[1]))
          continue;
        const int g = dying(prod, o);
        if (g < 0) continue;
        strides[o] = strides[prod];
        ++lt.in_place;
        return g;
      }
      return -1;
    }
    const Strides st = strides_of(in);
    std::optional<Strides> view;
    if (op == "Transpose") {
      Strides p(st.size());
      for (std::size_t d = 0; d < st.size(); ++d) {
        std::int64_t from = nd.perm.empty() ? static_cast<std::int64_t>(st.size() - 1 - d)
                            : nd.perm.size() == st.size() ? nd.perm[d]
                                                          : -1;
        if (from < 0 || from >= static_cast<std::int64_t>(st.size())) return -1;
        p[d] = st[from];
      }
      view = p;
    } else if (op == "Gather" && nd.inputs.size() == 2 && nd.inputs[1] >= 0) {
      const Tensor& idx = graph.tensors[nd.inputs[1]];
      std::int64_t axis = nd.axis < 0 ? nd.axis + static_cast<std::int64_t>(st.size()) : nd.axis;
      if (in_arena(idx) || !idx.shape.empty() || axis < 0 ||
          axis >= static_cast<std::int64_t>(st.size()))
        return -1;  // torch.index_select: a copy
      Strides p = st;
      p.erase(p.begin() + axis);
      view = p;
    } else if (op == "Slice") {
      if (out.shape.size() != st.size()) return -1;
      view = st;
    } else if (op == "Expand") {
      const std::size_t r = out.shape.size();
      if (r < st.size()) return -1;
      Strides p(r, 0);
      for (std::size_t d = 0; d < st.size(); ++d) {
        const std::size_t od = r - st.size() + d;
        p[od] = src.shape[d] == out.shape[od] ? st[d] : 0;
      }
      view = p;
    } else if (is_alias_op(op)) {
      view = view_strides(src.shape, st, out.shape);  // none: reshape copies
    }
    if (!view) return -1;
    strides[o] = is_contiguous(out.shape, *view) ? Strides{} : *view;
    ++lt.aliases;
    return group_of[in];
  }

  void share_outputs(const Node& node) {
    for (std::size_t k = 0; k < node.outputs.size(); ++k) {
      int o = node.outputs[k];
      if (o < 0 || !in_arena(graph.tensors[o])) continue;
      if (fused[o]) {
        ++lt.fused;  // internal to one PyTorch operator: never allocated
        continue;
      }
      int g = -1;
      const bool windowed = layouts && wa.inside[lt.order[s]];
      if (windowed && sdpa_at[lt.order[s]] >= 0)
        strides[o] = sdpa[sdpa_at[lt.order[s]]].output_strides;  // a new [b, s, h, d] buffer
      else if (windowed)
        g = windowed_output(node, k, o);
      if (g >= 0) {
        // a view (or F.linear's bias add) in a window attention
      } else if (windowed) {
        // a new tensor: elementwise ops write in the layout of their first full-shape input
        if (is_in_place_op(node.op_type)) {
          for (int in : node.inputs) {
            if (in < 0 || !in_arena(graph.tensors[in]) ||
                graph.tensors[in].shape != graph.tensors[o].shape)
              continue;
            strides[o] = dense_like(graph.tensors[o].shape, strides_of(in));
            break;
          }
        }
      } else if (options.alias && k == 0 && is_alias_op(node.op_type) && !node.inputs.empty() &&
                 node.inputs[0] >= 0) {
        int in = node.inputs[0];
        const Tensor& src = graph.tensors[in];
        if (!in_arena(src) || weight_view[in]) {
          if (src.kind == TensorKind::kWeight || src.kind == TensorKind::kConstant ||
              weight_view[in]) {
            weight_view[o] = true;  // a view of the weights region: no activation memory
            ++lt.weight_views;
            continue;
          }
        } else if (size[in] == size[o]) {
          g = group_of[in];
          ++lt.aliases;
        }
      }
      if (g < 0 && !windowed &&
          ((options.in_place && is_in_place_op(node.op_type)) ||
           (options.activation_in_place_after_norm && after_norm(graph, node)))) {
        for (int in : node.inputs) {
          g = dying(in, o);
          if (g < 0) continue;
          ++lt.in_place;
          break;
        }
      }
      if (g < 0 && !windowed && k == 0 && !linear_into.empty() && linear_into[lt.order[s]] >= 0) {
        g = dying(linear_into[lt.order[s]], o);
        if (g >= 0) ++lt.in_place;
      }
      if (g < 0) {
        groups.push_back(Group{size[o], s, s, false, {}});
        g = static_cast<int>(groups.size()) - 1;
        claimed.resize(groups.size() + node.outputs.size(), false);
      }
      claimed[g] = true;
      join(o, g);
    }
  }

  // One plan buffer per group, live from its first step to its last.
  void write_buffers() {
    lt.tensors_of.reserve(groups.size());
    for (const Group& g : groups) {
      plan::Buffer b;
      b.id = graph.tensors[g.members.front()].name;
      b.size = checked_align_up(g.bytes, options.alignment, "activation buffer size");
      b.start = static_cast<plan::Time>(g.start);
      b.end = static_cast<plan::Time>(g.last + 1);
      b.alignment = options.alignment;
      for (int m : g.members) lt.buffer_of[m] = static_cast<int>(lt.problem.buffers.size());
      lt.problem.buffers.push_back(std::move(b));
      lt.tensors_of.push_back(g.members);
    }
  }

  // A buffer of one step's own (no tensor holds it): live during step `step` only.
  void add_step_buffer(std::string id, std::size_t bytes, std::size_t step, const char* what) {
    plan::Buffer b;
    b.id = std::move(id);
    b.size = checked_align_up(bytes, options.alignment, what);
    b.start = static_cast<plan::Time>(step);
    b.end = static_cast<plan::Time>(step + 1);
    b.alignment = options.alignment;
    lt.problem.buffers.push_back(std::move(b));
    lt.tensors_of.emplace_back();
  }

  // Convolution workspaces, SDPA's work buffers and MatMul operand copies.
  void write_step_buffers() {
    if (options.conv_workspace) {
      for (std::size_t st = 0; st < n; ++st) {
        const Node& node = graph.nodes[lt.order[st]];
        if (node.op_type != "Conv") continue;
        std::size_t bytes = conv_workspace_bytes(graph, node, options);
        if (bytes == 0) continue;
        add_step_buffer(node.name + ":workspace", bytes, st, "conv workspace");
        ++lt.workspaces;
      }
    }
    for (const auto& sd : sdpa)
      if (sd.workspace)
        add_step_buffer(graph.nodes[sd.node].name + ":sdpa", sd.workspace, lt.step_of_node[sd.node],
                        "sdpa workspace");
    for (Copy& c : copies) {
      add_step_buffer(std::move(c.id), c.bytes, c.step, "matmul operand copy");
      ++lt.matmul_copies;
    }
  }

  void count_activations() {
    for (std::size_t i = 0; i < graph.tensors.size(); ++i) {
      if (!in_arena(graph.tensors[i])) continue;
      ++lt.activation_count;
      lt.activation_bytes_unshared = checked_add(
          lt.activation_bytes_unshared,
          checked_align_up(size[i], options.alignment, "activation size"), "activation bytes");
    }
  }
};

}  // namespace

Lifetimes build_lifetimes(const Graph& graph, const LifetimeOptions& options) {
  return Builder(graph, options).run();
}

}  // namespace modelmem::model
