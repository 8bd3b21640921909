// The constant-folding pass (model/fold.hpp): walks the nodes in order, evaluates each one whose
// inputs are known with the kernels of fold_value.hpp, turns its outputs into initializers and
// removes it.
#include "model/fold.hpp"

#include "model/complete_shapes.hpp"

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include "model/check_nodes.hpp"
#include "model/fold_value.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::model::detail {
namespace {

using onnx::TensorProto;

using ShapeOf = std::function<std::optional<Dims>(const std::string&)>;

// Evaluates one node. `in` holds the known input values (nullptr when unknown or omitted).
std::optional<std::vector<Value>> evaluate(const onnx::NodeProto& node, int opset,
                                           const std::vector<const Value*>& in,
                                           const ShapeOf& shape_of) {
  const std::string& op = node.op_type();
  auto all_known = [&](std::size_t from = 0) {
    for (std::size_t i = from; i < in.size(); ++i)
      if (!in[i] && !node.input(static_cast<int>(i)).empty()) return false;
    return !in.empty();
  };
  auto one = [](std::optional<Value> v) -> std::optional<std::vector<Value>> {
    if (!v) return std::nullopt;
    return std::vector<Value>{std::move(*v)};
  };
  if (op == "Constant") return one(constant_value(node));
  if (op == "Shape" || op == "Size") {
    if (node.input_size() != 1) return std::nullopt;
    auto dims = shape_of(node.input(0));
    if (!dims) return std::nullopt;
    if (op == "Size") {
      std::int64_t n = 1;
      for (auto d : *dims)
        if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
      return one(make_ints({}, {n}));
    }
    auto r = static_cast<std::int64_t>(dims->size());
    std::int64_t start = int_attribute(node, "start", 0), end = int_attribute(node, "end", r);
    if (start < 0) start = std::max<std::int64_t>(start + r, 0);
    if (end < 0) end = std::max<std::int64_t>(end + r, 0);
    start = std::min(start, r);
    end = std::min(end, r);
    std::vector<std::int64_t> vals;
    for (std::int64_t i = start; i < end; ++i) vals.push_back((*dims)[i]);
    return one(make_ints({static_cast<std::int64_t>(vals.size())}, vals));
  }
  if (!all_known()) return std::nullopt;
  // An omitted input ("") is absent, not known: only the optional ones may be (a ConstantOfShape
  // whose shape was omitted dereferenced nothing).
  for (std::size_t i = 0; i < in.size(); ++i)
    if (in[i] == nullptr && !((op == "Slice" && i >= 3) || (op == "Squeeze" && i == 1)))
      return std::nullopt;
  if (op == "Identity" || op == "Neg" || op == "Abs" || op == "Sqrt" || op == "Floor" ||
      op == "Ceil" || op == "Reciprocal" || op == "Not")
    return in.size() == 1 ? one(unary(op, *in[0])) : std::nullopt;
  if (op == "Cast")
    return in.size() == 1 ? one(cast(*in[0], int_attribute(node, "to", 0))) : std::nullopt;
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Equal" || op == "Less" ||
      op == "Greater" || op == "And" || op == "Or" || op == "Pow" ||
      ((op == "Max" || op == "Min") && in.size() >= 1)) {
    if (in.size() < 2) return in.size() == 1 ? one(*in[0]) : std::nullopt;
    std::optional<Value> acc = binary(op, *in[0], *in[1]);
    for (std::size_t i = 2; acc && i < in.size(); ++i) acc = binary(op, *acc, *in[i]);
    return one(std::move(acc));
  }
  if (op == "Mod" && in.size() == 2)
    return one(binary(int_attribute(node, "fmod", 0) != 0 ? "FMod" : "Mod", *in[0], *in[1]));
  if (op == "Transpose" && in.size() == 1)
    return one(transpose(*in[0], ints_attribute(node, "perm")));
  if (op == "Gather") {
    return in.size() == 2 ? one(gather(*in[0], *in[1], int_attribute(node, "axis", 0)))
                          : std::nullopt;
  }
  if (op == "Unsqueeze" || op == "Squeeze") {
    std::optional<Dims> axes;
    if (opset >= 13) {
      if (in.size() >= 2 && in[1]) axes = Dims(in[1]->ints.begin(), in[1]->ints.end());
    } else {
      axes = ints_attribute(node, "axes");
    }
    if (op == "Unsqueeze") return axes ? one(unsqueeze(*in[0], *axes)) : std::nullopt;
    return one(squeeze(*in[0], axes));
  }
  if (op == "Concat") return one(concat(in, int_attribute(node, "axis", 0)));
  if (op == "Slice") {
    if (opset < 10) {
      auto starts = ints_attribute(node, "starts"), ends = ints_attribute(node, "ends");
      if (!starts || !ends || in.size() != 1) return std::nullopt;
      return one(slice(*in[0], *starts, *ends, ints_attribute(node, "axes"), std::nullopt));
    }
    if (in.size() < 3) return std::nullopt;
    auto ints_of = [&](std::size_t i) -> std::optional<Dims> {
      if (i >= in.size() || !in[i]) return std::nullopt;
      return Dims(in[i]->ints.begin(), in[i]->ints.end());
    };
    if (in[1]->is_real() || in[2]->is_real()) return std::nullopt;
    return one(slice(*in[0], *ints_of(1), *ints_of(2), ints_of(3), ints_of(4)));
  }
  if (op == "Reshape" && in.size() == 2)
    return one(reshape(*in[0], *in[1], int_attribute(node, "allowzero", 0) != 0));
  if (op == "Range" && in.size() == 3) return one(range(*in[0], *in[1], *in[2]));
  if (op == "Expand" && in.size() == 2) return one(expand(*in[0], *in[1]));
  if (op == "Where" && in.size() == 3) return one(where(*in[0], *in[1], *in[2]));
  if (op == "ConstantOfShape" && in.size() == 1) {
    if (in[0]->is_real()) return std::nullopt;
    Dims dims(in[0]->ints.begin(), in[0]->ints.end());
    auto n = element_count(dims);
    if (!n) return std::nullopt;
    Value fill;
    fill.dtype = TensorProto::FLOAT;
    fill.reals = {0.0};
    if (const auto* a = attribute(node, "value")) {
      auto v = from_tensor(a->t());
      if (!v || v->count() != 1) return std::nullopt;
      fill = *v;
    }
    Value r;
    r.dtype = fill.dtype;
    r.dims = dims;
    if (r.is_real()) {
      r.reals.assign(*n, fill.reals[0]);
    } else {
      r.ints.assign(*n, fill.ints[0]);
    }
    return one(std::move(r));
  }
  return std::nullopt;
}

