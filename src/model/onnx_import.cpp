// ONNX import (model/graph.hpp): the model read with protobuf, shapes inferred with the
// symbolic dims bound, one Graph of tensors and nodes for the planner.
#include <fmt/format.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <tuple>
#include <unordered_map>

#include "model/check_nodes.hpp"
#include "model/complete_shapes.hpp"
#include "model/dims_error.hpp"
#include "model/fold.hpp"
#include "model/fold_value.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"
#include "modelmem/model/graph.hpp"

namespace modelmem::model {
namespace {

using detail::element_size_of;
using onnx::TensorProto;

// Shape inference and folding feed each other (each settled layer exposes the next layer's
// Shape inputs); a transformer settles in about one pass per layer.
constexpr int kMaxInferencePasses = 256;

std::string node_label(const onnx::NodeProto& node, int index) {
  return fmt::format("node '{}' ({})",
                     node.name().empty() ? fmt::format("#{}", index) : node.name(), node.op_type());
}

class Importer {
 public:
  Importer(std::string source, std::string base_dir, const LoadOptions& options)
      : source_(std::move(source)), base_dir_(std::move(base_dir)), options_(options) {}

  Graph run(std::string_view bytes) {
    parse(bytes);
    read_opsets();
    check_operators();
    check_initializers();
    bind_dims();
    order_nodes();
    settle_shapes();
    return build();
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidInput(fmt::format("{}: {}", source_, what));
  }

