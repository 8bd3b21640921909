// Builds small ONNX models in memory for the tests (bad inputs, reuse rules, orders).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "modelmem/model/graph.hpp"

namespace modelmem::model::testing {

using Dim = std::variant<std::int64_t, std::string>;

class ModelBuilder {
 public:
  explicit ModelBuilder(int opset = 13) {
    model_.set_ir_version(8);
    auto* op = model_.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    model_.mutable_graph()->set_name("test");
  }

  ModelBuilder& input(const std::string& name, const std::vector<Dim>& dims,
                      int dtype = onnx::TensorProto::FLOAT) {
    set_type(model_.mutable_graph()->add_input(), name, dims, dtype);
    return *this;
  }
  ModelBuilder& output(const std::string& name, int dtype = onnx::TensorProto::FLOAT) {
    auto* vi = model_.mutable_graph()->add_output();
    vi->set_name(name);
    vi->mutable_type()->mutable_tensor_type()->set_elem_type(dtype);
    return *this;
  }
  /// A graph-only float weight: dims and type, no data.
  ModelBuilder& weight(const std::string& name, const std::vector<std::int64_t>& dims,
                       int dtype = onnx::TensorProto::FLOAT) {
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(dtype);
    for (auto d : dims) t->add_dims(d);
    return *this;
  }
  ModelBuilder& ints(const std::string& name, const std::vector<std::int64_t>& values) {
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<std::int64_t>(values.size()));
    for (auto v : values) t->add_int64_data(v);
    return *this;
  }
  /// A rank-0 int64 initializer (Gather's single index).
  ModelBuilder& scalar(const std::string& name, std::int64_t value) {
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_int64_data(value);
    return *this;
  }
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& in,
                        const std::vector<std::string>& out, const std::string& name = "") {
    auto* n = model_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? out.front() + "_node" : name);
    for (const auto& i : in) n->add_input(i);
    for (const auto& o : out) n->add_output(o);
    return *n;
  }
  static void int_attr(onnx::NodeProto& n, const std::string& name, std::int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }

  static void ints_attr(onnx::NodeProto& n, const std::string& name,
                        const std::vector<std::int64_t>& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (auto x : v) a->add_ints(x);
  }
  static void string_attr(onnx::NodeProto& n, const std::string& name, const std::string& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  }

  onnx::ModelProto& proto() { return model_; }
  std::string bytes() const { return model_.SerializeAsString(); }
  Graph load(const LoadOptions& options = {}) const {
    return load_onnx_bytes(bytes(), "test.onnx", "", options);
  }

 private:
  static void set_type(onnx::ValueInfoProto* vi, const std::string& name,
                       const std::vector<Dim>& dims, int dtype) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(dtype);
    auto* shape = tt->mutable_shape();
    for (const auto& d : dims) {
      auto* dim = shape->add_dim();
      if (std::holds_alternative<std::int64_t>(d)) {
        dim->set_dim_value(std::get<std::int64_t>(d));
      } else {
        dim->set_dim_param(std::get<std::string>(d));
      }
    }
  }
  onnx::ModelProto model_;
};

}  // namespace modelmem::model::testing