// The output types of one node that was not folded, from the node's own ONNX inference function
// run on the types and constant inputs known so far in this walk (the same function the next
// whole-graph pass would run). A Shape node further down then folds in this walk instead of a
// later pass: a model whose reshape targets hang on padding or window arithmetic (Swin's
// Mod/Sub/Div chains, MaxViT's Einsum) settles in two or three passes instead of dozens.
// Anything the function cannot settle is left to the whole-graph pass, which reports errors.
void infer_node(const onnx::NodeProto& node, int opset,
                std::unordered_map<std::string, onnx::TypeProto>& types,
                const std::unordered_map<std::string, const TensorProto*>& data,
                std::unordered_map<std::string, Dims>& shapes) {
  bool missing = false;
  for (const auto& o : node.output()) missing = missing || (!o.empty() && !shapes.count(o));
  if (!missing) return;
  std::vector<Dims> in_dims;
  std::unordered_map<std::string, onnx::TypeProto*> in_types;
  for (const auto& name : node.input()) {
    if (name.empty()) continue;
    auto it = types.find(name);
    if (it == types.end()) return;  // an input of unknown type: leave it to the pass
    in_types.emplace(name, &it->second);
    auto d = shapes.find(name);
    in_dims.push_back(d == shapes.end() ? Dims{} : d->second);
  }
  if (node.op_type() == "Einsum" && node.output_size() == 1 && node.domain().empty()) {
    // ONNX 1.12 infers an Einsum's rank only (complete_shapes.hpp).
    for (const auto& a : node.attribute()) {
      if (a.name() != "equation") continue;
      if (auto d = einsum_dims(a.s(), in_dims)) {
        auto it = types.find(node.input(0));
        onnx::TypeProto t;
        t.mutable_tensor_type()->set_elem_type(it->second.tensor_type().elem_type());
        for (auto v : *d) t.mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(v);
        types[node.output(0)] = std::move(t);
        shapes[node.output(0)] = std::move(*d);
      }
    }
    return;
  }
  const auto* schema = onnx::OpSchemaRegistry::Schema(node.op_type(), opset, node.domain());
  if (!schema || !schema->has_type_and_shape_inference_function()) return;
  // ONNX's inference function trusts the node: refused here with its name (check_nodes.hpp).
  check_node(node, KnownInputs{[&](const std::string& name) -> const Dims* {
                                 auto it = shapes.find(name);
                                 return it == shapes.end() ? nullptr : &it->second;
                               },
                               [&](const std::string& name) -> const TensorProto* {
                                 auto it = data.find(name);
                                 return it == data.end() ? nullptr : it->second;
                               }});
  onnx::NodeProto copy = node;
  const std::unordered_map<std::string, const onnx::SparseTensorProto*> no_sparse;
  onnx::shape_inference::InferenceContextImpl ctx(copy, in_types, data, no_sparse);
  try {
    schema->GetTypeAndShapeInferenceFunction()(ctx);
  } catch (...) {
    return;  // the whole-graph pass says what is wrong
  }
  for (int o = 0; o < node.output_size(); ++o) {
    const auto& name = node.output(o);
    const onnx::TypeProto* t = ctx.getOutputType(static_cast<std::size_t>(o));
    if (name.empty() || !t || !t->has_tensor_type() || t->tensor_type().elem_type() == 0) continue;
    auto d = static_dims(*t);
    if (!d) continue;
    types[name] = *t;
    shapes[name] = std::move(*d);
  }
}

