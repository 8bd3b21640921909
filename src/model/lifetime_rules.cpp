// The rules of model/lifetimes.cpp that say which tensors live longer and which share memory in
// PyTorch eager: a module's arguments held to its end, operators that run as one (a leaf
// module's elementwise nodes), activations written in place (elementwise ops, the one after an
// unfolded norm, F.linear's bias added into its product), and the operator classes the plan's
// aliasing and in-place passes ask about.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "model/eager_rules.hpp"
#include "modelmem/model/lifetimes.hpp"

namespace modelmem::model {
namespace detail {
namespace {

// The module scopes of a node named by torch.onnx ("/a/b/c/Conv" -> "a", "a/b", "a/b/c").
std::vector<std::string> scopes_of(const std::string& name) {
  std::vector<std::string> out;
  if (name.size() < 2 || name[0] != '/') return out;
  std::size_t end = name.rfind('/');
  for (std::size_t p = name.find('/', 1); p != std::string::npos && p <= end;
       p = name.find('/', p + 1))
    out.push_back(name.substr(1, p - 1));
  return out;
}

bool fusable_op(const std::string& op) {
  return is_in_place_op(op) || op == "ReduceMean" || op == "Softmax";
}

}  // namespace

// A tensor consumed inside a module it was not produced in is an argument of that module: it
// lives to the module's last step.
void extend_to_module_ends(const Graph& graph, const std::vector<std::size_t>& step_of_node,
                           std::vector<std::size_t>& last) {
  std::map<std::string, std::size_t> module_end;
  std::vector<std::vector<std::string>> scopes(graph.nodes.size());
  for (std::size_t v = 0; v < graph.nodes.size(); ++v) {
    scopes[v] = scopes_of(graph.nodes[v].name);
    for (const auto& s : scopes[v]) {
      auto [it, fresh] = module_end.emplace(s, step_of_node[v]);
      if (!fresh) it->second = std::max(it->second, step_of_node[v]);
    }
  }
  const std::size_t graph_end = step_of_node.empty() ? 0 : step_of_node.size() - 1;
  for (std::size_t i = 0; i < graph.tensors.size(); ++i) {
    const Tensor& t = graph.tensors[i];
    if (!in_arena(t)) continue;
    static const std::vector<std::string> kNone;
    const auto& produced_in = t.producer >= 0 ? scopes[t.producer] : kNone;
    for (int c : t.consumers) {
      for (const auto& s : scopes[c]) {
        if (std::find(produced_in.begin(), produced_in.end(), s) != produced_in.end()) continue;
        last[i] = std::max(last[i], module_end[s]);
      }
      // A concatenation made by the module's own code (not inside a sub-module) and passed into
      // a sub-module: torch.cat's result is bound to a local of the forward (DenseNet's
      // `concated_features = torch.cat(inputs, 1)`, then norm, relu and conv), or of its caller
      // (Inception's transformed input), which Python holds until the forward returns. Other
      // tensors passed straight into a sub-module are mostly temporaries (`self.norm(x + y)`),
      // freed when it returns; a graph cannot tell a bound local from a temporary.
      if (t.producer < 0 || graph.nodes[t.producer].op_type != "Concat") continue;
      const std::size_t depth = produced_in.size();
      if (scopes[c].size() > depth &&
          std::equal(produced_in.begin(), produced_in.end(), scopes[c].begin()))
        last[i] = std::max(last[i], depth == 0 ? graph_end : module_end[produced_in.back()]);
    }
  }
}

// The tensors PyTorch never allocates because one operator computes what the export spelled as
// several nodes: inside a leaf module (a scope with no sub-scopes, such as nn.SiLU, nn.GELU or
// nn.LayerNorm, exported as Sigmoid+Mul, Div+Erf+Add+Mul+Mul, ReduceMean+Sub+Pow+...) whose
// nodes are all elementwise, reductions or layout ops, a tensor made by an elementwise or
// reduction node and used only inside that module is internal to the one PyTorch operator.
// Except a tanh GELU written out in Python (transformers' NewGELUActivation, GPT-2's
// `gelu_new`: `0.5 * x * (1 + torch.tanh(c * (x + 0.044715 * torch.pow(x, 3))))`), whose
// module has a Pow and a Tanh: each of its operators allocates its output (4 tensors of x's
// size live at once, measured under PyTorch 2.13). torch's own F.gelu(approximate="tanh")
// exports its cube as two Muls, and LayerNorm's Pow comes without a Tanh.
std::vector<bool> fused_in_leaf_modules(const Graph& graph) {
  std::vector<bool> fused(graph.tensors.size(), false);
  std::vector<std::string> leaf(graph.nodes.size());
  std::map<std::string, bool> is_leaf;     // deepest scope -> no deeper scope, only fusable nodes
  std::map<std::string, int> python_gelu;  // scope -> bit 1: a Pow, bit 2: a Tanh
  for (std::size_t v = 0; v < graph.nodes.size(); ++v) {
    auto scopes = scopes_of(graph.nodes[v].name);
    if (scopes.empty()) continue;
    leaf[v] = scopes.back();
    const std::string& op = graph.nodes[v].op_type;
    bool ok = fusable_op(op) || op == "Transpose" || is_alias_op(op);
    auto [it, fresh] = is_leaf.emplace(leaf[v], ok);
    if (!fresh) it->second = it->second && ok;
    for (std::size_t k = 0; k + 1 < scopes.size(); ++k) is_leaf[scopes[k]] = false;
    if (op == "Pow") python_gelu[leaf[v]] |= 1;
    if (op == "Tanh") python_gelu[leaf[v]] |= 2;
  }
  for (const auto& [scope, bits] : python_gelu)
    if (bits == 3) is_leaf[scope] = false;
  for (std::size_t i = 0; i < graph.tensors.size(); ++i) {
    const Tensor& t = graph.tensors[i];
    if (!in_arena(t) || t.graph_output || t.producer < 0 || t.consumers.empty()) continue;
    const std::string& s = leaf[t.producer];
    if (s.empty() || !is_leaf[s] || !fusable_op(graph.nodes[t.producer].op_type)) continue;
    bool inside =
        std::all_of(t.consumers.begin(), t.consumers.end(), [&](int c) { return leaf[c] == s; });
    fused[i] = inside;
  }
  return fused;
}

// An activation module after a BatchNormalization the export could not fold into a Conv (the
// norm comes first: DenseNet's norm -> relu -> conv): torchvision builds these activations with
// inplace=True, so PyTorch writes them into the norm's output. After a Conv the export folded the
// norm away and PyTorch allocates the norm's output the graph lacks, which the activation's own
// buffer stands for.
bool after_norm(const Graph& graph, const Node& node) {
  static const std::set<std::string> kActivations = {"Relu", "Clip", "LeakyRelu", "HardSwish",
                                                     "Elu"};
  if (!kActivations.count(node.op_type) || node.inputs.empty() || node.inputs[0] < 0) return false;
  const int p = graph.tensors[node.inputs[0]].producer;
  return p >= 0 && graph.nodes[p].op_type == "BatchNormalization";
}

// nn.Linear on an input of rank > 2: torch.onnx writes MatMul(x, W^T) and Add(bias, product)
// as the only nodes of the Linear's leaf module scope; PyTorch 1.13 makes one output (addmm on
// the flattened input for rank 3, matmul then add_ in place above it). Returns per node the
// product tensor such an Add writes into, or -1. Nodes whose outputs are not activations (a
// folded transpose of the weight) do not count in the scope.
std::vector<int> linear_bias_adds(const Graph& graph) {
  std::vector<int> into(graph.nodes.size(), -1);
  std::vector<std::string> leaf(graph.nodes.size());
  std::map<std::string, int> working;  // deepest scope -> nodes making activations
  std::set<std::string> inner;         // scopes with sub-scopes
  for (std::size_t v = 0; v < graph.nodes.size(); ++v) {
    auto scopes = scopes_of(graph.nodes[v].name);
    if (scopes.empty()) continue;
    leaf[v] = scopes.back();
    for (std::size_t k = 0; k + 1 < scopes.size(); ++k) inner.insert(scopes[k]);
    const auto& outs = graph.nodes[v].outputs;
    if (std::any_of(outs.begin(), outs.end(),
                    [&](int o) { return o >= 0 && !fixed_tensor(graph, o); }))
      ++working[leaf[v]];
  }
  for (std::size_t v = 0; v < graph.nodes.size(); ++v) {
    const Node& add = graph.nodes[v];
    if (add.op_type != "Add" || add.inputs.size() != 2 || leaf[v].empty() ||
        working[leaf[v]] != 2 || inner.count(leaf[v]))
      continue;
    for (int k = 0; k < 2; ++k) {
      const int prod = add.inputs[k], bias = add.inputs[1 - k];
      if (prod < 0 || bias < 0 || !fixed_tensor(graph, bias)) continue;
      const Tensor& t = graph.tensors[prod];
      if (t.producer < 0 || t.graph_output || t.consumers.size() != 1 ||
          leaf[t.producer] != leaf[v])
        continue;
      const Node& mm = graph.nodes[t.producer];
      if (mm.op_type != "MatMul" || mm.inputs.size() != 2 || !fixed_tensor(graph, mm.inputs[1]))
        continue;
      into[v] = prod;
    }
  }
  return into;
}

}  // namespace detail

bool is_in_place_op(const std::string& op) {
  static const std::set<std::string> kOps = {"Relu",
                                             "LeakyRelu",
                                             "PRelu",
                                             "Sigmoid",
                                             "Tanh",
                                             "Elu",
                                             "Selu",
                                             "Celu",
                                             "HardSigmoid",
                                             "HardSwish",
                                             "Softplus",
                                             "Softsign",
                                             "ThresholdedRelu",
                                             "Erf",
                                             "Exp",
                                             "Log",
                                             "Neg",
                                             "Abs",
                                             "Sqrt",
                                             "Reciprocal",
                                             "Floor",
                                             "Ceil",
                                             "Round",
                                             "Sign",
                                             "Sin",
                                             "Cos",
                                             "Clip",
                                             "Not",
                                             "Add",
                                             "Sub",
                                             "Mul",
                                             "Div",
                                             "Pow",
                                             "Max",
                                             "Min",
                                             "Sum",
                                             "Mean",
                                             "And",
                                             "Or",
                                             "Xor",
                                             "Mish"};
  return kOps.count(op) > 0;
}

bool is_alias_op(const std::string& op) {
  return op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze" ||
         op == "Identity";
}

std::size_t activation_bytes(const Tensor& t, std::size_t float_bytes) {
  if (t.dtype != onnx::TensorProto::FLOAT || float_bytes == 4 || t.element_size == 0)
    return t.bytes;
  return t.bytes / t.element_size * float_bytes;
}

}  // namespace modelmem::model
