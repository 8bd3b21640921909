// The whole-graph side of the node checks (model/check_nodes.hpp): check_graph over every node,
// the initializers without values hidden from shape inference, and the schema registry whose
// wrapped inference functions check a node inside ONNX's own pass.
#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/check_nodes.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::model::detail {

using GuardDims = std::vector<std::int64_t>;

void check_graph(const onnx::GraphProto& g) {
  std::unordered_map<std::string, GuardDims> dims;
  std::unordered_map<std::string, const onnx::TensorProto*> data;
  auto add_dims = [&](const auto& infos) {
    for (const auto& vi : infos) {
      if (!vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape()) continue;
      GuardDims d;
      for (const auto& dim : vi.type().tensor_type().shape().dim()) {
        if (!dim.has_dim_value()) break;
        d.push_back(dim.dim_value());
      }
      if (d.size() == static_cast<std::size_t>(vi.type().tensor_type().shape().dim_size()))
        dims.emplace(vi.name(), std::move(d));
    }
  };
  for (const auto& t : g.initializer()) {
    dims.emplace(t.name(), GuardDims(t.dims().begin(), t.dims().end()));
    data.emplace(t.name(), &t);
  }
  add_dims(g.input());
  add_dims(g.value_info());
  add_dims(g.output());
  for (const auto& node : g.node())
    if (node.op_type() == "Constant" && node.output_size() == 1)
      for (const auto& a : node.attribute())
        if (a.name() == "value" && a.has_t()) data.emplace(node.output(0), &a.t());
  const KnownInputs known{[&](const std::string& name) -> const GuardDims* {
                            auto it = dims.find(name);
                            return it == dims.end() ? nullptr : &it->second;
                          },
                          [&](const std::string& name) -> const onnx::TensorProto* {
                            auto it = data.find(name);
                            return it == data.end() ? nullptr : it->second;
                          }};
  for (const auto& node : g.node()) check_node(node, known);
}

HiddenValues::HiddenValues(onnx::GraphProto& g) : graph_(g) {
  std::set<std::string> inputs;
  for (const auto& in : g.input()) inputs.insert(in.name());
  auto* list = g.mutable_initializer();
  for (const auto& t : *list) order_.push_back(t.name());
  for (int i = list->size(); i-- > 0;) {
    if (has_values(list->Get(i))) continue;
    list->SwapElements(i, list->size() - 1);
    hidden_.emplace_back(list->ReleaseLast());
    const onnx::TensorProto& t = *hidden_.back();
    if (inputs.count(t.name())) continue;  // IR < 4 lists weights as inputs too
    auto* tt = g.add_input();
    tt->set_name(t.name());
    auto* type = tt->mutable_type()->mutable_tensor_type();
    type->set_elem_type(t.data_type());
    auto* shape = type->mutable_shape();
    for (auto d : t.dims()) shape->add_dim()->set_dim_value(d);
    ++added_inputs_;
  }
}

void HiddenValues::restore() {
  for (; added_inputs_ > 0; --added_inputs_) graph_.mutable_input()->RemoveLast();
  auto* list = graph_.mutable_initializer();
  for (auto& t : hidden_) list->AddAllocated(t.release());
  hidden_.clear();
  std::unordered_map<std::string, std::size_t> rank;
  for (std::size_t i = 0; i < order_.size(); ++i) rank.emplace(order_[i], i);
  auto rank_of = [&](const onnx::TensorProto* t) {
    auto it = rank.find(t->name());
    return it == rank.end() ? rank.size() : it->second;
  };
  std::stable_sort(list->pointer_begin(), list->pointer_end(),
                   [&](const onnx::TensorProto* a, const onnx::TensorProto* b) {
                     return rank_of(a) < rank_of(b);
                   });
}

namespace {

thread_local std::string t_problem;

bool checked_operator(const std::string& op) {
  static const std::set<std::string> ops{"Conv",
                                         "ConvTranspose",
                                         "ConvInteger",
                                         "QLinearConv",
                                         "MaxPool",
                                         "AveragePool",
                                         "LpPool",
                                         "MaxUnpool",
                                         "Range",
                                         "Tile",
                                         "Expand",
                                         "Reshape",
                                         "ConstantOfShape",
                                         "Concat",
                                         "Resize",
                                         "Upsample",
                                         "Pad"};
  return ops.count(op) > 0;
}

// Runs check_node on what an inference context holds; false (the problem in t_problem) when the
// node fails it.
bool check_context(const std::string& op, onnx::InferenceContext& ctx) {
  onnx::NodeProto node;
  node.set_op_type(op);
  node.add_output("?");
  const auto n = static_cast<int>(ctx.getNumInputs());
  std::vector<std::optional<GuardDims>> dims(static_cast<std::size_t>(n));
  std::unordered_map<std::string, int> index;
  for (int i = 0; i < n; ++i) {
    node.add_input("input " + std::to_string(i));
    index.emplace(node.input(i), i);
    const onnx::TypeProto* t = ctx.getInputType(static_cast<std::size_t>(i));
    if (t == nullptr || !t->has_tensor_type() || !t->tensor_type().has_shape()) continue;
    GuardDims d;
    for (const auto& dim : t->tensor_type().shape().dim())
      if (dim.has_dim_value()) d.push_back(dim.dim_value());
    if (d.size() == static_cast<std::size_t>(t->tensor_type().shape().dim_size()))
      dims[static_cast<std::size_t>(i)] = std::move(d);
  }
  for (const char* name : {"strides", "kernel_shape", "dilations", "pads", "output_padding",
                           "output_shape", "group", "axis", "allowzero"})
    if (const onnx::AttributeProto* a = ctx.getAttribute(name)) *node.add_attribute() = *a;
  const KnownInputs known{
      [&](const std::string& name) -> const GuardDims* {
        auto it = index.find(name);
        if (it == index.end()) return nullptr;
        const auto& d = dims[static_cast<std::size_t>(it->second)];
        return d ? &*d : nullptr;
      },
      [&](const std::string& name) -> const onnx::TensorProto* {
        auto it = index.find(name);
        return it == index.end() ? nullptr : ctx.getInputData(static_cast<std::size_t>(it->second));
      }};
  try {
    check_node(node, known);
    return true;
  } catch (const InvalidInput& e) {
    if (t_problem.empty()) t_problem = e.what();
    return false;
  }
}

class CheckingRegistry final : public onnx::ISchemaRegistry {
 public:
  const onnx::OpSchema* GetSchema(const std::string& key, const int version,
                                  const std::string& domain) const override {
    const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(key, version, domain);
    if (schema == nullptr || !(domain.empty() || domain == "ai.onnx") || !checked_operator(key) ||
        !schema->has_type_and_shape_inference_function())
      return schema;
    std::lock_guard lock(mutex_);
    auto& copy = wrapped_[schema];
    if (!copy) {
      copy = std::make_unique<onnx::OpSchema>(*schema);
      copy->TypeAndShapeInferenceFunction(
          [op = key,
           infer = schema->GetTypeAndShapeInferenceFunction()](onnx::InferenceContext& ctx) {
            if (check_context(op, ctx)) infer(ctx);
          });
    }
    return copy.get();
  }

 private:
  mutable std::mutex mutex_;
  mutable std::map<const onnx::OpSchema*, std::unique_ptr<onnx::OpSchema>> wrapped_;
};

}  // namespace

const onnx::ISchemaRegistry& checking_registry() {
  static const CheckingRegistry registry;
  return registry;
}

std::string take_problem() {
  return std::exchange(t_problem, std::string());
}

}  // namespace modelmem::model::detail
