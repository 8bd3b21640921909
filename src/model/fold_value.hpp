// The values the constant-folding pass computes with (model/fold.hpp) and the kernels over them:
// a small tensor of exact int64 or double elements, its conversion from and to ONNX TensorProto,
// node attribute lookup, and one function per folded operator (broadcasting arithmetic, Cast,
// Gather, Concat, Slice, Transpose, Reshape, Range, Expand, Where, the unary ops). Every kernel
// returns nullopt for what it cannot compute exactly (unknown type, overflow, more than
// kMaxFoldElements elements), leaving the node to the runtime. Internal to src/model/.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/fold.hpp"

namespace modelmem::model::detail {

using Dims = std::vector<std::int64_t>;

// A small tensor value. Integer and boolean types keep exact int64 values (Slice uses INT64_MAX
// as "to the end", which a double cannot hold); float types use doubles.
struct Value {
  std::int32_t dtype = onnx::TensorProto::INT64;
  Dims dims;
  std::vector<std::int64_t> ints;
  std::vector<double> reals;

  bool is_real() const {
    return dtype == onnx::TensorProto::FLOAT || dtype == onnx::TensorProto::DOUBLE;
  }
  std::size_t count() const { return is_real() ? reals.size() : ints.size(); }
  double real_at(std::size_t i) const {
    return is_real() ? reals[i] : static_cast<double>(ints[i]);
  }
};

// --- values and protos (fold_value.cpp) ---
bool foldable_type(std::int32_t t);
/// Element count of dims, nullopt when negative, overflowing or above kMaxFoldElements.
std::optional<std::size_t> element_count(const Dims& dims);
/// The value of an initializer with data, nullopt for external, graph-only or unfoldable ones.
std::optional<Value> from_tensor(const onnx::TensorProto& t);
onnx::TensorProto to_tensor(const Value& v, const std::string& name);
const onnx::AttributeProto* attribute(const onnx::NodeProto& node, const char* name);
std::int64_t int_attribute(const onnx::NodeProto& node, const char* name, std::int64_t dflt);
std::optional<Dims> ints_attribute(const onnx::NodeProto& node, const char* name);
/// Value of a Constant node's attribute (value, value_int(s), value_float(s)).
std::optional<Value> constant_value(const onnx::NodeProto& node);
Value make_ints(Dims dims, std::vector<std::int64_t> ints,
                std::int32_t dtype = onnx::TensorProto::INT64);

// --- kernels (fold_ops.cpp) ---
/// Throws InvalidInput when an integer Add, Sub or Mul overflows its type (nullopt for what it
/// cannot compute otherwise).
std::optional<Value> binary(const std::string& op, const Value& a, const Value& b);
std::optional<Value> cast(const Value& v, std::int64_t to);
std::optional<Value> unsqueeze(const Value& v, const Dims& axes);
std::optional<Value> squeeze(const Value& v, const std::optional<Dims>& axes);
std::optional<Value> gather(const Value& data, const Value& indices, std::int64_t axis);
std::optional<Value> concat(const std::vector<const Value*>& parts, std::int64_t axis);
/// Slice along some axes of a value of any rank.
std::optional<Value> slice(const Value& data, const Dims& starts, const Dims& ends,
                           const std::optional<Dims>& axes, const std::optional<Dims>& steps);
std::optional<Value> transpose(const Value& data, const std::optional<Dims>& perm);
std::optional<Value> reshape(const Value& data, const Value& shape, bool allow_zero);
std::optional<Value> range(const Value& start, const Value& limit, const Value& delta);
std::optional<Value> expand(const Value& data, const Value& shape);
std::optional<Value> where(const Value& c, const Value& x, const Value& y);
std::optional<Value> unary(const std::string& op, const Value& v);

}  // namespace modelmem::model::detail