  void parse(std::string_view bytes) {
    if (bytes.size() > static_cast<std::size_t>(INT_MAX))
      fail("model larger than 2 GiB - 1: keep the weights in external data files");
    if (!model_.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
      fail("not an ONNX model (protobuf parse failed: the file is truncated or of another kind)");
    if (!model_.has_graph() || model_.ir_version() <= 0 || model_.opset_import_size() == 0)
      fail("not an ONNX model (no graph, ir_version or opset_import)");
    if (model_.graph().node_size() == 0) fail("the graph has no nodes");
  }

  void read_opsets() {
    for (const auto& op : model_.opset_import()) {
      std::string domain = op.domain() == "ai.onnx" ? "" : op.domain();
      opsets_[domain] = static_cast<int>(op.version());
    }
    if (!opsets_.count("")) fail("the model imports no opset of the ONNX domain");
  }

  void check_operators() {
    const auto& g = model_.graph();
    for (int i = 0; i < g.node_size(); ++i) {
      const auto& node = g.node(i);
      std::string domain = node.domain() == "ai.onnx" ? "" : node.domain();
      for (const auto& a : node.attribute()) {
        if (a.has_g() || a.graphs_size() > 0)
          fail(
              fmt::format("{}: control flow with subgraphs is not supported", node_label(node, i)));
      }
      auto it = opsets_.find(domain);
      if (it == opsets_.end())
        fail(fmt::format("{}: its domain '{}' is not imported by the model", node_label(node, i),
                         domain));
      const auto* schema = onnx::OpSchemaRegistry::Schema(node.op_type(), it->second, domain);
      if (!schema)
        fail(fmt::format("{}: unknown operator '{}' (domain '{}', opset {})", node_label(node, i),
                         node.op_type(), domain.empty() ? "ai.onnx" : domain, it->second));
      // ONNX's inference functions index inputs and outputs by position (a Split without outputs
      // divided by zero): the counts the operator takes, before inference sees the node.
      for (auto [count, least, most, what] :
           {std::tuple{node.input_size(), schema->min_input(), schema->max_input(), "inputs"},
            std::tuple{node.output_size(), schema->min_output(), schema->max_output(), "outputs"}})
        if (count < least || count > most)
          fail(fmt::format("{}: {} {}; the operator takes {} to {}", node_label(node, i), count,
                           what, least, most));
    }
  }

  // Initializer bytes: element size x elements, overflow-checked with the tensor in the message.
  std::size_t tensor_bytes(const std::string& name, std::int32_t dtype, const auto& dims,
                           const std::string& where) const {
    std::size_t size = element_size_of(dtype);
    if (size == 0)
      fail(fmt::format("tensor '{}' ({}): element type {} has no fixed size", name, where,
                       dtype_name(dtype)));
    for (auto d : dims) {
      if (d < 0) fail(fmt::format("tensor '{}' ({}): negative dim {}", name, where, d));
      if (__builtin_mul_overflow(size, static_cast<std::size_t>(d), &size))
        fail(fmt::format("tensor '{}' ({}): size overflows 64 bits", name, where));
    }
    return size;
  }

  // An initializer's data must be as large as its dims say, or absent (a graph-only model keeps
  // dims and type and drops the data): dims claiming more than the data hold would count
  // weights that are not there.
  void check_initializer_data(const TensorProto& t, std::size_t bytes) const {
    if (const std::string problem = detail::data_length_problem(t, bytes); !problem.empty())
      fail(fmt::format("initializer '{}': {}", t.name(), problem));
  }

  void check_initializers() {
    namespace fs = std::filesystem;
    for (const auto& t : model_.graph().initializer()) {
      initializers_.insert(t.name());
      std::size_t bytes = tensor_bytes(t.name(), t.data_type(), t.dims(), "initializer");
      if (!(t.has_data_location() && t.data_location() == TensorProto::EXTERNAL)) {
        check_initializer_data(t, bytes);
        continue;
      }
      std::string location;
      std::size_t offset = 0, length = bytes;
      for (const auto& kv : t.external_data()) {
        auto number = [&](const std::string& text) {
          std::size_t v = 0;
          auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
          if (ec != std::errc() || p != text.data() + text.size())
            fail(fmt::format("initializer '{}': external data {} '{}' is not a number", t.name(),
                             kv.key(), text));
          return v;
        };
        if (kv.key() == "location") location = kv.value();
        if (kv.key() == "offset") offset = number(kv.value());
        if (kv.key() == "length") length = number(kv.value());
      }
      if (location.empty())
        fail(fmt::format("initializer '{}': external data without a location", t.name()));
      fs::path rel(location);
      if (rel.is_absolute() ||
          std::any_of(rel.begin(), rel.end(), [](const fs::path& p) { return p == ".."; }))
        fail(fmt::format("initializer '{}': external data location '{}' leaves the model's folder",
                         t.name(), location));
      if (base_dir_.empty())
        fail(fmt::format("initializer '{}': external data '{}' but no model folder to find it in",
                         t.name(), location));
      fs::path file = fs::path(base_dir_) / rel;
      std::error_code ec;
      auto size = fs::file_size(file, ec);
      if (ec)
        fail(fmt::format("initializer '{}': external data file '{}' not found", t.name(),
                         file.string()));
      std::size_t end = 0;
      if (__builtin_add_overflow(offset, length, &end) || end > size)
        fail(
            fmt::format("initializer '{}': external data file '{}' holds {} bytes, the tensor "
                        "needs bytes {}..{}",
                        t.name(), file.string(), size, offset, offset + length));
    }
  }

  // Binds every named input dim to its --dim value. Everything wrong is said in one error: each
  // unbound dim (with where it first appears) and each --dim that names no dim of the model.
  void bind_dims() {
    auto* g = model_.mutable_graph();
    std::set<std::string> seen;
    std::vector<std::pair<std::string, std::string>> unbound;  // name, where
    for (auto& input : *g->mutable_input()) {
      if (initializers_.count(input.name())) continue;  // IR < 4 lists weights as inputs too
      if (!input.type().has_tensor_type())
        fail(fmt::format("graph input '{}': only tensor inputs are supported", input.name()));
      if (!input.type().tensor_type().has_shape())
        fail(fmt::format("graph input '{}' has no shape", input.name()));
      auto* shape = input.mutable_type()->mutable_tensor_type()->mutable_shape();
      for (int i = 0; i < shape->dim_size(); ++i) {
        auto* dim = shape->mutable_dim(i);
        if (dim->has_dim_value()) {
          if (dim->dim_value() < 0)
            fail(fmt::format("graph input '{}': dim {} is negative", input.name(), i));
          continue;
        }
        if (!dim->has_dim_param() || dim->dim_param().empty())
          fail(fmt::format("graph input '{}': dim {} is unknown (neither a value nor a name)",
                           input.name(), i));
        const std::string param = dim->dim_param();
        const bool first = seen.insert(param).second;
        auto it = options_.dims.find(param);
        if (it == options_.dims.end()) {
          if (first)
            unbound.emplace_back(param, fmt::format("graph input '{}': dim {}", input.name(), i));
          continue;
        }
        dim->set_dim_value(it->second);
        bound_[param] = it->second;
      }
    }
    std::vector<std::string> unknown;
    if (!options_.ignore_unknown_dims)
      for (const auto& [name, value] : options_.dims)
        if (!seen.count(name)) unknown.push_back(name);
    if (!unbound.empty() || !unknown.empty()) fail(detail::dims_error(unbound, unknown, seen));

    // Inference recomputes intermediate shapes; the declared outputs keep their bound dims and
    // drop the names nobody bound (inference fills them in).
    g->clear_value_info();
    for (auto& out : *g->mutable_output()) {
      if (!out.type().has_tensor_type() || !out.type().tensor_type().has_shape()) continue;
      for (auto& dim : *out.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim()) {
        if (!dim.has_dim_param()) continue;
        auto it = bound_.find(dim.dim_param());
        if (it != bound_.end()) {
          dim.set_dim_value(it->second);
        } else {
          dim.clear_dim_param();
        }
      }
    }
  }

  // Checks inputs and producers; puts the nodes in a topological order (the stored order when it
  // is one, which ONNX requires) and names a cycle when there is none.
  void order_nodes() {
    auto* g = model_.mutable_graph();
    std::unordered_map<std::string, int> producer;
    std::set<std::string> available(initializers_.begin(), initializers_.end());
    for (const auto& in : g->input()) available.insert(in.name());
    for (int i = 0; i < g->node_size(); ++i) {
      for (const auto& out : g->node(i).output()) {
        if (out.empty()) continue;
        if (available.count(out) || !producer.emplace(out, i).second)
          fail(fmt::format("{}: output '{}' is already produced elsewhere",
                           node_label(g->node(i), i), out));
      }
    }
    const int n = g->node_size();
    std::vector<std::vector<int>> deps(n), users(n);
    std::vector<int> missing(n, 0);
    for (int i = 0; i < n; ++i) {
      for (const auto& in : g->node(i).input()) {
        if (in.empty() || available.count(in)) continue;
        auto it = producer.find(in);
        if (it == producer.end())
          fail(fmt::format("{}: input '{}' is not produced by any node, graph input or initializer",
                           node_label(g->node(i), i), in));
        deps[i].push_back(it->second);
        users[it->second].push_back(i);
        ++missing[i];
      }
    }
    // Kahn's algorithm, always taking the lowest stored index: keeps a valid stored order as is.
    std::set<int> ready;
    for (int i = 0; i < n; ++i)
      if (missing[i] == 0) ready.insert(i);
    std::vector<int> order;
    while (!ready.empty()) {
      int v = *ready.begin();
      ready.erase(ready.begin());
      order.push_back(v);
      for (int u : users[v])
        if (--missing[u] == 0) ready.insert(u);
    }
    if (static_cast<int>(order.size()) != n) {
      // Walk backwards along unfinished dependencies until a node repeats: that is a cycle.
      int v = 0;
      while (missing[v] == 0) ++v;
      std::vector<int> path;
      std::vector<int> pos(n, -1);
      while (pos[v] < 0) {
        pos[v] = static_cast<int>(path.size());
        path.push_back(v);
        for (int d : deps[v]) {
          if (missing[d] > 0) {
            v = d;
            break;
          }
        }
      }
      std::string cycle;
      for (std::size_t k = path.size(); k-- > static_cast<std::size_t>(pos[v]);)
        cycle += node_label(g->node(path[k]), path[k]) + " -> ";
      cycle += node_label(g->node(v), v);
      fail("the graph has a cycle: " + cycle);
    }
    if (!std::is_sorted(order.begin(), order.end())) {
      google::protobuf::RepeatedPtrField<onnx::NodeProto> sorted;
      for (int i : order) *sorted.Add() = g->node(i);
      g->mutable_node()->Swap(&sorted);
      reordered_ = true;
    }
  }

  void settle_shapes() {
    // Node-level inference errors are thrown (error_mode 1) so a model that cannot settle says
    // where; data propagation lets ONNX follow the simple Shape chains it knows.
    onnx::ShapeInferenceOptions options(false, 1, true);
    detail::HiddenValues hidden(*model_.mutable_graph());
    for (passes_ = 1; passes_ <= kMaxInferencePasses; ++passes_) {
      try {
        detail::check_graph(model_.graph());
      } catch (const InvalidInput& e) {
        fail(e.what());
      }
      try {
        detail::take_problem();  // none left over from a model that failed on this thread
        onnx::shape_inference::InferShapes(model_, &detail::checking_registry(), options);
      } catch (const std::exception& e) {
        std::string msg = e.what();
        while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
        fail("shape inference failed: " + msg);
      }
      if (const std::string problem = detail::take_problem(); !problem.empty()) {
        try {
          detail::check_graph(model_.graph());  // names the node whose inference was skipped
        } catch (const InvalidInput& e) {
          fail(e.what());
        }
        fail(problem);
      }
      std::size_t n = 0;
      try {
        n = detail::fold_constants(*model_.mutable_graph(), opsets_, folded_);
      } catch (const InvalidInput& e) {
        fail(e.what());  // a node the folding pass refused (check_nodes.hpp), named
      }
      folded_nodes_ += n;
      if (n + detail::complete_shapes(*model_.mutable_graph()) == 0) break;
    }
    hidden.restore();
  }

  Graph build() {
    const auto& g = model_.graph();
    Graph graph;
    graph.source = source_;
    graph.dims = bound_;
    graph.folded_nodes = folded_nodes_;
    graph.inference_passes = passes_;
    std::unordered_map<std::string, int> index;
    std::unordered_map<std::string, const onnx::TypeProto*> types;
    for (const auto& vi : g.value_info()) types[vi.name()] = &vi.type();
    for (const auto& vi : g.output()) types[vi.name()] = &vi.type();
    for (const auto& vi : g.input()) types[vi.name()] = &vi.type();

    auto add = [&](const std::string& name, TensorKind kind) {
      auto [it, fresh] = index.emplace(name, static_cast<int>(graph.tensors.size()));
      if (fresh) {
        Tensor t;
        t.name = name;
        t.kind = kind;
        graph.tensors.push_back(std::move(t));
      }
      return it->second;
    };
    for (const auto& t : g.initializer()) {
      int i = add(t.name(), folded_.count(t.name()) ? TensorKind::kConstant : TensorKind::kWeight);
      auto& tensor = graph.tensors[i];
      tensor.dtype = t.data_type();
      tensor.element_size = element_size_of(t.data_type());
      tensor.shape.assign(t.dims().begin(), t.dims().end());
      tensor.bytes =
          tensor_bytes(t.name(), t.data_type(), t.dims(),
                       tensor.kind == TensorKind::kWeight ? "initializer" : "folded constant");
      if (tensor.kind == TensorKind::kConstant)
        if (auto v = detail::from_tensor(t); v && !v->is_real() && !v->ints.empty())
          tensor.max_value = *std::max_element(v->ints.begin(), v->ints.end());
    }
    for (const auto& in : g.input()) {
      if (!initializers_.count(in.name())) add(in.name(), TensorKind::kInput);
    }
    for (int n = 0; n < g.node_size(); ++n) {
      const auto& node = g.node(n);
      Node out;
      out.name = node.name().empty() ? fmt::format("#{}", n) : node.name();
      out.op_type = node.op_type();
      out.domain = node.domain() == "ai.onnx" ? "" : node.domain();
      for (const auto& a : node.attribute()) {
        if (a.name() == "perm" && out.op_type == "Transpose")
          out.perm.assign(a.ints().begin(), a.ints().end());
        else if (a.name() == "axis" && out.op_type == "Gather")
          out.axis = a.i();
      }
      for (const auto& name : node.input()) {
        if (name.empty()) {
          out.inputs.push_back(-1);
          continue;
        }
        int t = index.at(name);  // order_nodes() proved every input exists before its use
        graph.tensors[t].consumers.push_back(n);
        out.inputs.push_back(t);
      }
      for (const auto& name : node.output()) {
        if (name.empty()) {
          out.outputs.push_back(-1);
          continue;
        }
        int t = add(name, TensorKind::kActivation);
        graph.tensors[t].producer = n;
        out.outputs.push_back(t);
      }
      graph.nodes.push_back(std::move(out));
    }
    for (const auto& o : g.output()) {
      auto it = index.find(o.name());
      if (it == index.end())
        fail(fmt::format("graph output '{}' is not produced by any node or input", o.name()));
      graph.tensors[it->second].graph_output = true;
    }
    for (auto& t : graph.tensors) {
      if (t.kind != TensorKind::kActivation && t.kind != TensorKind::kInput) continue;
      std::string where = t.producer >= 0 ? "output of " + graph.describe_node(t.producer)
                                          : std::string("graph input");
      auto it = types.find(t.name);
      if (it == types.end() || !it->second->has_tensor_type())
        fail(fmt::format("tensor '{}' ({}): shape inference found no tensor type", t.name, where));
      const auto& tt = it->second->tensor_type();
      if (!tt.has_shape())
        fail(fmt::format("tensor '{}' ({}): shape inference could not settle its shape", t.name,
                         where));
      std::vector<std::int64_t> dims;
      for (int d = 0; d < tt.shape().dim_size(); ++d) {
        const auto& dim = tt.shape().dim(d);
        if (!dim.has_dim_value()) {
          fail(fmt::format("tensor '{}' ({}): dim {} {} (bind the model's dims with --dim)", t.name,
                           where, d,
                           dim.has_dim_param() ? "is symbolic '" + dim.dim_param() + "'"
                                               : std::string("could not be settled")));
        }
        dims.push_back(dim.dim_value());
      }
      t.dtype = tt.elem_type();
      t.element_size = element_size_of(t.dtype);
      t.shape = dims;
      t.bytes = tensor_bytes(t.name, t.dtype, dims, where);
    }
    check_concat_sums(graph);
    return graph;
  }

  // ONNX's shape inference adds Concat's dims in 64-bit signed arithmetic, which wraps (64 x
  // 2^58 gives 0): the sum is redone here, overflow-checked, with the node named.
  void check_concat_sums(const Graph& graph) const {
    const auto& g = model_.graph();
    for (int n = 0; n < g.node_size(); ++n) {
      const auto& node = g.node(n);
      const Node& ours = graph.nodes[static_cast<std::size_t>(n)];
      if (node.op_type() != "Concat" || ours.outputs.empty()) continue;
      std::int64_t axis = 0;
      for (const auto& a : node.attribute())
        if (a.name() == "axis") axis = a.i();
      std::int64_t sum = 0;
      for (int t : ours.inputs) {
        if (t < 0) continue;
        const auto& shape = graph.tensors[static_cast<std::size_t>(t)].shape;
        const auto rank = static_cast<std::int64_t>(shape.size());
        const std::int64_t a = axis < 0 ? axis + rank : axis;
        if (a < 0 || a >= rank) continue;  // inference refused such a node already
        if (__builtin_add_overflow(sum, shape[static_cast<std::size_t>(a)], &sum))
          fail(
              fmt::format("{}: the output's dim {} (the sum of the inputs' dims) overflows 64 "
                          "bits",
                          graph.describe_node(n), axis));
      }
    }
  }

  std::string source_;
  std::string base_dir_;
  const LoadOptions& options_;
  onnx::ModelProto model_;
  std::map<std::string, int> opsets_;
  std::set<std::string> initializers_;
  std::set<std::string> folded_;
  std::map<std::string, std::int64_t> bound_;
  std::size_t folded_nodes_ = 0;
  int passes_ = 0;
  bool reordered_ = false;
};

}  // namespace

std::string Graph::describe_node(int node) const {
  if (node < 0 || node >= static_cast<int>(nodes.size())) return "no node";
  return fmt::format("node '{}' ({})", nodes[node].name, nodes[node].op_type);
}

int Graph::find_tensor(std::string_view name) const {
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name) return static_cast<int>(i);
  return -1;
}

Graph load_onnx_bytes(std::string_view bytes, const std::string& source,
                      const std::string& base_dir, const LoadOptions& options) {
  return Importer(source, base_dir, options).run(bytes);
}

Graph load_onnx(const std::string& path, const LoadOptions& options) {
  // A file past protobuf's 2 GiB is refused by its size, before a byte of it is read.
  const std::string bytes = core::read_input_file(path, "ONNX model", core::kMaxModelInput);
  std::string dir = std::filesystem::path(path).parent_path().string();
  return load_onnx_bytes(bytes, path, dir.empty() ? "." : dir, options);
}

std::pair<std::string, std::int64_t> parse_dim(const std::string& text) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InvalidInput(fmt::format("--dim '{}': expected NAME=VALUE", text));
  std::string name = text.substr(0, eq), value = text.substr(eq + 1);
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || p != value.data() + value.size() || v <= 0)
    throw InvalidInput(fmt::format("--dim '{}': value must be a positive integer", text));
  return {name, v};
}

std::string dtype_name(std::int32_t dtype) {
  switch (dtype) {
    case TensorProto::FLOAT:
      return "float32";
    case TensorProto::UINT8:
      return "uint8";
    case TensorProto::INT8:
      return "int8";
    case TensorProto::UINT16:
      return "uint16";
    case TensorProto::INT16:
      return "int16";
    case TensorProto::INT32:
      return "int32";
    case TensorProto::INT64:
      return "int64";
    case TensorProto::STRING:
      return "string";
    case TensorProto::BOOL:
      return "bool";
    case TensorProto::FLOAT16:
      return "float16";
    case TensorProto::DOUBLE:
      return "float64";
    case TensorProto::UINT32:
      return "uint32";
    case TensorProto::UINT64:
      return "uint64";
    case TensorProto::COMPLEX64:
      return "complex64";
    case TensorProto::COMPLEX128:
      return "complex128";
    case TensorProto::BFLOAT16:
      return "bfloat16";
    default:
      return fmt::format("type {}", dtype);
  }
}

}  // namespace modelmem::model