onnx::TypeProto type_of(const TensorProto& t) {
  onnx::TypeProto type;
  type.mutable_tensor_type()->set_elem_type(t.data_type());
  auto* shape = type.mutable_tensor_type()->mutable_shape();
  for (auto d : t.dims()) shape->add_dim()->set_dim_value(d);
  return type;
}

}  // namespace

std::size_t fold_constants(onnx::GraphProto& graph, const std::map<std::string, int>& opsets,
                           std::set<std::string>& folded) {
  std::unordered_map<std::string, Value> known;
  std::unordered_map<std::string, Dims> shapes;
  // For infer_node(): the types known so far and the constant tensors (initializers, and the
  // values folded in this walk, kept in a deque so that the pointers stay valid).
  std::unordered_map<std::string, onnx::TypeProto> types;
  std::unordered_map<std::string, const TensorProto*> data;
  for (const auto& t : graph.initializer()) {
    shapes[t.name()] = Dims(t.dims().begin(), t.dims().end());
    if (auto v = from_tensor(t)) known.emplace(t.name(), std::move(*v));
    types.emplace(t.name(), type_of(t));
    data.emplace(t.name(), &t);
  }
  auto add_shapes = [&](const auto& infos) {
    for (const auto& vi : infos) {
      if (vi.type().has_tensor_type()) types.emplace(vi.name(), vi.type());
      if (auto d = static_dims(vi.type())) shapes.emplace(vi.name(), std::move(*d));
    }
  };
  add_shapes(graph.input());
  add_shapes(graph.value_info());
  add_shapes(graph.output());
  ShapeOf shape_of = [&](const std::string& name) -> std::optional<Dims> {
    auto it = shapes.find(name);
    if (it == shapes.end()) return std::nullopt;
    return it->second;
  };
  auto opset_of = [&](const std::string& domain) {
    auto it = opsets.find(domain == "ai.onnx" ? "" : domain);
    return it == opsets.end() ? 0 : it->second;
  };

  std::vector<bool> remove(static_cast<std::size_t>(graph.node_size()), false);
  std::deque<TensorProto> added;
  auto add = [&](TensorProto t) {
    added.push_back(std::move(t));
    const TensorProto& a = added.back();
    types[a.name()] = type_of(a);
    data[a.name()] = &a;
  };
  std::size_t count = 0;
  for (int n = 0; n < graph.node_size(); ++n) {
    const auto& node = graph.node(n);
    if (!node.domain().empty() && node.domain() != "ai.onnx") continue;
    std::vector<const Value*> in;
    for (const auto& name : node.input()) {
      auto it = known.find(name);
      in.push_back(name.empty() || it == known.end() ? nullptr : &it->second);
    }
    std::optional<std::vector<Value>> out;
    try {
      out = evaluate(node, opset_of(node.domain()), in, shape_of);
    } catch (const InvalidInput& e) {
      throw InvalidInput(describe(node) + ": " + e.what());
    }
    if (!out && node.op_type() == "Constant" && node.output_size() == 1) {
      // A Constant of a type this pass does not compute with (float16, int8...) still becomes
      // an initializer: its value is fixed, it is no activation.
      if (const auto* a = attribute(node, "value")) {
        TensorProto t = a->t();
        t.set_name(node.output(0));
        add(std::move(t));
        folded.insert(node.output(0));
        remove[n] = true;
        ++count;
      }
      continue;
    }
    if (!out || static_cast<int>(out->size()) != node.output_size()) {
      infer_node(node, opset_of(node.domain()), types, data, shapes);
      continue;
    }
    for (int o = 0; o < node.output_size(); ++o) {
      const std::string& name = node.output(o);
      shapes[name] = (*out)[o].dims;
      add(to_tensor((*out)[o], name));
      folded.insert(name);
      known[name] = std::move((*out)[o]);
    }
    remove[n] = true;
    ++count;
  }
  if (count == 0) return 0;
  auto* nodes = graph.mutable_node();
  int w = 0;
  for (int r = 0; r < nodes->size(); ++r) {
    if (remove[r]) continue;
    if (w != r) nodes->SwapElements(w, r);
    ++w;
  }
  while (nodes->size() > w) nodes->RemoveLast();
  for (auto& t : added) *graph.add_initializer() = std::move(t);
  // Stale value_info of folded tensors would conflict with nothing, but drop it to keep the
  // graph consistent: a folded tensor is now an initializer.
  auto* vi = graph.mutable_value_info();
  for (int i = vi->size(); i-- > 0;) {
    if (folded.count(vi->Get(i).name())) vi->DeleteSubrange(i, 1);
  }
  return count;
}

}  // namespace modelmem::model::detail
